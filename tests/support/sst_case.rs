//! A small synthetic treebank and sst-lstm trained on it through the
//! session: the bodies the CPU tests (`tests/sentences.rs`,
//! `tests/sentences_zero_alloc.rs`) and the GPU test
//! (`tests/gpu/sentences.rs`) share.

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

use bumpgrad::models::{SstLstm, SstLstmConfig};
use bumpgrad::nn::ModelChoice;
use bumpgrad::optim::AdamWConfig;
use bumpgrad::tasks::{SentenceClassification, SentenceClassificationConfig};
use bumpgrad::train::{DeviceConfig, EpochReport, Observer, TrainConfig};
use std::path::PathBuf;

/// Words that make a sentence positive, negative, or neither.
const POSITIVE: [&str; 4] = ["good", "great", "fine", "lovely"];
const NEGATIVE: [&str; 4] = ["bad", "awful", "dull", "poor"];
const FILLER: [&str; 8] = ["the", "film", "a", "plot", "is", "was", "very", "story"];

/// A tree over `words`, branching right, every node neutral but the root.
fn tree(words: &[String], root: u8) -> String {
    match words {
        [] => unreachable!("a sentence has a word"),
        [w] => format!("({root} {w})"),
        [w, rest @ ..] => format!("({root} (2 {w}) {})", tree(rest, 2)),
    }
}

/// `count` sentences of 2 to 17 words, half positive (root 4 or 3), half
/// negative (0 or 1): each holds a few words of its side among fillers, so
/// a model that reads the words learns the class. Drawn from `seed`.
fn trees(count: usize, seed: u64) -> String {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut out = String::new();
    for i in 0..count {
        let positive = i % 2 == 0;
        let length = 2 + next(16);
        let words: Vec<String> = (0..length)
            .map(|_| {
                let side = if positive { &POSITIVE } else { &NEGATIVE };
                match next(3) {
                    0 => side[next(4)].to_string(),
                    _ => FILLER[next(8)].to_string(),
                }
            })
            .collect();
        let root = if positive { 3 + next(2) as u8 } else { next(2) as u8 };
        out.push_str(&tree(&words, root));
        out.push('\n');
    }
    out
}

/// A treebank of `train` training and `dev` development (and as many test)
/// sentences, written where the test reads it.
pub fn synthetic_treebank(name: &str, train: usize, dev: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bumpgrad-sst-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    for (file, count, seed) in [("train.txt", train, 1), ("dev.txt", dev, 2), ("test.txt", dev, 3)] {
        std::fs::write(dir.join(file), trees(count, seed)).expect("a tree file written");
    }
    dir
}

/// A small sst-lstm: embedding 16, 1 layer of 32.
pub fn small_sst_lstm() -> ModelChoice {
    SstLstm::choice(SstLstmConfig {
        embed: 16,
        hidden: 32,
        layers: 1,
        fixed_embedding: false,
    })
}

/// `model` on `treebank` in two classes and `buckets` buckets, batches of
/// 8, AdamW at 1e-2, for `epochs`.
pub fn config(treebank: PathBuf, buckets: usize, device: &DeviceConfig, epochs: usize) -> TrainConfig {
    TrainConfig::builder()
        .epochs(epochs)
        .batch(8)
        .model(small_sst_lstm())
        .task(SentenceClassification::choice(SentenceClassificationConfig {
            classes: 2,
            buckets,
        }))
        .optimizer(AdamWConfig::default().choice())
        .lr(1e-2)
        .data_dir(treebank)
        .device_config(device.clone())
        .build()
}

/// Every step's loss and every epoch's report.
#[derive(Default)]
pub struct Seen {
    pub losses: Vec<f32>,
    pub reports: Vec<EpochReport>,
}

impl Observer for Seen {
    fn step(&mut self, _epoch: usize, _step: usize, loss: f32) {
        self.losses.push(loss);
    }
    fn epoch(&mut self, r: &EpochReport) {
        self.reports.push(r.clone());
    }
}

/// The mean of `losses`.
pub fn mean(losses: &[f32]) -> f64 {
    losses.iter().map(|&l| l as f64).sum::<f64>() / losses.len().max(1) as f64
}
