use super::*;
use crate::data::text::shipped;
use crate::{Device, Engine};

fn built(classes: usize, buckets: usize, batch: usize) -> (Engine, SentenceClassification, SentimentSet) {
    let set = DataSet::load(&shipped::sst()).unwrap();
    let config = SentenceClassificationConfig { classes, buckets };
    config.check(&set, batch).unwrap();
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 64 << 20).unwrap();
    let task = SentenceClassification::new(&config, &set, &mut engine.persistent(), batch).unwrap();
    assert_eq!(task.train_len(), config.train_len(&set, batch).unwrap());
    (engine, task, config.sentences(&set).unwrap().0)
}

/// Each batch of the split's current order: its bucket's length and its
/// rows' sentences (`None` for a padding row), read back from the places
/// the device order holds.
fn epoch(split: &Split, sentences: &Sentences) -> Vec<(usize, Vec<Option<usize>>)> {
    let batch = split.batches.batch();
    // Sentence `i` is in the first bucket that holds it, at `place[i]`.
    let mut at = std::collections::HashMap::new();
    for (i, &place) in split.place.iter().enumerate() {
        let bucket = split
            .bucket_lengths
            .iter()
            .position(|&n| n >= sentences.length(i))
            .unwrap();
        at.insert((bucket, place), i);
    }
    (0..split.bucket_of.len())
        .map(|k| {
            let bucket = split.bucket_of[k] as usize;
            let rows = split.host_order[k * batch..][..batch]
                .iter()
                .map(|&p| match p == split.padding[bucket] {
                    true => None,
                    false => Some(at[&(bucket, p)]),
                })
                .collect();
            (split.bucket_lengths[bucket], rows)
        })
        .collect()
}

#[test]
fn an_sst_epoch_visits_every_sentence_once_in_its_buckets_order_on_the_device() {
    let (mut engine, mut task, set) = built(2, 4, 100);
    assert!(task.lengths().len() <= 4 && task.lengths().windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        *task.lengths().last().unwrap(),
        56,
        "the longest bucket holds every split's longest sentence"
    );
    for e in 1..=2 {
        task.begin_epoch(&mut engine, 5, e).unwrap();
        let mut device = vec![0u32; task.train.host_order.len()];
        engine.read_persistent(task.train.order, &mut device).unwrap();
        // Compared whole, not printed: it is thousands of places long.
        assert!(
            device == task.train.host_order,
            "epoch {e}: the order is where the steps read it"
        );
        let batches = epoch(&task.train, &set.train);
        assert_eq!(batches.len() * 100, task.train_len());
        let mut seen = vec![0; set.train.len()];
        let mut padded = 0;
        for (k, (length, rows)) in batches.iter().enumerate() {
            assert_eq!(task.train_length(k), *length);
            padded += usize::from(rows.contains(&None));
            for &i in rows.iter().flatten() {
                seen[i] += 1;
                assert!(set.train.length(i) <= *length, "sentence {i} fits its bucket");
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "epoch {e}: every sentence once");
        assert!(padded <= task.lengths().len(), "padding only in a bucket's last batch");
    }
    // Each length has a training step and a development batch of it.
    for sample in task.samples() {
        let step = sample.train_step.expect("a training step of each length");
        assert_eq!(task.train_length(step), sample.length);
        let first = sample.test_first.expect("a development batch of each length");
        assert_eq!(task.test_length(first), sample.length);
    }
    let notes = task.describe().join("\n");
    assert!(
        notes.contains(&format!("{} of the test split", set.test.unknown())),
        "{notes}"
    );
    assert!(set.test.unknown() > 0);
}

#[test]
fn scores_count_the_real_rows_alone() {
    let (_, task, set) = built(5, 8, 25);
    // Logits that pick class 0 for every row of the first development batch.
    let mut outputs = vec![0.0f32; 25 * 5];
    outputs.chunks_exact_mut(5).for_each(|row| row[0] = 1.0);
    let rows = &task.dev.classes[..25];
    let zeros = rows.iter().filter(|&&c| c == 0).count() as f64;
    assert_eq!(task.score(&outputs, 0)[0], zeros);
    // The last batch holds padding rows, whose class is never counted.
    let last = task.test_len() - 25;
    let padding = task.dev.classes[last..].iter().filter(|&&c| c == PADDING_ROW).count();
    let real = 25 - padding;
    assert!(padding > 0 || real == 25);
    let zeros_last = task.dev.classes[last..].iter().filter(|&&c| c == 0).count() as f64;
    assert_eq!(task.score(&outputs, last)[0], zeros_last);
    assert_eq!(
        task.metric([set.dev.len() as f64, 0.0, 0.0], task.test_len()),
        Metric::Accuracy(1.0)
    );
}

#[test]
fn settings_and_data_it_cannot_train_on_are_refused() {
    let corpus = DataSet::load(&shipped::tiny_shakespeare()).unwrap();
    let err = SentenceClassificationConfig::default().input_of(&corpus).unwrap_err();
    assert!(
        err.to_string()
            .contains("a treebank of sentences, and the data is a text corpus"),
        "{err}"
    );
    let sst = DataSet::load(&shipped::sst()).unwrap();
    let err = SentenceClassificationConfig::default().check(&sst, 9_000).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Setting {
                setting: Setting::Batch,
                ..
            }
        ),
        "{err}"
    );
    let three = SentenceClassificationConfig { classes: 3, buckets: 8 };
    assert!(matches!(
        three.validate(),
        Err(Error::Setting {
            setting: Setting::Classes,
            ..
        })
    ));
    let many = SentenceClassificationConfig {
        classes: 5,
        buckets: 65,
    };
    assert!(matches!(
        many.validate(),
        Err(Error::Setting {
            setting: Setting::Buckets,
            ..
        })
    ));
}
