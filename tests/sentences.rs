//! Sentence classification on the CPU: sst-lstm learns a small synthetic
//! treebank through the session, which plans one training and one
//! evaluation step per length bucket; a sentence's logits are the same
//! alone and right-padded in a longer bucket; a batch's padding rows change
//! neither its loss nor its gradients; and models, data and settings that
//! do not fit are refused with what fits.

use bumpgrad::data::DataSource;
use bumpgrad::memory::Buf;
use bumpgrad::models::{CharLmConfig, CharLstm, SstLstm, SstLstmConfig};
use bumpgrad::nn::{Input, Mode, Model, ParamStore, SentenceInput};
use bumpgrad::ops::cross_entropy::CrossEntropyArgs;
use bumpgrad::tasks::{SentenceClassification, SentenceClassificationConfig};
use bumpgrad::train::{DeviceConfig, Pipeline, StepKind, TrainConfig};
use bumpgrad::{Device, Engine, Error, Setting, Shape, Step, Tensor};

#[path = "support/lstm_step.rs"]
mod lstm_step;
#[path = "support/sst_case.rs"]
mod sst_case;
#[path = "support/sst_step.rs"]
mod sst_step;
use sst_case::{config, mean, synthetic_treebank, Seen};

#[test]
fn sst_lstm_learns_a_synthetic_treebank_with_a_plan_per_bucket() {
    let cfg = config(synthetic_treebank("learns", 240, 64), 3, &DeviceConfig::cpu(2), 4);
    let (mut session, info) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("a session");
    let lengths = session.lengths().to_vec();
    assert_eq!(lengths.len(), 3, "three buckets of lengths 2 to 17: {lengths:?}");
    assert_eq!(
        *lengths.last().unwrap(),
        17,
        "the longest bucket holds the longest sentence"
    );
    // Every batch of a bucket is full (padding rows fill its last), so
    // each length has a training and an evaluation plan, and no other.
    let memory = info.memory.as_ref().expect("a memory report");
    let mut kinds: Vec<(&str, usize)> = memory.plans.iter().map(|p| (StepKind::name(p.key), p.peak)).collect();
    assert_eq!(memory.plans.len(), 2 * lengths.len(), "{kinds:?}");
    kinds.sort_unstable();
    let train_peaks: Vec<usize> = kinds
        .iter()
        .filter(|(k, _)| *k == "training step")
        .map(|p| p.1)
        .collect();
    assert_eq!(train_peaks.len(), lengths.len(), "{kinds:?}");
    let mut by_key: Vec<_> = memory.plans.iter().map(|p| (p.key, p.peak)).collect();
    by_key.sort_unstable();
    // The first length's training step is key 1, the next length's 5, …:
    // a longer bucket's step needs more memory.
    let train_by_length: Vec<usize> = by_key.iter().filter(|(k, _)| k % 4 == 1).map(|p| p.1).collect();
    assert!(
        train_by_length.windows(2).all(|w| w[0] < w[1]),
        "a longer bucket's training step peaks higher: {train_by_length:?}"
    );
    // Each bucket's plan within 5% of its lower bound (the target):
    // the most bytes alive together at any op of that bucket's step.
    for plan in &memory.plans {
        assert!(plan.peak >= plan.lower_bound);
        assert!(
            plan.peak as f64 <= 1.05 * plan.lower_bound as f64,
            "{} (key {}): peak {} against a lower bound of {}",
            StepKind::name(plan.key),
            plan.key,
            plan.peak,
            plan.lower_bound
        );
    }
    let notes = info.data_notes.join("\n");
    assert!(notes.contains("vocabulary of 17 words"), "{notes}");
    assert!(notes.contains("3 length buckets"), "{notes}");

    let mut seen = Seen::default();
    let steps = session.steps_per_epoch();
    session.on_workers(|session| {
        for epoch in 1..=cfg.run.epochs {
            session.epoch(epoch, &mut seen).expect("an epoch");
        }
    });
    assert_eq!(seen.losses.len(), 4 * steps);
    assert!(steps >= 240 / 8, "every sentence in a batch: {steps} steps");
    let first = mean(&seen.losses[..steps]);
    let last = mean(&seen.losses[3 * steps..]);
    assert!((mean(&seen.losses[..3]) - 2f64.ln()).abs() < 0.2, "starts near ln 2");
    assert!(last < 0.5 * first, "the training loss fell from {first} to {last}");
    let accuracy = seen.reports.last().unwrap().test_accuracy;
    eprintln!("sst-lstm: {steps} steps an epoch, loss {first:.4} in the first epoch, {last:.4} in the last; accuracy {accuracy:.3}");
    assert!(accuracy > 0.8, "development accuracy {accuracy}, chance 0.5");
    assert_eq!(session.graphs_captured(), 0, "no graphs on the CPU");
}

