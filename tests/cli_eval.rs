//! `bumpgrad eval` and `bumpgrad predict` on a checkpoint the test trains:
//! the accuracy the training run reported, top-k lines per image, and
//! clear errors for checkpoints and images that are not there or not right.

use std::path::{Path, PathBuf};
use std::process::Output;

#[path = "support/cli_run.rs"]
mod cli_run;
use cli_run::{bumpgrad, stdout};

fn fails_with(out: Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "status {} for: {err}", out.status);
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    assert!(!err.contains("panicked"), "a panic: {err}");
}

/// A fresh directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bumpgrad-cli-eval-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make a scratch directory");
    dir
}

/// Trains the MNIST CNN for one epoch on 1,000 images into `dir`; returns
/// the test accuracy the run reported.
fn train_into(dir: &Path) -> f64 {
    let ck = dir.join("ck");
    let out = bumpgrad(&[
        "train",
        "--device",
        "cpu",
        "--threads",
        "2",
        "--epochs",
        "1",
        "--train-limit",
        "1000",
        "--test-limit",
        "500",
        "--json",
        "--checkpoint-dir",
        ck.to_str().expect("utf-8 path"),
    ]);
    let line = stdout(&out);
    let epoch: serde_json::Value = serde_json::from_str(line.lines().last().expect("an epoch line")).expect("JSON");
    epoch["test_accuracy"].as_f64().expect("test_accuracy")
}

/// The first `n` MNIST test images as an IDX file, and their labels.
fn first_test_images(dir: &Path, n: usize) -> (PathBuf, Vec<u8>) {
    use std::io::Read;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mnist");
    let gunzip = |name: &str| {
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(root.join(name)).expect("MNIST ships"))
            .read_to_end(&mut bytes)
            .expect("gunzip");
        bytes
    };
    let images = gunzip("t10k-images-idx3-ubyte.gz");
    let labels = gunzip("t10k-labels-idx1-ubyte.gz");
    let mut idx = Vec::new();
    for word in [0x803u32, n as u32, 28, 28] {
        idx.extend(word.to_be_bytes());
    }
    idx.extend(&images[16..16 + 784 * n]);
    let path = dir.join(format!("first-{n}.idx"));
    std::fs::write(&path, idx).expect("write the IDX file");
    (path, labels[8..8 + n].to_vec())
}

#[test]
fn eval_and_predict_agree_with_the_training_run() {
    let dir = scratch("agree");
    let reported = train_into(&dir);
    let ck = dir.join("ck");
    let ck = ck.to_str().expect("utf-8 path");
    let cpu = ["--device", "cpu", "--threads", "2"];

    // eval: the accuracy the run reported for its epoch, from the same
    // steps; the confusion matrix adds up to it.
    let mut args = vec!["eval", "--checkpoint", ck, "--test-limit", "500", "--json"];
    args.extend(cpu);
    let eval: serde_json::Value = serde_json::from_str(&stdout(&bumpgrad(&args))).expect("one JSON object");
    assert_eq!(eval["accuracy"].as_f64(), Some(reported), "{eval}");
    assert_eq!(eval["examples"].as_u64(), Some(500));
    let confusion: Vec<Vec<u64>> = serde_json::from_value(eval["confusion"].clone()).expect("a matrix");
    assert_eq!(confusion.len(), 10);
    let diagonal: u64 = (0..10).map(|c| confusion[c][c]).sum();
    let total: u64 = confusion.iter().flatten().sum();
    assert_eq!((diagonal, total), (eval["correct"].as_u64().unwrap(), 500));
    let loss = eval["loss"].as_f64().expect("a loss");
    assert!(loss > 0.0 && loss < 2.4, "loss {loss}");

    // The table says the same for people.
    let mut args = vec!["eval", "--checkpoint", ck, "--test-limit", "500"];
    args.extend(cpu);
    let table = stdout(&bumpgrad(&args));
    assert!(table.contains(&format!("accuracy {:.2}%", 100.0 * reported)), "{table}");
    assert_eq!(table.lines().count(), 2 + 10, "{table}");

    // predict: k classes a line, one line an image; its top classes score
    // the images as eval does (the stored normalisation applied).
    let (images, labels) = first_test_images(&dir, 500);
    let mut args = vec!["predict", "--checkpoint", ck, "--top", "2"];
    args.extend(cpu);
    args.push(images.to_str().expect("utf-8 path"));
    let lines = stdout(&bumpgrad(&args));
    assert_eq!(lines.lines().count(), 500, "{lines}");
    let mut correct = 0;
    for (line, &label) in lines.lines().zip(&labels) {
        let (_, classes) = line.split_once(": ").expect("`image: classes`");
        let top: Vec<&str> = classes.split(", ").collect();
        assert_eq!(top.len(), 2, "{line}");
        let first: usize = top[0].split(' ').next().unwrap().parse().expect("a class");
        correct += usize::from(first == label as usize);
    }
    let predicted = correct as f64 / 500.0;
    assert!(
        (predicted - reported).abs() <= 0.004,
        "predict {predicted} against eval {reported}"
    );

    // One raw image: one line.
    let raw = dir.join("one.raw");
    let bytes = std::fs::read(&images).expect("read");
    std::fs::write(&raw, &bytes[16..16 + 784]).expect("write");
    let mut args = vec!["predict", "--checkpoint", ck];
    args.extend(cpu);
    args.push(raw.to_str().expect("utf-8 path"));
    let line = stdout(&bumpgrad(&args));
    assert_eq!(line.lines().count(), 1, "{line}");
    assert_eq!(line.trim().split(", ").count(), 3, "the default is the top 3: {line}");

    // Bad images: a file of the wrong size, and no image at all.
    let wrong = dir.join("wrong.raw");
    std::fs::write(&wrong, [0u8; 100]).expect("write");
    let mut args = vec!["predict", "--checkpoint", ck];
    args.extend(cpu);
    args.push(wrong.to_str().expect("utf-8 path"));
    fails_with(
        bumpgrad(&args),
        "neither an IDX image file nor one raw image of [1, 28, 28]",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_checkpoints_are_refused_with_what_is_wrong() {
    let dir = scratch("bad");
    let missing = dir.join("no-such-checkpoint");
    let missing = missing.to_str().expect("utf-8 path");
    fails_with(bumpgrad(&["eval", "--checkpoint", missing]), "No such file");
    fails_with(
        bumpgrad(&["predict", "--checkpoint", missing, "image.raw"]),
        "No such file",
    );
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    fails_with(
        bumpgrad(&["eval", "--checkpoint", empty.to_str().unwrap()]),
        "holds no checkpoint",
    );
    let cut = dir.join("ckpt-000000000001.safetensors");
    std::fs::write(&cut, b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":").expect("write");
    fails_with(bumpgrad(&["eval", "--checkpoint", cut.to_str().unwrap()]), "truncated");
    let junk = dir.join("junk.safetensors");
    std::fs::write(&junk, b"not a checkpoint at all").expect("write");
    fails_with(
        bumpgrad(&["eval", "--checkpoint", junk.to_str().unwrap()]),
        "reading the checkpoint",
    );
    let out = bumpgrad(&["predict", "--checkpoint", missing]);
    assert_eq!(out.status.code(), Some(2), "no image is a usage error");
    let _ = std::fs::remove_dir_all(&dir);
}
