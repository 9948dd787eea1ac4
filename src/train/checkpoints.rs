//! A session's checkpoints: what goes in one, when one is written, and where
//! a resumed run continues.
//!
//! A checkpoint holds the parameters, the optimizer's momentum, the steps
//! done and the position in the epoch (with the loss summed so far, so a
//! resumed epoch reports the same mean). Everything else a run draws is a
//! function of the seed and that position — each epoch's order of
//! `(seed, epoch)`, each dropout mask of `(seed, global step)` — so a resumed
//! run continues bit for bit where the interrupted one stopped.

use crate::checkpoint::{self, Checkpoint, NamedTensor};
use crate::{Error, Result, Setting};
use std::path::PathBuf;
use std::str::FromStr;

/// How often periodic checkpoints are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Every {
    /// Every this many training steps.
    Steps(u64),
    /// At the end of every this many epochs.
    Epochs(u64),
}

impl FromStr for Every {
    type Err = String;

    /// `500steps`, `2epochs`, or a bare number of epochs; never 0.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let s = s.trim();
        let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("cannot read {s:?} as a checkpoint interval; write e.g. 500steps or 2epochs"))?;
        if n == 0 {
            return Err("a checkpoint interval must be at least 1 (500steps, 1epoch)".into());
        }
        match unit.trim() {
            "" | "epoch" | "epochs" => Ok(Self::Epochs(n)),
            "step" | "steps" => Ok(Self::Steps(n)),
            other => Err(format!(
                "unknown unit {other:?} in {s:?}; write e.g. 500steps or 2epochs"
            )),
        }
    }
}

/// Where checkpoints go and how many stay.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckpointPolicy {
    /// The directory, made when the first checkpoint is written.
    pub dir: PathBuf,
    /// `None`: only when the run is stopped by a signal.
    pub every: Option<Every>,
    /// The newest this many are kept; older ones are deleted.
    pub keep: usize,
}

/// A point in a run, between two steps.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Position {
    /// Epochs completed.
    pub epochs_done: usize,
    /// Steps of epoch `epochs_done + 1` already done.
    pub step_in_epoch: usize,
    /// Sum of those steps' losses.
    pub loss_sum: f64,
}

impl Position {
    /// The start of epoch `epochs_done + 1`.
    pub fn epoch_start(epochs_done: usize) -> Self {
        Self {
            epochs_done,
            ..Self::default()
        }
    }
}

const STEP_IN_EPOCH: &str = "step_in_epoch";
const LOSS_SUM: &str = "epoch_loss_sum";
/// Settings a resumed run must share with the checkpoint's run, or its
/// batches would not be the ones the checkpoint's run would have drawn.
/// The model and optimizer are recorded with their settings, so a
/// checkpoint resumes only into the network and optimizer that wrote it.
/// The precision (fp32, TF32 or bf16) is not among them: it is how the
/// device computes, not part of the model or its state (bf16 runs keep
/// fp32 master weights, so their checkpoints are fp32 too), so a run may
/// resume under another. The model's sizes are in its description
/// (`char-lstm CharLmConfig { embed: 128, hidden: 512, layers: 2 }`); the
/// shape of an example the model is built for is the last entry (a
/// language model's window of tokens, `[T]`: another `T` would read other
/// windows, another epoch's length).
const SAME: [&str; 6] = ["batch", "train_limit", "model", "optimizer", "augment", "example"];

/// Values of the settings in [`SAME`], as the checkpoint records them.
pub(crate) fn fingerprint(
    batch: usize,
    train_limit: Option<usize>,
    model: &str,
    optimizer: &str,
    augment: &str,
    example: &str,
) -> Vec<(&'static str, String)> {
    vec![
        (SAME[0], batch.to_string()),
        (SAME[1], train_limit.map_or("all".into(), |n| n.to_string())),
        (SAME[2], model.to_string()),
        (SAME[3], optimizer.to_string()),
        (SAME[4], augment.to_string()),
        (SAME[5], example.to_string()),
    ]
}

