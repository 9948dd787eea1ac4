//! libFuzzer target: the Stanford Sentiment Treebank reader
//! (`bumpgrad::data::text::treebank::parse_file`) on arbitrary bytes.
//! `cargo +nightly fuzz run sst`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    bumpgrad_fuzz::sst_one(data);
});
