use super::*;
use crate::data::text::shipped;
use crate::{Device, Engine};

fn built(batch: usize) -> (Engine, TreeSentiment) {
    let set = DataSet::load(&shipped::sst()).unwrap();
    let config = TreeSentimentConfig::default();
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 64 << 20).unwrap();
    let task = TreeSentiment::new(&config, &set, batch).unwrap();
    assert_eq!(task.train_len(), config.train_len(&set, batch).unwrap());
    let _ = engine.persistent();
    (engine, task)
}

#[test]
fn an_epoch_batches_every_training_tree_once_in_an_order_of_the_seed_and_epoch() {
    let (mut engine, mut task) = built(25);
    let firsts = |task: &TreeSentiment| -> Vec<Vec<u32>> { task.epoch.iter().map(|b| b.words.clone()).collect() };
    let mut orders = Vec::new();
    for (seed, epoch) in [(5, 1), (5, 2), (5, 1), (6, 1)] {
        task.begin_epoch(&mut engine, seed, epoch).unwrap();
        assert_eq!(task.epoch.len(), task.train.len().div_ceil(25));
        let trees: usize = task.epoch.iter().map(|b| b.forest.len()).sum();
        let nodes: usize = task.epoch.iter().map(|b| b.labels.len()).sum();
        assert_eq!(trees, task.train.len());
        assert_eq!(nodes, task.train.iter().map(|t| t.labels.len()).sum::<usize>());
        orders.push(firsts(&task));
    }
    assert_ne!(orders[0], orders[1], "each epoch its own order");
    assert_eq!(orders[0], orders[2], "the same seed and epoch, the same order");
    assert_ne!(orders[0], orders[3], "another seed, another order");
}

#[test]
fn the_largest_step_holds_the_largest_trees_and_the_tallest() {
    let (_, task) = built(10);
    let mut sizes: Vec<usize> = task.train.iter().map(|t| t.labels.len()).collect();
    sizes.sort_unstable();
    let ten_largest: usize = sizes.iter().rev().take(10).sum();
    // Eleven trees: the ten of most nodes of any split, the tallest too.
    assert_eq!(task.bound.forest.len(), 11);
    assert!(
        task.bound.forest.nodes() > ten_largest,
        "{} nodes",
        task.bound.forest.nodes()
    );
    let tallest = task.train.iter().map(|t| t.height).max().unwrap();
    assert!(task.bound.forest.height() >= tallest);
    for batch in &task.dev {
        assert!(batch.forest.nodes() < task.bound.forest.nodes());
        assert!(batch.forest.height() <= task.bound.forest.height());
    }
}

#[test]
fn scores_count_roots_by_class_and_by_sign_and_every_node() {
    let (_, task) = built(25);
    // A batch with roots of class 0, of class 1 and positive ones.
    let has = |b: &TreeBatch, f: &dyn Fn(u32) -> bool| b.roots.iter().any(|&k| f(b.labels[k]));
    let k = (0..task.dev.len())
        .find(|&k| {
            let b = &task.dev[k];
            has(b, &|l| l == 0) && has(b, &|l| l == 1) && has(b, &|l| l > 2)
        })
        .expect("such a batch");
    let (batch, first) = (&task.dev[k], k * 25);
    // Logits naming every node's own label: all right.
    let mut outputs = vec![0.0f32; batch.labels.len() * CLASSES];
    for (row, &label) in outputs.chunks_exact_mut(CLASSES).zip(&batch.labels) {
        row[label as usize] = 3.0;
    }
    let non_neutral = batch.roots.iter().filter(|&&k| batch.labels[k] != 2).count();
    assert_eq!(
        task.score(&outputs, first),
        [batch.roots.len() as f64, non_neutral as f64, batch.labels.len() as f64]
    );
    // Class 0 everywhere: the roots labelled 0 are right, the negative ones
    // right by sign, the nodes labelled 0 right.
    outputs.chunks_exact_mut(CLASSES).for_each(|row| {
        row.fill(0.0);
        row[0] = 1.0;
    });
    let roots_0 = batch.roots.iter().filter(|&&k| batch.labels[k] == 0).count();
    let negative = batch.roots.iter().filter(|&&k| batch.labels[k] < 2).count();
    let nodes_0 = batch.labels.iter().filter(|&&l| l == 0).count();
    assert!(roots_0 > 0 && negative > roots_0 && negative < non_neutral);
    assert_eq!(
        task.score(&outputs, first),
        [roots_0 as f64, negative as f64, nodes_0 as f64]
    );
    let [trees, signed, nodes] = task.dev_counts.map(|n| n as f64);
    assert_eq!(
        task.metric([trees / 2.0, signed, nodes / 4.0], task.test_len()),
        Metric::TreeAccuracy {
            root: 0.5,
            binary: 1.0,
            nodes: 0.25
        }
    );
}

#[test]
fn the_loss_sums_over_a_trees_nodes_and_averages_over_the_trees() {
    let (mut engine, task) = built(4);
    let (logits, labels) = (
        [
            0.5f32, -1.0, 2.0, 0.0, 1.0, 1.5, 0.2, -0.3, 0.0, 0.7, -2.0, 0.1, 0.4, 0.4, 0.9,
        ],
        [2u32, 4, 0],
    );
    let loss = engine
        .step(|s| {
            let x = s.input("logits", Shape::new(&[3, CLASSES]), &logits)?;
            let targets = s.labels(&labels)?;
            // Three nodes of two trees.
            let loss = task.loss(s, x, targets, 2)?;
            let mut out = [0.0];
            s.read(loss, &mut out)?;
            Ok(out[0])
        })
        .unwrap();
    let by_hand: f32 = logits
        .chunks_exact(CLASSES)
        .zip(labels)
        .map(|(row, label)| {
            let lse = row.iter().map(|v| v.exp()).sum::<f32>().ln();
            lse - row[label as usize]
        })
        .sum::<f32>()
        / 2.0;
    assert!((loss - by_hand).abs() < 1e-5, "{loss} against {by_hand}");
}