/// Refuses a checkpoint of another model, or of the same model at other
/// sizes: then naming the sizes that differ, each with both values, the
/// checkpoint's as the fix (`hidden 16, layers 1`).
fn refuse_model(found: &str, want: &str) -> Result<Position> {
    let name = |d: &str| d.split_whitespace().next().unwrap_or_default().to_string();
    let differ: Vec<(&str, &str, &str)> = match (sizes(found), sizes(want)) {
        (Some(a), Some(b)) if name(found) == name(want) && a.len() == b.len() => a
            .iter()
            .zip(&b)
            .filter(|(x, y)| x != y)
            .map(|((field, was), (_, is))| (*field, *was, *is))
            .collect(),
        _ => Vec::new(),
    };
    if differ.is_empty() || differ.iter().any(|(f, _, _)| sizes_field(f).is_none()) {
        return Err(Error::setting(
            Setting::Model,
            format!("cannot resume from this checkpoint: it was made with model {found}, this run has {want}"),
            Some(name(found)),
        ));
    }
    let list = |pick: fn(&(&str, &str, &str)) -> String| differ.iter().map(pick).collect::<Vec<_>>().join(", ");
    Err(Error::setting(
        Setting::ModelSize,
        format!(
            "cannot resume from this checkpoint: it was made with {} of {}, this run's has {}",
            name(found),
            list(|(f, was, _)| format!("{f} {was}")),
            list(|(f, _, is)| format!("{f} {is}")),
        ),
        Some(list(|(f, was, _)| format!("{f} {was}"))),
    ))
}

/// A model description's sizes, `Name { a: 1, b: 2 }` as `[("a", "1"),
/// ("b", "2")]`; `None` for any other form (nested settings).
fn sizes(description: &str) -> Option<Vec<(&str, &str)>> {
    let inner = description.split_once('{')?.1.strip_suffix('}')?.trim();
    if inner.contains(['{', '(', '[']) {
        return None;
    }
    inner
        .split(", ")
        .map(|pair| pair.split_once(": ").map(|(k, v)| (k.trim(), v.trim())))
        .collect()
}

/// A size field is a lower-case word (`hidden`, `width_mult`).
fn sizes_field(field: &str) -> Option<&str> {
    (!field.is_empty() && field.chars().all(|c| c.is_ascii_lowercase() || c == '_')).then_some(field)
}

/// Refuses a checkpoint made for examples of another shape: a language
/// model's window of another length (`[T]`), or other images.
fn refuse_example(found: &str, want: &str) -> Result<Position> {
    let tokens = |d: &str| d.strip_prefix('[')?.strip_suffix(']')?.parse::<usize>().ok();
    match (tokens(found), tokens(want)) {
        (Some(was), Some(is)) => Err(Error::setting(
            Setting::SeqLen,
            format!(
                "cannot resume from this checkpoint: it was made with windows of {was} tokens, this run reads {is}"
            ),
            Some(was.to_string()),
        )),
        _ => Err(Error::setting(
            Setting::Data,
            format!(
                "cannot resume from this checkpoint: it was made for examples of shape {found}, this run's are {want}"
            ),
            None,
        )),
    }
}

