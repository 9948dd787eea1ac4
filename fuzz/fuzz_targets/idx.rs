//! libFuzzer target: the IDX parsers (`bumpgrad::data::parse_images`,
//! `parse_labels`) on arbitrary bytes. `cargo +nightly fuzz run idx`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    bumpgrad_fuzz::idx_one(data);
});
