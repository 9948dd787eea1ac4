//! Fuzz harnesses for bumpgrad's parsers of untrusted bytes, shared by the
//! libFuzzer targets (`fuzz_targets/`, nightly) and the bounded stable
//! runner (`src/bin/smoke.rs`).
//!
//! Each `*_one` function feeds one input to a parser and panics if the
//! parser breaks a promise its documentation makes; a panic inside the
//! parser is a finding too. They return a short label of the outcome (`ok`
//! or the error variant) so a runner can show which paths were reached.

use std::path::Path;

use bumpgrad::checkpoint::{self, Checkpoint};
use bumpgrad::data::cifar::{self, parse_records};
use bumpgrad::data::text::{treebank, Node, TextError, Tree};
use bumpgrad::data::{parse_images, parse_labels};

/// The path errors name for fuzzed bytes.
pub const FUZZ_PATH: &str = "<fuzz input>";

/// `parse_images` and `parse_labels` on the same bytes.
///
/// Promises checked: a returned `Images` has exactly `count * rows * cols`
/// pixels and the input was exactly header + pixels; labels likewise; every
/// error formats.
pub fn idx_one(data: &[u8]) -> String {
    let images = match parse_images(data) {
        Ok(images) => {
            let pixels = (images.count as u128) * (images.rows as u128) * (images.cols as u128);
            assert_eq!(images.pixels.len() as u128, pixels, "pixel count");
            assert_eq!(data.len(), 16 + images.pixels.len(), "input length");
            assert_eq!(&data[16..], &images.pixels[..], "pixels");
            if images.count > 0 {
                assert!(images.image(images.count - 1).is_some(), "last image");
            }
            assert!(images.image(images.count).is_none(), "past the end");
            "ok".to_string()
        }
        Err(e) => label(&format!("{e:?}"), &e.to_string()),
    };
    let labels = match parse_labels(data) {
        Ok(labels) => {
            assert_eq!(data.len(), 8 + labels.len(), "input length");
            assert_eq!(&data[8..], &labels[..], "labels");
            "ok".to_string()
        }
        Err(e) => label(&format!("{e:?}"), &e.to_string()),
    };
    format!("images {images}, labels {labels}")
}

/// `cifar::parse_records` on the bytes.
///
/// Promises checked: a returned set has one label below 10 per image, its
/// images are 3×32×32 and hold exactly the input's bytes after each
/// record's label byte, and the input was a whole number of records; every
/// error formats.
pub fn cifar_one(data: &[u8]) -> String {
    match parse_records(data) {
        Ok((images, labels)) => {
            let record = cifar::RECORD_BYTES;
            assert_eq!(data.len() % record, 0, "a partial record was accepted");
            assert_eq!(images.count, data.len() / record, "image count");
            assert_eq!(labels.len(), images.count, "label count");
            assert_eq!((images.channels, images.rows, images.cols), (3, 32, 32), "image shape");
            assert_eq!(images.pixels.len(), images.count * (record - 1), "pixel count");
            for (i, chunk) in data.chunks_exact(record).enumerate() {
                assert_eq!(labels[i], chunk[0], "label {i}");
                assert!(usize::from(labels[i]) < cifar::CLASSES, "label {i} out of range");
                assert_eq!(images.image(i), Some(&chunk[1..]), "image {i}");
            }
            assert!(images.image(images.count).is_none(), "past the end");
            "ok".to_string()
        }
        Err(e) => label(&format!("{e:?}"), &e.to_string()),
    }
}

