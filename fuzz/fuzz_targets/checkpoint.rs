//! libFuzzer target: the checkpoint decoder (`bumpgrad::checkpoint::parse`)
//! on arbitrary bytes. `cargo +nightly fuzz run checkpoint`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    bumpgrad_fuzz::checkpoint_one(data);
});