/// sst-lstm's sizes in these tests, over a vocabulary of 13 and 3 classes.
fn small() -> (SstLstmConfig, Input) {
    let config = SstLstmConfig {
        embed: 5,
        hidden: 7,
        layers: 1,
        fixed_embedding: false,
    };
    (
        config,
        Input {
            example: Shape::new(&[13]),
            classes: 3,
        },
    )
}

/// A batch of `rows` (a sentence's ids, or `None` for a padding row) as
/// `[T, B]` time-major ids and each row's last word.
fn batch(rows: &[Option<&[u32]>], steps: usize) -> (Vec<u32>, Vec<u32>) {
    let b = rows.len();
    let mut ids = vec![0; steps * b];
    let mut last = vec![0; b];
    for (r, row) in rows.iter().enumerate() {
        let words = row.unwrap_or(&[]);
        for (t, &w) in words.iter().enumerate() {
            ids[t * b + r] = w;
        }
        last[r] = (words.len().max(1) - 1) * b + r;
    }
    (ids, last.into_iter().map(|l| l as u32).collect())
}

fn read<'s>(s: &mut Step<'s>, t: Tensor<'s>) -> bumpgrad::Result<Vec<f32>> {
    let mut host = vec![0.0; t.shape().numel()];
    s.read(t, &mut host)?;
    Ok(host)
}

/// The model of [`small`] with its parameters drawn from seed 7.
fn model(engine: &mut Engine) -> (ParamStore, SstLstm) {
    let (config, input) = small();
    ParamStore::build(&mut engine.persistent(), 7, |pb| SstLstm::new(&config, input, pb)).expect("sst-lstm builds")
}

/// The logits of `rows`, padded to `steps`.
fn logits(engine: &mut Engine, model: &SstLstm, rows: &[Option<&[u32]>], steps: usize) -> Vec<f32> {
    let (ids, last) = batch(rows, steps);
    engine
        .step(|s| {
            s.set_grad_enabled(false);
            let x = SentenceInput {
                ids: s.labels(&ids)?,
                last: s.labels(&last)?,
                steps,
                batch: rows.len(),
            };
            let y = model.forward_sentences(s, x, Mode::Eval)?;
            read(s, y)
        })
        .expect("a forward pass")
}

#[test]
fn a_sentence_gives_the_same_logits_alone_and_padded_in_a_longer_bucket() {
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 8 << 20).unwrap();
    let (_, model) = model(&mut engine);
    let (a, b, c): (&[u32], &[u32], &[u32]) = (&[3, 1, 4], &[1, 5, 9, 2, 6, 5, 3], &[12]);
    let alone = logits(&mut engine, &model, &[Some(a)], 3);
    let padded = logits(&mut engine, &model, &[Some(b), Some(a), Some(c), None], 9);
    assert_eq!(padded.len(), 4 * 3);
    let diff = alone
        .iter()
        .zip(&padded[3..6])
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(
        diff <= 1e-6,
        "{alone:?} alone, {:?} in a bucket of 9: off by {diff}",
        &padded[3..6]
    );
    // And the model reads the sentence, not the bucket's last step: the
    // state after the padding is another.
    let (ids, _) = batch(&[Some(a)], 9);
    let after_padding = engine
        .step(|s| {
            s.set_grad_enabled(false);
            let x = SentenceInput {
                ids: s.labels(&ids)?,
                last: s.labels(&[8])?,
                steps: 9,
                batch: 1,
            };
            let y = model.forward_sentences(s, x, Mode::Eval)?;
            read(s, y)
        })
        .unwrap();
    let moved = alone
        .iter()
        .zip(&after_padding)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(
        moved > 1e-4,
        "the state after six padding words is not the sentence's: {moved}"
    );
}

/// The loss and every parameter's gradient of a batch of `rows` padded to
/// `steps`, classes `labels`, each row weighing `weights` (none: plain
/// mean).
fn loss_and_grads(
    engine: &mut Engine,
    (store, model): &(ParamStore, SstLstm),
    rows: &[Option<&[u32]>],
    steps: usize,
    labels: &[u32],
    weights: Option<Buf<f32>>,
) -> Vec<Vec<f32>> {
    let (ids, last) = batch(rows, steps);
    let params: Vec<_> = store.params().collect();
    engine
        .step(|s| {
            let x = SentenceInput {
                ids: s.labels(&ids)?,
                last: s.labels(&last)?,
                steps,
                batch: rows.len(),
            };
            let y = model.forward_sentences(s, x, Mode::Eval)?;
            let targets = s.labels(labels)?;
            let args = CrossEntropyArgs {
                weights,
                ..CrossEntropyArgs::default()
            };
            let loss = y.cross_entropy(s, targets, args)?;
            let grads = s.backward(loss)?;
            let mut out = vec![read(s, loss)?];
            for p in &params {
                let g = s.param_grad(&grads, p).expect("every parameter has a gradient");
                out.push(read(s, g)?);
            }
            Ok(out)
        })
        .expect("a step")
}

