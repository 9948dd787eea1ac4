//! libFuzzer target: the CIFAR-10 record parser
//! (`bumpgrad::data::cifar::parse_records`) on arbitrary bytes.
//! `cargo +nightly fuzz run cifar`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    bumpgrad_fuzz::cifar_one(data);
});
