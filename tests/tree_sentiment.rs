//! The Tree-LSTM's sentiment task through the session, on the CPU: it
//! learns a small synthetic treebank one node at a time and level by
//! level; the arena its dry run sizes by the largest step holds every
//! step of every epoch on the real treebank; and a model or setting that
//! does not fit trees is refused.

use bumpgrad::tasks::{Metric, TreeBatching};
use bumpgrad::train::{DeviceConfig, EpochReport, Hooks, Observer, Pipeline, Reports, TrainConfig};
use std::path::Path;

#[path = "support/tree_case.rs"]
mod tree_case;
use tree_case::{config, phrase_treebank};

fn train(cfg: &TrainConfig) -> Vec<EpochReport> {
    train_and_test(cfg).0
}

/// Every epoch's report, and the test split's figures after the last.
fn train_and_test(cfg: &TrainConfig) -> (Vec<EpochReport>, Option<Metric>) {
    #[derive(Default)]
    struct Seen(Reports, Option<Metric>);
    impl Observer for Seen {
        fn epoch(&mut self, report: &EpochReport) {
            self.0.epoch(report);
        }
        fn tested(&mut self, metric: &Metric) {
            self.1 = Some(*metric);
        }
    }
    let mut seen = Seen::default();
    bumpgrad::train::train(cfg, Hooks::new(&mut seen)).expect("training");
    (seen.0 .0, seen.1)
}

#[test]
fn a_tree_lstm_learns_a_synthetic_treebank_one_node_at_a_time_and_by_level() {
    let data = phrase_treebank("learns");
    for (batch, batching) in [(1, TreeBatching::PostOrder), (8, TreeBatching::Levels)] {
        let (reports, tested) = train_and_test(&config(&data, batch, batching, 4, DeviceConfig::cpu(2)));
        let losses: Vec<f64> = reports.iter().map(|r| r.train_loss).collect();
        assert!(losses[3] < 0.3 * losses[0], "{batching:?}: the loss falls: {losses:?}");
        let last = reports.last().expect("four epochs");
        // Measured: roots 0.97, binary 1.0, nodes 0.995 both ways; chance
        // is 0.25, 0.5 and about 0.4.
        assert!(
            last.test_accuracy > 0.85,
            "{batching:?}: root accuracy {}",
            last.test_accuracy
        );
        let (binary, nodes) = (last.binary_accuracy.unwrap(), last.node_accuracy.unwrap());
        assert!(
            binary > 0.9 && nodes > 0.95,
            "{batching:?}: binary {binary}, nodes {nodes}"
        );
        assert!(!last.graph, "a step of its own shape each time is never captured");
        // The test split, after the last epoch: other trees, read as
        // well, but with every root's label the opposite of its phrase's
        // sign (see `phrase_treebank`), so the roots come out wrong there
        // and only there.
        let Some(Metric::TreeAccuracy { root, binary, nodes }) = tested else {
            panic!("{batching:?}: no test figures: {tested:?}");
        };
        assert!(
            root < 0.15 && binary < 0.1 && nodes > 0.8,
            "{batching:?}: test {root}, {binary}, {nodes}: the test split's flipped roots"
        );
    }
}