#[test]
fn padding_rows_change_neither_the_loss_nor_the_gradients() {
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 8 << 20).unwrap();
    let net = model(&mut engine);
    let (a, b): (&[u32], &[u32]) = (&[3, 1, 4], &[1, 5, 9, 2, 6]);
    // Two real rows of four: each weighs 4 / 2, the padding rows 0.
    let weights = engine
        .persistent()
        .upload("weights", Shape::new(&[4]), &[2.0f32, 2.0, 0.0, 0.0])
        .unwrap();
    let padded = loss_and_grads(
        &mut engine,
        &net,
        &[Some(a), Some(b), None, None],
        6,
        &[2, 0, 0, 0],
        Some(weights),
    );
    let alone = loss_and_grads(&mut engine, &net, &[Some(a), Some(b)], 6, &[2, 0], None);
    assert_eq!(padded.len(), 1 + 7, "the loss and sst-lstm's seven parameters");
    for (i, (p, r)) in padded.iter().zip(&alone).enumerate() {
        let scale = r.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "tensor {i} is all zeros, which proves nothing");
        let diff = p.iter().zip(r).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        assert!(
            diff <= 1e-6 * scale,
            "tensor {i} (0: the loss) differs by {diff} of scale {scale}"
        );
    }
    // Unweighted, the padding rows would count (the test can fail).
    let counted = loss_and_grads(
        &mut engine,
        &net,
        &[Some(a), Some(b), None, None],
        6,
        &[2, 0, 0, 0],
        None,
    );
    assert!(
        (counted[0][0] - alone[0][0]).abs() > 1e-3,
        "padding rows counted change the loss"
    );
}

/// The error of building `cfg`'s session.
fn refused(cfg: &TrainConfig) -> Error {
    match Pipeline::open(cfg, None).and_then(Pipeline::build) {
        Ok(_) => panic!("expected {:?} to be refused", cfg.run.model),
        Err(e) => e,
    }
}

#[test]
fn models_data_and_settings_that_do_not_fit_are_refused_with_what_fits() {
    let bank = synthetic_treebank("refused", 40, 16);
    let device = DeviceConfig::cpu(2);
    // A character model on sentences.
    let mut cfg = config(bank.clone(), 3, &device, 1);
    cfg.run.model = CharLstm::choice(CharLmConfig::default());
    let e = refused(&cfg);
    assert!(
        matches!(
            e,
            Error::Setting {
                setting: Setting::Model,
                ..
            }
        ) && e.to_string().contains("sentences"),
        "{e}"
    );
    // sst-lstm on a text corpus, whose task is a language model's.
    let corpus = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/data/tinyshakespeare/input.txt"));
    let mut cfg = config(corpus, 3, &device, 1);
    cfg.run.task = bumpgrad::tasks::LanguageModel::choice(Default::default());
    let e = refused(&cfg);
    assert!(
        matches!(
            e,
            Error::Setting {
                setting: Setting::Model,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("sst-lstm reads sentences of token ids"), "{e}");
    // sst-lstm on images.
    let mut cfg = config(bank.clone(), 3, &device, 1);
    cfg.run.task = bumpgrad::tasks::TaskChoice::default();
    cfg.run.data_dir = "synthetic:cifar10:64".into();
    let _ = DataSource::parse("synthetic:cifar10:64").expect("a synthetic source");
    let e = refused(&cfg);
    assert!(e.to_string().contains("sst-lstm reads sentences"), "{e}");
    // The sentence task on images says what it trains on.
    let mut cfg = config(bank.clone(), 3, &device, 1);
    cfg.run.data_dir = "synthetic:cifar10:64".into();
    let e = refused(&cfg);
    assert!(e.to_string().contains("treebank of sentences"), "{e}");
    // Three classes, and no buckets.
    for (classes, buckets, setting, says) in [
        (3, 3, Setting::Classes, "5 classes"),
        (2, 0, Setting::Buckets, "1 to 64 length buckets"),
    ] {
        let mut cfg = config(bank.clone(), 3, &device, 1);
        cfg.run.task = SentenceClassification::choice(SentenceClassificationConfig { classes, buckets });
        let e = refused(&cfg);
        assert!(
            matches!(&e, Error::Setting { setting: s, fix: Some(_), .. } if *s == setting)
                && e.to_string().contains(says),
            "{e}"
        );
    }
}

/// sst-lstm's one step against PyTorch's float64 answer
/// (`support/sst_step.rs`; the GPU's in `tests/gpu/sentences.rs`).
#[test]
fn sst_lstm_matches_pytorchs_float64_step() {
    let Some(ours) = sst_step::bumpgrad_step(Device::cpu(2).unwrap()) else {
        return;
    };
    sst_step::assert_matches_pytorch("cpu", &ours);
}
