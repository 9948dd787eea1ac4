//! Character language models trained through the session: the bodies the
//! CPU tests (`tests/language_model.rs`) and the GPU test
//! (`tests/gpu/language_model.rs`) share.

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

use bumpgrad::models::{CharLmConfig, CharLstm};
use bumpgrad::nn::ModelChoice;
use bumpgrad::optim::AdamWConfig;
use bumpgrad::tasks::{LanguageModel, LanguageModelConfig};
use bumpgrad::train::{DeviceConfig, EpochReport, Observer, Pipeline, TrainConfig};
use std::path::PathBuf;

/// The first `bytes` of tiny-shakespeare, written where the test can read
/// it as a corpus of its own (its 90/10 split is this slice's).
pub fn shakespeare_slice(bytes: usize, name: &str) -> PathBuf {
    let text = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/data/tinyshakespeare/input.txt"))
        .expect("the shipped tiny-shakespeare");
    let dir = std::env::temp_dir().join(format!("bumpgrad-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("input.txt");
    std::fs::write(&path, &text[..bytes]).expect("the slice written");
    path
}

/// A small char-lstm: 1 layer of 64, embedding 32.
pub fn small_lstm() -> ModelChoice {
    CharLstm::choice(CharLmConfig {
        embed: 32,
        hidden: 64,
        layers: 1,
    })
}

/// `model` on `corpus`, `streams` streams of `seq_len` tokens, AdamW at
/// 1e-2, for `epochs`.
pub fn config(corpus: PathBuf, model: ModelChoice, device: &DeviceConfig, epochs: usize) -> TrainConfig {
    TrainConfig::builder()
        .epochs(epochs)
        .batch(16)
        .model(model)
        .task(LanguageModel::choice(LanguageModelConfig { seq_len: 16 }))
        .optimizer(AdamWConfig::default().choice())
        .lr(1e-2)
        .data_dir(corpus)
        .device_config(device.clone())
        .build()
}

/// Every step's loss and every epoch's report.
#[derive(Default)]
pub struct Seen {
    pub losses: Vec<f32>,
    pub reports: Vec<EpochReport>,
    pub graphs: usize,
}

impl Observer for Seen {
    fn step(&mut self, _epoch: usize, _step: usize, loss: f32) {
        self.losses.push(loss);
    }
    fn epoch(&mut self, r: &EpochReport) {
        self.reports.push(r.clone());
    }
}

/// Trains `cfg` through one session, every epoch.
pub fn train(cfg: &TrainConfig) -> Seen {
    let (mut session, _) = Pipeline::open(cfg, None).and_then(Pipeline::build).expect("a session");
    let mut seen = Seen::default();
    session.on_workers(|session| {
        for epoch in 1..=cfg.run.epochs {
            session.epoch(epoch, &mut seen).expect("an epoch");
        }
    });
    seen.graphs = session.graphs_captured();
    seen
}