/// A checkpoint of `tensors` at `at`, after `steps_done` steps.
pub(crate) fn make(
    tensors: Vec<NamedTensor>,
    at: Position,
    steps_done: u64,
    seed: u64,
    config_json: String,
    fingerprint: &[(&'static str, String)],
) -> Checkpoint {
    let mut extra: std::collections::BTreeMap<String, String> =
        fingerprint.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    extra.insert(STEP_IN_EPOCH.into(), at.step_in_epoch.to_string());
    // As bits: a resumed epoch's mean must be the uninterrupted one's.
    extra.insert(LOSS_SUM.into(), format!("{:016x}", at.loss_sum.to_bits()));
    Checkpoint {
        epoch: at.epochs_done as u64,
        step: steps_done,
        seed,
        config_json,
        extra,
        tensors,
    }
}

/// Where `ckpt` says its run stood; refuses one made with other settings.
pub(crate) fn position(ckpt: &Checkpoint, seed: u64, fingerprint: &[(&'static str, String)]) -> Result<Position> {
    let refuse = |setting, what: String, fix: String| {
        Err(Error::setting(
            setting,
            format!("cannot resume from this checkpoint: {what}"),
            Some(fix),
        ))
    };
    if ckpt.seed != seed {
        return refuse(
            Setting::Seed,
            format!("it was made with seed {}, this run has seed {seed}", ckpt.seed),
            ckpt.seed.to_string(),
        );
    }
    for (key, want) in fingerprint {
        // Checkpoints from before augmentation existed trained without it;
        // those from before the example's shape was recorded say nothing of
        // it (their models, images or windows, check the tensors' shapes).
        let recorded = ckpt.extra.get(*key).map(String::as_str);
        // A task's own settings (`TaskConfig::fingerprint`) were not
        // recorded before they were part of it: such a checkpoint is taken
        // as made with this run's.
        let recorded = recorded
            .or((*key == SAME[4]).then_some("none"))
            .or((*key == SAME[5] || !SAME.contains(key)).then_some(want.as_str()));
        match recorded {
            Some(found) if found == want => {}
            Some(found) if *key == SAME[2] => return refuse_model(found, want),
            Some(found) if *key == SAME[5] => return refuse_example(found, want),
            Some(found) => {
                let setting = Setting::of_fingerprint_key(key).unwrap_or(Setting::Optimizer);
                return refuse(
                    setting,
                    format!("it was made with {key} {found}, this run has {want}"),
                    found.to_string(),
                );
            }
            None => {
                return Err(Error::Config(format!(
                    "cannot resume from this checkpoint: it records no {key}"
                )))
            }
        }
    }
    let number = |key: &str| ckpt.extra.get(key).cloned();
    let step_in_epoch = number(STEP_IN_EPOCH).and_then(|s| s.parse().ok()).ok_or_else(|| {
        Error::Config(format!(
            "cannot resume: the checkpoint's {STEP_IN_EPOCH} is missing or unreadable"
        ))
    })?;
    let loss_sum = number(LOSS_SUM)
        .and_then(|s| u64::from_str_radix(&s, 16).ok())
        .map(f64::from_bits)
        .ok_or_else(|| {
            Error::Config(format!(
                "cannot resume: the checkpoint's {LOSS_SUM} is missing or unreadable"
            ))
        })?;
    Ok(Position {
        epochs_done: ckpt.epoch as usize,
        step_in_epoch,
        loss_sum,
    })
}

/// Writes `ckpt` under `policy`, keeping the newest `policy.keep`.
pub(crate) fn write(policy: &CheckpointPolicy, ckpt: &Checkpoint) -> Result<PathBuf> {
    Ok(checkpoint::write_atomic(&policy.dir, ckpt, policy.keep.max(1))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse_with_their_unit() {
        assert_eq!("500steps".parse(), Ok(Every::Steps(500)));
        assert_eq!("1step".parse(), Ok(Every::Steps(1)));
        assert_eq!("2epochs".parse(), Ok(Every::Epochs(2)));
        assert_eq!("3".parse(), Ok(Every::Epochs(3)));
        assert!("0".parse::<Every>().is_err());
        assert!("5 fortnights".parse::<Every>().unwrap_err().contains("unknown unit"));
        assert!("steps".parse::<Every>().is_err());
    }

    #[test]
    fn a_tasks_own_settings_are_refused_when_they_differ_and_taken_as_the_runs_when_absent() {
        let base = fingerprint(25, None, "sst-lstm", "adagrad", "none", "[16285]");
        let with = |classes: &str, buckets: &str| {
            let mut fp = base.clone();
            fp.extend([("classes", classes.to_string()), ("buckets", buckets.to_string())]);
            fp
        };
        let at = Position {
            epochs_done: 1,
            step_in_epoch: 40,
            loss_sum: 1.5,
        };
        let ckpt = make(Vec::new(), at, 321, 7, "{}".into(), &with("2", "8"));
        assert_eq!(position(&ckpt, 7, &with("2", "8")).unwrap(), at);
        let err = position(&ckpt, 7, &with("5", "8")).unwrap_err();
        assert!(
            matches!(&err, Error::Setting { setting: Setting::Classes, fix: Some(f), .. } if f == "2"),
            "{err}"
        );
        assert!(err.to_string().contains("made with classes 2, this run has 5"), "{err}");
        let err = position(&ckpt, 7, &with("2", "4")).unwrap_err();
        assert!(
            matches!(&err, Error::Setting { setting: Setting::Buckets, fix: Some(f), .. } if f == "8"),
            "{err}"
        );
        // Made before the task's settings were recorded.
        let older = make(Vec::new(), at, 321, 7, "{}".into(), &base);
        assert_eq!(position(&older, 7, &with("5", "4")).unwrap(), at);
    }

    #[test]
    fn a_position_round_trips_and_other_settings_are_refused() {
        let fp = fingerprint(100, None, "mnist-cnn", "sgd", "none", "[1, 28, 28]");
        let at = Position {
            epochs_done: 3,
            step_in_epoch: 17,
            loss_sum: 12.345678901234567,
        };
        let ckpt = make(Vec::new(), at, 317, 42, "{}".into(), &fp);
        assert_eq!(position(&ckpt, 42, &fp).unwrap(), at);
        assert!(matches!(
            position(&ckpt, 43, &fp),
            Err(Error::Setting { setting: Setting::Seed, fix: Some(f), .. }) if f == "42"
        ));
        let other = fingerprint(50, None, "mnist-cnn", "sgd", "none", "[1, 28, 28]");
        assert!(matches!(
            position(&ckpt, 42, &other),
            Err(Error::Setting { setting: Setting::Batch, fix: Some(f), .. }) if f == "100"
        ));
        let adamw = fingerprint(100, None, "mnist-cnn", "adamw", "none", "[1, 28, 28]");
        let err = position(&ckpt, 42, &adamw).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Setting {
                    setting: Setting::Optimizer,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("made with optimizer sgd, this run has adamw"),
            "{err}"
        );
    }

    #[test]
    fn augmentation_is_part_of_the_fingerprint_and_absent_means_none() {
        let at = Position {
            epochs_done: 1,
            step_in_epoch: 0,
            loss_sum: 0.0,
        };
        let augmented = fingerprint(100, None, "mnist-cnn", "sgd", "crop4,flip", "[1, 28, 28]");
        let ckpt = make(Vec::new(), at, 10, 42, "{}".into(), &augmented);
        assert_eq!(position(&ckpt, 42, &augmented).unwrap(), at);
        let plain = fingerprint(100, None, "mnist-cnn", "sgd", "none", "[1, 28, 28]");
        let err = position(&ckpt, 42, &plain).unwrap_err();
        assert!(
            matches!(&err, Error::Setting { setting: Setting::Augment, fix: Some(f), .. } if f == "crop4,flip"),
            "{err}"
        );
        // A checkpoint from before augmentation existed trained without it.
        let mut old = make(Vec::new(), at, 10, 42, "{}".into(), &plain);
        old.extra.remove("augment");
        assert_eq!(position(&old, 42, &plain).unwrap(), at);
        assert!(position(&old, 42, &augmented).is_err());
    }

    const LSTM: &str = "char-lstm CharLmConfig { embed: 8, hidden: 16, layers: 1 }";

    #[test]
    fn a_model_at_other_sizes_is_refused_naming_both_values_of_each() {
        let at = Position {
            epochs_done: 1,
            step_in_epoch: 0,
            loss_sum: 0.0,
        };
        let fp = fingerprint(8, None, LSTM, "sgd", "none", "[16]");
        let ckpt = make(Vec::new(), at, 10, 42, "{}".into(), &fp);
        assert_eq!(position(&ckpt, 42, &fp).unwrap(), at);
        let wider = LSTM.replace("hidden: 16, layers: 1", "hidden: 24, layers: 2");
        let err = position(&ckpt, 42, &fingerprint(8, None, &wider, "sgd", "none", "[16]")).unwrap_err();
        assert!(
            matches!(&err, Error::Setting { setting: Setting::ModelSize, fix: Some(f), .. } if f == "hidden 16, layers 1"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("made with char-lstm of hidden 16, layers 1, this run's has hidden 24, layers 2"),
            "{err}"
        );
        // Another model altogether: its name is the fix.
        let rnn = LSTM.replace("char-lstm", "char-rnn");
        let err = position(&ckpt, 42, &fingerprint(8, None, &rnn, "sgd", "none", "[16]")).unwrap_err();
        assert!(
            matches!(&err, Error::Setting { setting: Setting::Model, fix: Some(f), .. } if f == "char-lstm"),
            "{err:?}"
        );
    }

    #[test]
    fn another_window_length_is_refused_and_an_old_checkpoint_without_one_is_not() {
        let at = Position {
            epochs_done: 1,
            step_in_epoch: 5,
            loss_sum: 0.0,
        };
        let fp = fingerprint(8, None, LSTM, "sgd", "none", "[16]");
        let ckpt = make(Vec::new(), at, 10, 42, "{}".into(), &fp);
        let shorter = fingerprint(8, None, LSTM, "sgd", "none", "[8]");
        let err = position(&ckpt, 42, &shorter).unwrap_err();
        assert!(
            matches!(&err, Error::Setting { setting: Setting::SeqLen, fix: Some(f), .. } if f == "16"),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("windows of 16 tokens, this run reads 8"),
            "{err}"
        );
        let images = fingerprint(8, None, LSTM, "sgd", "none", "[3, 32, 32]");
        let err = position(&ckpt, 42, &images).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Setting {
                    setting: Setting::Data,
                    ..
                }
            ),
            "{err:?}"
        );
        let mut old = make(Vec::new(), at, 10, 42, "{}".into(), &fp);
        old.extra.remove("example");
        assert_eq!(position(&old, 42, &shorter).unwrap(), at);
    }
}