/// `treebank::parse_file` on the bytes, as a Stanford Sentiment Treebank
/// split.
///
/// Promises checked: a returned file has one tree per line that is not
/// blank, and each tree keeps the invariants `Tree` documents (nodes in
/// post-order with the root last, every inner node's two children before
/// it, labels 0–4, `2·leaves − 1` nodes, its leaves in order its words,
/// none empty or holding a bracket); an error names the path, and a syntax
/// error a line of the input and a column at least 1.
pub fn sst_one(data: &[u8]) -> String {
    let path = Path::new(FUZZ_PATH);
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    match treebank::parse_file(path, data) {
        Ok(trees) => {
            let filled = lines
                .iter()
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
                .filter(|l| !l.iter().all(|&b| b == b' ' || b == b'\t'))
                .count();
            assert_eq!(trees.len(), filled, "trees for the lines that are not blank");
            assert!(!trees.is_empty(), "no trees accepted");
            for tree in &trees {
                check_tree(tree);
            }
            "ok".to_string()
        }
        Err(e) => {
            let message = e.to_string();
            assert!(message.contains(FUZZ_PATH), "the error names no path: {message}");
            if let TextError::TreeSyntax { line, column, .. } = e {
                assert!((1..=lines.len()).contains(&line), "line {line} of {}", lines.len());
                assert!(column >= 1, "column {column}");
            }
            label(&format!("{e:?}"), &message)
        }
    }
}

/// `Tree`'s documented invariants.
fn check_tree(tree: &Tree) {
    let nodes = tree.nodes();
    let mut leaves = Vec::new();
    for (at, node) in nodes.iter().enumerate() {
        assert!(node.label() <= 4, "label {}", node.label());
        match *node {
            Node::Leaf { word, .. } => leaves.push(word as usize),
            Node::Inner { left, right, .. } => {
                assert!(
                    (left as usize) < at && (right as usize) < at,
                    "children after node {at}"
                );
                assert!(left != right, "node {at} has one child twice");
            }
        }
    }
    assert_eq!(nodes.len(), 2 * leaves.len() - 1, "nodes for {} leaves", leaves.len());
    assert_eq!(
        leaves,
        (0..tree.words().len()).collect::<Vec<_>>(),
        "leaves out of order"
    );
    assert_eq!(tree.label(), nodes[nodes.len() - 1].label(), "the root is not last");
    for word in tree.words() {
        assert!(!word.is_empty() && !word.contains(['(', ')']), "word {word:?}");
    }
}

/// `checkpoint::parse` on the bytes.
///
/// Promises checked: every error names the path; whatever decodes
/// re-encodes, and decodes again to the same values, bit for bit.
pub fn checkpoint_one(data: &[u8]) -> String {
    let path = Path::new(FUZZ_PATH);
    match checkpoint::parse(data, path) {
        Ok(ckpt) => {
            round_trip(&ckpt);
            "ok".to_string()
        }
        Err(e) => {
            assert_eq!(e.path(), Some(path), "error without the path: {e:?}");
            label(&format!("{e:?}"), &e.to_string())
        }
    }
}

/// Encodes `ckpt`, decodes the bytes, and checks nothing changed. Panics if
/// a checkpoint the encoder accepted does not come back.
pub fn round_trip(ckpt: &Checkpoint) {
    let path = Path::new(FUZZ_PATH);
    let bytes = checkpoint::encode(ckpt).unwrap_or_else(|e| panic!("a valid checkpoint does not encode: {e}"));
    let back = checkpoint::parse(&bytes, path).unwrap_or_else(|e| panic!("an encoded checkpoint does not decode: {e}"));
    assert_eq!(
        (back.epoch, back.step, back.seed, &back.config_json, &back.extra),
        (ckpt.epoch, ckpt.step, ckpt.seed, &ckpt.config_json, &ckpt.extra),
        "metadata"
    );
    assert_eq!(back.tensors.len(), ckpt.tensors.len(), "tensor count");
    for t in &ckpt.tensors {
        let b = back
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("tensor {:?} lost", t.name));
        assert_eq!(b.shape, t.shape, "shape of {:?}", t.name);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&b.values), bits(&t.values), "values of {:?}", t.name);
    }
}

/// `Truncated { path: .. }` → `Truncated`; the message is formatted only so
/// that formatting is exercised too.
fn label(debug: &str, message: &str) -> String {
    assert!(!message.is_empty());
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
        .to_string()
}
