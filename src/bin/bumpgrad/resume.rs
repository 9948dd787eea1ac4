//! `train --resume DIR` without retyping: a run records the flags that
//! define what it trains (model, optimizer, schedule, data, augmentation,
//! batch, seed: [`FIXED`] and [`CHANGEABLE`]) in its checkpoints, and a resumed run starts
//! from them, the flags given on its own command line after them (the last
//! of a flag wins). A flag given again with another value where the
//! checkpoint fixes it ([`FIXED`]) is refused, both values named as flags.

use std::ffi::OsString;
use std::path::Path;

use anyhow::Context;

/// The flags a checkpoint records that a resumed run cannot change: the
/// network, its optimizer's state, the data's order.
const FIXED: &[&str] = &[
    "--model",
    "--width-mult",
    "--seq-len",
    "--hidden",
    "--layers",
    "--classes",
    "--buckets",
    "--embed",
    "--optimizer",
    "--momentum",
    "--nesterov",
    "--weight-decay",
    "--betas",
    "--eps",
    "--lr-decay",
    "--initial-accumulator",
    "--seed",
    "--image-size",
    "--val-split",
    "--augment",
    "--train-limit",
    "--batch",
];

/// The flags a checkpoint records that a resumed run may set anew.
const CHANGEABLE: &[&str] = &[
    "--data",
    "--lr",
    "--schedule",
    "--warmup-epochs",
    "--label-smoothing",
    "--clip-norm",
    "--test-limit",
    "--precision",
];

/// Whether a checkpoint records `flag` and a resumed run restores it.
fn restored(flag: &str) -> bool {
    FIXED.contains(&flag) || CHANGEABLE.contains(&flag)
}

/// One flag of a command line and its value, if it takes one.
#[derive(Debug, Clone, PartialEq)]
struct Flag {
    name: String,
    value: Option<String>,
}

impl Flag {
    fn tokens(&self) -> Vec<String> {
        let mut t = vec![self.name.clone()];
        t.extend(self.value.clone());
        t
    }

    fn shown(&self) -> String {
        self.tokens().join(" ")
    }
}

/// `train`'s flags that take a value, as clap defines them (`--lr`, not
/// `--nesterov`).
fn valued_flags() -> Vec<String> {
    use clap::CommandFactory;
    let cmd = crate::Cli::command();
    let Some(train) = cmd.find_subcommand("train") else {
        return Vec::new();
    };
    train
        .get_arguments()
        .filter(|a| a.get_action().takes_values())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect()
}

/// The flags of `tokens` (the words after `train`), each with its value.
fn flags(tokens: &[String]) -> Vec<Flag> {
    let valued = valued_flags();
    let mut out = Vec::new();
    let mut it = tokens.iter();
    while let Some(t) = it.next() {
        if !t.starts_with("--") {
            continue;
        }
        let flag = match t.split_once('=') {
            Some((name, value)) => Flag {
                name: name.to_string(),
                value: Some(value.to_string()),
            },
            None if valued.contains(t) => Flag {
                name: t.clone(),
                value: it.next().cloned(),
            },
            None => Flag {
                name: t.clone(),
                value: None,
            },
        };
        out.push(flag);
    }
    out
}

/// What a checkpoint records of the words after `train`: the restored
/// flags, the last of each, in the order first given.
pub(crate) fn recorded(tokens: &[String]) -> Vec<String> {
    let all = flags(tokens);
    let mut kept: Vec<Flag> = Vec::new();
    for f in all.into_iter().filter(|f| restored(&f.name)) {
        match kept.iter_mut().find(|k| k.name == f.name) {
            Some(k) => *k = f,
            None => kept.push(f),
        }
    }
    kept.iter().flat_map(Flag::tokens).collect()
}

/// The words after `train` on this command line.
pub(crate) fn train_words(raw: &[OsString]) -> Vec<String> {
    let words: Vec<String> = raw.iter().map(|w| w.to_string_lossy().into_owned()).collect();
    match words.iter().position(|w| w == "train") {
        Some(at) => words[at + 1..].to_vec(),
        None => Vec::new(),
    }
}

/// The flags the newest valid checkpoint at `resume` (a directory or a
/// file) records; `None` where there is none yet, or it records none (made
/// before runs recorded them).
fn stored(resume: &Path) -> anyhow::Result<Option<Vec<String>>> {
    let ckpt = if resume.is_file() {
        bumpgrad::checkpoint::read(resume).with_context(|| format!("reading {}", resume.display()))?
    } else {
        match bumpgrad::checkpoint::latest_valid(resume) {
            Ok(Some(latest)) => latest.checkpoint,
            // A missing directory or one without checkpoints: the run says
            // so itself, as it always has.
            Ok(None) | Err(_) => return Ok(None),
        }
    };
    let config: serde_json::Value = serde_json::from_str(&ckpt.config_json).unwrap_or_default();
    let Some(words) = config["command_line"].as_array() else {
        return Ok(None);
    };
    Ok(Some(
        words.iter().filter_map(|w| w.as_str().map(str::to_string)).collect(),
    ))
}

/// The command line to run for `train --resume`: the program, `train`, the
/// checkpoint's flags, then this command line's words. `None` where the
/// checkpoint records none. A flag of [`FIXED`] given here with another
/// value than the checkpoint's is refused.
pub(crate) fn restored_command_line(resume: &Path, raw: &[OsString]) -> anyhow::Result<Option<Vec<OsString>>> {
    let Some(stored) = stored(resume)? else {
        return Ok(None);
    };
    let given = train_words(raw);
    let theirs = flags(&stored);
    for mine in flags(&given).iter().filter(|f| FIXED.contains(&f.name.as_str())) {
        if let Some(was) = theirs.iter().rev().find(|t| t.name == mine.name) {
            if was.value != mine.value {
                anyhow::bail!(
                    "{} contradicts the checkpoint in {}, made with {}; drop {} to resume the run as it was made, or start a new run in another --checkpoint-dir",
                    mine.shown(),
                    resume.display(),
                    was.shown(),
                    mine.name
                );
            }
        }
    }
    if !stored.is_empty() {
        eprintln!(
            "bumpgrad: resuming with the checkpoint's flags: {} (flags given here come after them)",
            stored.join(" ")
        );
    }
    let program = raw.first().cloned().unwrap_or_else(|| "bumpgrad".into());
    let mut line = vec![program, "train".into()];
    line.extend(stored.into_iter().map(OsString::from));
    line.extend(given.into_iter().map(OsString::from));
    Ok(Some(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_record_keeps_the_restored_flags_last_value_first_place() {
        let line = words("--model char-lstm --epochs 3 --lr=0.1 --device cpu --nesterov --hidden 64 --lr 0.2 --json");
        assert_eq!(
            recorded(&line),
            words("--model char-lstm --lr 0.2 --nesterov --hidden 64"),
            "--epochs, --device and --json are this invocation's, not the run's"
        );
    }
}
