//! A treebank whose phrases' sentiment is learnable, and tree-lstm's
//! settings over it: what the CPU tests (`tests/tree_sentiment.rs`) and
//! the GPU test (`tests/gpu/sequences.rs`) share.

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

use bumpgrad::models::{TreeLstmConfig, TreeLstmSentiment};
use bumpgrad::optim::AdagradConfig;
use bumpgrad::tasks::{TreeBatching, TreeSentiment, TreeSentimentConfig};
use bumpgrad::train::{DeviceConfig, TrainConfig};
use std::path::{Path, PathBuf};

/// A random binary tree over `words`, every node labelled by the words
/// under it: 3 where good words outnumber bad ones, 1 where bad ones do,
/// 2 where neither; `next` draws.
fn tree(words: &[&str], next: &mut impl FnMut(usize) -> usize) -> (String, i32) {
    if let [w] = words {
        let score = match *w {
            "good" | "great" => 1,
            "bad" | "dull" => -1,
            _ => 0,
        };
        return (format!("({} {w})", 2 + score), score);
    }
    let split = 1 + next(words.len() - 1);
    let (left, a) = tree(&words[..split], next);
    let (right, b) = tree(&words[split..], next);
    let score = a + b;
    (format!("({} {left} {right})", 2 + score.signum()), score)
}

/// A treebank whose every phrase's sentiment is the sign of its good
/// words less its bad ones, and every sentence's is not neutral:
/// learnable only by reading the words up the tree. In `test.txt` alone
/// every root carries the opposite label (1 and 3 swapped), so that a
/// figure read from the test split cannot pass for the development
/// split's: a model that learned gets its roots wrong there, and its
/// other nodes right.
pub fn phrase_treebank(name: &str) -> PathBuf {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let words = ["good", "great", "bad", "dull", "the", "film", "a", "plot"];
    let dir = std::env::temp_dir().join(format!("bumpgrad-trees-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    for (file, count) in [("train.txt", 300), ("dev.txt", 60), ("test.txt", 60)] {
        let mut text = String::new();
        while text.lines().count() < count {
            let sentence: Vec<&str> = (0..2 + next(9)).map(|_| words[next(words.len())]).collect();
            let (line, score) = tree(&sentence, &mut next);
            if score != 0 {
                let line = match file {
                    // The root's label is the line's second character.
                    "test.txt" => format!("({}{}", if score > 0 { 1 } else { 3 }, &line[2..]),
                    _ => line,
                };
                text += &line;
                text.push('\n');
            }
        }
        std::fs::write(dir.join(file), text).expect("a tree file written");
    }
    dir
}

/// A small tree-lstm (embedding 12, 10 units) on `data`, Adagrad lr 0.1.
pub fn config(data: &Path, batch: usize, batching: TreeBatching, epochs: usize, device: DeviceConfig) -> TrainConfig {
    let mut cfg = TrainConfig::builder()
        .epochs(epochs)
        .batch(batch)
        .data_dir(data.to_string_lossy().to_string())
        .model(TreeLstmSentiment::choice(TreeLstmConfig {
            embed: 12,
            hidden: 10,
            fixed_embedding: false,
        }))
        .task(TreeSentiment::choice(TreeSentimentConfig { batching }))
        .device_config(device)
        .poison_step(true)
        .lr(0.1)
        .build();
    cfg.run.optimizer = AdagradConfig::default().choice();
    cfg
}