#[test]
fn the_arena_sized_by_the_largest_step_holds_every_step_of_every_epoch() {
    let sst = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/data/sst"));
    for (batch, batching) in [(10, TreeBatching::Levels), (1, TreeBatching::PostOrder)] {
        let mut cfg = config(sst, batch, batching, 2, DeviceConfig::cpu(2));
        // An epoch over the development split's 1,101 trees, as training.
        let dir = std::env::temp_dir().join(format!("bumpgrad-tree-arena-{}-{batch}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (to, from) in [
            ("train.txt", "dev.txt"),
            ("dev.txt", "dev.txt"),
            ("test.txt", "test.txt"),
        ] {
            std::fs::copy(sst.join(from), dir.join(to)).unwrap();
        }
        cfg.run.data_dir = dir.clone();
        let (_, info) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("a session");
        let room = info.arena.capacity_bytes - info.arena.persistent_bytes;
        // The whole arena as measured, nothing to spare: a step past the
        // bound would fail for want of room.
        cfg.memory.arena_size = Some(info.arena.capacity_bytes);
        let reports = train(&cfg);
        for r in &reports {
            let high = r.arena.step_high_water_bytes;
            assert!(
                high <= room,
                "{batching:?}: epoch {} reached {high} bytes of step memory above the {room} measured",
                r.epoch
            );
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn memory_reports_the_largest_step_its_lower_bound_and_the_first_epochs_steps() {
    let data = phrase_treebank("memory");
    let cfg = config(&data, 8, TreeBatching::Levels, 1, DeviceConfig::cpu(2));
    let (report, _) = bumpgrad::train::memory_report(&cfg).expect("a report");
    let d = report.dynamic.expect("a task whose every step differs");
    assert!(report.plans.is_empty(), "no step is planned");
    assert_eq!(report.arena_bytes, report.persistent_bytes + d.largest_bytes);
    assert_eq!(d.steps, 300usize.div_ceil(8));
    assert!(
        0 < d.mean_bytes && d.mean_bytes <= d.most_bytes && d.most_bytes <= d.largest_bytes,
        "{d:?}"
    );
    assert!(d.largest_lower_bound_bytes < d.largest_bytes, "{d:?}");
    // The arena `train` makes holds the same step region.
    let (_, info) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("a session");
    assert_eq!(info.arena.capacity_bytes - info.arena.persistent_bytes, d.largest_bytes);
    let text = report.table(|_| "step");
    assert!(text.contains("every step its own shape, bump-allocated"), "{text}");
}

#[test]
fn pretrained_word_vectors_start_the_embedding_and_a_frozen_one_never_moves() {
    let data = phrase_treebank("vectors");
    // Vectors for the four sentiment words, 12 numbers each, as the model
    // is sized; the fillers are left to their random draw.
    let words = ["good", "great", "bad", "dull"];
    let line = |k: usize, w: &str| {
        let numbers: Vec<String> = (0..12)
            .map(|j| format!("{:.3}", (k * 12 + j) as f32 * 0.01 - 0.2))
            .collect();
        format!("{w} {}\n", numbers.join(" "))
    };
    let file = data.join("vectors.txt");
    std::fs::write(
        &file,
        words.iter().enumerate().map(|(k, w)| line(k, w)).collect::<String>(),
    )
    .unwrap();
    for freeze in [true, false] {
        let mut cfg = config(&data, 8, TreeBatching::Levels, 2, DeviceConfig::cpu(2));
        cfg.run.embeddings = Some(file.clone());
        cfg.run.model = bumpgrad::models::TreeLstmSentiment::choice(bumpgrad::models::TreeLstmConfig {
            embed: 12,
            hidden: 10,
            fixed_embedding: freeze,
        });
        let (mut session, info) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("a session");
        let note = info.data_notes.iter().find(|n| n.contains("word embedding from"));
        assert!(
            note.is_some_and(|n| n.contains("4 of the vocabulary's")),
            "{:?}",
            info.data_notes
        );
        let read = |session: &mut bumpgrad::train::Session| {
            let tensors = session.state_tensors().expect("the state");
            let table = tensors.into_iter().find(|t| t.name == "embedding.weight");
            table.expect("the embedding").values
        };
        let before = read(&mut session);
        // The vocabulary is sorted, id 0 the unknown word: "bad" is id 2.
        let vocab = ["<unk>", "a", "bad", "dull", "film", "good", "great", "plot", "the"];
        for (k, w) in words.iter().enumerate() {
            let id = vocab.iter().position(|v| v == w).unwrap();
            let written: f32 = format!("{:.3}", (k * 12) as f32 * 0.01 - 0.2).parse().unwrap();
            assert_eq!(before[id * 12], written, "{w}: its first number");
        }
        session
            .on_workers(|s| {
                for epoch in 1..=2 {
                    s.epoch(epoch, &mut bumpgrad::train::Quiet)?;
                }
                Ok::<(), bumpgrad::Error>(())
            })
            .expect("training");
        let after = read(&mut session);
        assert_eq!(
            before == after,
            freeze,
            "frozen {freeze}: the table moved {}",
            before != after
        );
    }
    let mut cfg = config(&data, 8, TreeBatching::Levels, 1, DeviceConfig::cpu(2));
    cfg.run.embeddings = Some(file.clone());
    cfg.run.model = bumpgrad::models::TreeLstmSentiment::choice(bumpgrad::models::TreeLstmConfig {
        embed: 20,
        hidden: 10,
        fixed_embedding: false,
    });
    let err = Pipeline::open(&cfg, None)
        .and_then(Pipeline::build)
        .map(drop)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("gives vectors of 12 numbers, but the embedding has 20"),
        "{err}"
    );
}

#[test]
fn weight_decay_reaches_every_weight_of_the_tree_lstm_but_the_word_vectors() {
    let data = phrase_treebank("decay");
    let row_of_unknown = |model: bumpgrad::nn::ModelChoice, task: Option<bumpgrad::tasks::TaskChoice>| {
        let mut cfg = config(&data, 8, TreeBatching::Levels, 1, DeviceConfig::cpu(2));
        cfg.run.model = model;
        if let Some(task) = task {
            cfg.run.task = task;
        }
        cfg.run.optimizer = bumpgrad::optim::SgdConfig::default().weight_decay(0.5).choice();
        let (mut session, _) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("a session");
        let read = |session: &mut bumpgrad::train::Session, name: &str| {
            let tensors = session.state_tensors().expect("the state");
            tensors.into_iter().find(|t| t.name == name).expect(name).values
        };
        let (table, fc) = (read(&mut session, "embedding.weight"), read(&mut session, "fc.bias"));
        session
            .on_workers(|s| s.epoch(1, &mut bumpgrad::train::Quiet).map(drop))
            .expect("training");
        let (table_after, fc_after) = (read(&mut session, "embedding.weight"), read(&mut session, "fc.bias"));
        // Row 0 is the unknown word, which no training sentence holds: its
        // gradient is zero every step, so only decay could move it.
        let dim = 12;
        (table[..dim].to_vec(), table_after[..dim].to_vec(), fc != fc_after)
    };
    let tree = bumpgrad::models::TreeLstmSentiment::choice(bumpgrad::models::TreeLstmConfig {
        embed: 12,
        hidden: 10,
        fixed_embedding: false,
    });
    let (before, after, fc_moved) = row_of_unknown(tree, None);
    assert!(fc_moved);
    assert_eq!(before, after, "the Tree-LSTM's word vectors are never decayed");
    // sst-lstm decays every parameter, as PyTorch's default group: the
    // unknown word's row shrinks by 1 - lr·wd = 0.95 a step.
    let sst = bumpgrad::models::SstLstm::choice(bumpgrad::models::SstLstmConfig {
        embed: 12,
        hidden: 10,
        layers: 1,
        fixed_embedding: false,
    });
    let sentences = bumpgrad::tasks::SentenceClassification::choice(bumpgrad::tasks::SentenceClassificationConfig {
        classes: 5,
        buckets: 2,
    });
    let (before, after, _) = row_of_unknown(sst, Some(sentences));
    let ratio = after[0] / before[0];
    assert!(ratio < 0.99 && ratio > 0.0, "decayed: {before:?} -> {after:?}");
}
