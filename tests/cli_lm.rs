//! The `bumpgrad` binary with language models: bad input is refused with
//! the sizes and what to pass, and leaves no checkpoint directory behind;
//! a limit on text is refused naming what its epochs read; a resume with
//! other model sizes or another window is refused naming both values and
//! the flag; the largest batch of text counts streams or sentences.

use std::path::{Path, PathBuf};
use std::process::Output;

fn bumpgrad(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_bumpgrad"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("run bumpgrad")
}

/// A fresh directory for `name` under the target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The first `bytes` of tiny-shakespeare as a corpus of its own.
fn corpus(bytes: usize, dir: &Path) -> String {
    let text = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/data/tinyshakespeare/input.txt")).unwrap();
    let path = dir.join(format!("corpus-{bytes}.txt"));
    std::fs::write(&path, &text[..bytes]).unwrap();
    path.display().to_string()
}

/// Refused with status 1, `needle` in the message, no panic, and no
/// `checkpoints` directory: the run checks it could write there without
/// making it, and the first checkpoint makes it.
fn refused(args: &[&str], checkpoints: &Path, needle: &str) {
    let out = bumpgrad(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: expected {needle:?} in: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(
        !checkpoints.exists(),
        "{args:?} made {} though it never started",
        checkpoints.display()
    );
}

#[test]
fn bad_language_model_input_is_refused_leaving_no_checkpoint_directory() {
    let dir = scratch("cli-lm-bad-input");
    let short = corpus(300, &dir);
    let text = corpus(12_000, &dir);
    let ckpt = dir.join("checkpoints");
    let ck = ckpt.to_str().unwrap();
    let common = ["--device", "cpu", "--threads", "1", "--checkpoint-dir", ck];
    let cases: [(Vec<&str>, &str); 6] = [
        (
            vec!["--model", "char-lstm", "--data", &short, "--seq-len", "64", "--batch", "32"],
            "the training split has 270 tokens, too few for 32 streams of one window of 64 tokens: that needs at least 2049",
        ),
        (
            vec!["--model", "char-lstm", "--data", &short, "--seq-len", "64", "--batch", "32"],
            "pass a smaller --batch or --seq-len, or a longer text to --data",
        ),
        (
            vec!["--model", "char-rnn", "--data", &text, "--seq-len", "0"],
            "a window of 0 tokens reads nothing; pass --seq-len 64",
        ),
        (
            vec!["--model", "char-lstm", "--data", "data/mnist"],
            "the model char-lstm reads token ids, but the data is an image data set",
        ),
        (
            vec!["--model", "mnist-cnn", "--data", &text],
            "the model mnist-cnn reads images, but the data is a text corpus",
        ),
        // Refused last of all, once the data is read and the model built.
        (
            vec!["--model", "char-lstm", "--data", &text, "--seq-len", "16", "--batch", "8", "--arena-size", "64KiB"],
            "(pass --arena-size",
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["train"];
        all.extend_from_slice(&common);
        all.extend_from_slice(&args);
        refused(&all, &ckpt, needle);
    }
}

#[test]
fn a_limit_on_text_is_refused_naming_what_its_epochs_read() {
    let dir = scratch("cli-lm-limits");
    let text = corpus(12_000, &dir);
    let ckpt = dir.join("checkpoints");
    let ck = ckpt.to_str().unwrap();
    let common = ["--device", "cpu", "--threads", "1", "--checkpoint-dir", ck];
    let corpus_reads = "a limit counts images, but the data is a text corpus, whose epochs read windows of characters: only an image data set is cut to a limit";
    let cases = [
        (
            vec!["--model", "char-lstm", "--data", &text, "--train-limit", "100"],
            format!("{corpus_reads}; check --train-limit"),
        ),
        (
            vec!["--model", "char-rnn", "--data", &text, "--test-limit", "10"],
            format!("{corpus_reads}; check --test-limit"),
        ),
        (
            vec!["--model", "sst-lstm", "--data", "data/sst", "--train-limit", "100"],
            "the data is a treebank of sentences, whose epochs read sentences: only an image data set is cut to a limit; check --train-limit".into(),
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["train"];
        all.extend_from_slice(&common);
        all.extend_from_slice(&args);
        refused(&all, &ckpt, &needle);
    }
}

#[test]
fn a_resume_with_other_sizes_or_another_window_is_refused_naming_both() {
    let dir = scratch("cli-lm-resume");
    let text = corpus(12_000, &dir);
    let ckpt = dir.join("checkpoints");
    let ck = ckpt.to_str().unwrap();
    let run = |sizes: &[&str], epochs: &str, resume: bool| {
        let mut args = vec![
            "train",
            "--model",
            "char-lstm",
            "--data",
            &text,
            "--batch",
            "8",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--epochs",
            epochs,
            "--checkpoint-dir",
            ck,
        ];
        args.extend_from_slice(sizes);
        if resume {
            args.extend_from_slice(&["--resume", ck]);
        }
        bumpgrad(&args)
    };
    let sizes = ["--embed", "8", "--hidden", "16", "--layers", "1", "--seq-len", "16"];
    let first = run(&sizes, "1", false);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    for (changed, needle) in [
        (
            ["--embed", "8", "--hidden", "24", "--layers", "1", "--seq-len", "16"],
            "--hidden 24 contradicts the checkpoint in CK, made with --hidden 16; drop --hidden",
        ),
        (
            ["--embed", "0", "--hidden", "16", "--layers", "2", "--seq-len", "16"],
            "--embed 0 contradicts the checkpoint in CK, made with --embed 8; drop --embed",
        ),
        (
            ["--embed", "8", "--hidden", "16", "--layers", "1", "--seq-len", "8"],
            "--seq-len 8 contradicts the checkpoint in CK, made with --seq-len 16; drop --seq-len",
        ),
    ] {
        // The checkpoint records the sizes it was made with: a resumed run
        // restores them, and one given anew that differs is refused by
        // name. (Without a record, the check of the checkpoint's own
        // settings refuses it: `train::checkpoints`' tests.)
        let out = run(&changed, "2", true);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let needle = needle.replace("CK", ck);
        assert_eq!(out.status.code(), Some(1), "{changed:?}: {stderr}");
        assert!(
            stderr.contains(&needle),
            "{changed:?}: expected {needle:?} in: {stderr}"
        );
    }
    let same = run(&sizes, "2", true);
    assert!(same.status.success(), "{}", String::from_utf8_lossy(&same.stderr));
}

/// `memory --max-batch` on text counts what a batch of it holds: a
/// corpus's streams, as many as both its splits hold a window for (a
/// batch of one more is refused), and a treebank's sentences, those its
/// task keeps (neutral ones dropped under `--classes 2`), never images.
#[test]
fn max_batch_on_text_counts_streams_and_sentences() {
    let dir = scratch("cli-lm-max-batch");
    let search = |data: &[&str]| {
        let mut args = vec![
            "memory",
            "--max-batch",
            "--arena-size",
            "1TiB",
            "--json",
            "--device",
            "cpu",
            "--threads",
            "1",
        ];
        args.extend_from_slice(data);
        let out = bumpgrad(&args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        let last = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .to_owned();
        let found: serde_json::Value = serde_json::from_str(&last).expect("a JSON line");
        let most = found["max_batch"].as_u64().expect("max_batch");
        assert_eq!(found["capped_by_training_set"].as_u64(), Some(most), "{found}");
        assert!(!stderr.contains("images"), "{stderr}");
        (most, found["batch_holds"].as_str().unwrap_or("").to_owned(), stderr)
    };

    let text = corpus(3_000, &dir);
    let lstm = [
        "--model",
        "char-lstm",
        "--hidden",
        "16",
        "--seq-len",
        "16",
        "--data",
        &text,
    ];
    let (streams, holds, stderr) = search(&lstm);
    assert_eq!(holds, "streams");
    assert!(
        stderr.contains(&format!(
            "the search stopped at the {streams} streams, as many as the text's splits hold a window for: no batch may exceed them (--seq-len, --data)"
        )),
        "{stderr}"
    );
    // Exactly as many: the next batch is one the data refuses.
    let at = |batch: String| {
        let mut args = vec!["memory", "--device", "cpu", "--threads", "1", "--batch", &batch];
        args.extend_from_slice(&lstm);
        bumpgrad(&args)
    };
    assert!(at(streams.to_string()).status.success());
    let over = at((streams + 1).to_string());
    let stderr = String::from_utf8_lossy(&over.stderr);
    assert_eq!(over.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("too few for {} streams", streams + 1)),
        "{stderr}"
    );

    // 30 sentences with a side and 10 neutral ones: two classes keep 30.
    let bank = dir.join("treebank");
    std::fs::create_dir_all(&bank).unwrap();
    let trees: String = (0..40)
        .map(|i| match i % 4 {
            0 => "(2 (2 the) (2 film))\n",
            1 => "(4 (2 a) (4 (4 good) (2 film)))\n",
            2 => "(0 (2 a) (0 (0 bad) (2 plot)))\n",
            _ => "(3 (2 the) (3 (3 fine) (2 story)))\n",
        })
        .collect();
    for file in ["train.txt", "dev.txt", "test.txt"] {
        std::fs::write(bank.join(file), &trees).unwrap();
    }
    let bank = bank.display().to_string();
    let sst = [
        "--model",
        "sst-lstm",
        "--embed",
        "8",
        "--hidden",
        "8",
        "--classes",
        "2",
        "--data",
        &bank,
    ];
    let (sentences, holds, stderr) = search(&sst);
    assert_eq!((sentences, holds.as_str()), (30, "sentences"));
    assert!(
        stderr.contains(
            "the search stopped at the 30 sentences of the training split: no batch may exceed them (--data)"
        ),
        "{stderr}"
    );
}
