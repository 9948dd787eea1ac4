//! `bumpgrad train --data DIR` on a folder of one's own PNGs, one subfolder
//! per class: it learns, says how it read the folder, and its checkpoint
//! evaluates and predicts by class name; every bad folder is refused with
//! what to do, never a panic; `models` counts a folder as `train` reads it.

use std::path::{Path, PathBuf};
use std::process::Output;

#[path = "support/cli_run.rs"]
mod cli_run;
use cli_run::{bumpgrad, stdout};

/// Fails with status `code`, and every one of `needles` in its message.
fn fails_with(out: Output, code: i32, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "status {} for: {err}", out.status);
    for needle in needles {
        assert!(err.contains(needle), "expected {needle:?} in: {err}");
    }
    assert!(!err.contains("panicked"), "a panic: {err}");
}

/// A fresh directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bumpgrad-cli-folder-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make a scratch directory");
    dir
}

fn s(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// The classes, sorted as their folders are, and each one's colour.
const CLASSES: [(&str, [u8; 3]); 3] = [
    ("blue", [40, 60, 210]),
    ("green", [40, 190, 60]),
    ("red", [210, 50, 40]),
];

/// `per_class` 24×24 PNGs of each class under `dir/<class>/`: a square of
/// the class's colour (jittered), at a random place and size, on noise.
fn shapes(dir: &Path, per_class: usize, seed: u64) {
    let mut state = seed;
    let mut draw = |below: u32| {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % below as u64) as u32
    };
    for (name, colour) in CLASSES {
        let class = dir.join(name);
        std::fs::create_dir_all(&class).expect("mkdir");
        for i in 0..per_class {
            let side = 6 + draw(8);
            let (x0, y0) = (draw(24 - side), draw(24 - side));
            let tint = colour.map(|c| (c as u32 + draw(40)).min(255) as u8);
            let image = image::RgbImage::from_fn(24, 24, |x, y| {
                let inside = (x0..x0 + side).contains(&x) && (y0..y0 + side).contains(&y);
                match inside {
                    true => image::Rgb(tint),
                    false => image::Rgb([0; 3].map(|_| draw(70) as u8)),
                }
            });
            image.save(class.join(format!("{i:03}.png"))).expect("write a PNG");
        }
    }
}

/// A small ResNet-18 on the CPU, checkpoints in `ck`.
fn train_args<'a>(data: &'a str, ck: &'a str, epochs: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "train",
        "--data",
        data,
        "--model",
        "resnet18",
        "--width-mult",
        "0.125",
        "--batch",
        "10",
        "--epochs",
        epochs,
        "--device",
        "cpu",
        "--threads",
        "2",
        "--checkpoint-dir",
        ck,
    ];
    args.extend_from_slice(extra);
    args
}

const CPU: [&str; 4] = ["--device", "cpu", "--threads", "2"];

#[test]
fn a_folder_of_pngs_trains_and_its_checkpoint_evaluates_and_predicts_by_name() {
    let dir = scratch("learns");
    let data = dir.join("colours");
    shapes(&data, 30, 1);
    shapes(&data.join("val"), 8, 2);
    let ck = dir.join("ck");
    let out = bumpgrad(&train_args(s(&data), s(&ck), "6", &["--json"]));
    let lines = stdout(&out);
    let said = String::from_utf8_lossy(&out.stderr);
    for line in [
        "90 training / 24 test images, 9 steps per epoch",
        "3 classes, from the folder names: blue, green, red",
        "images: RGB (3 channels), 24×24 pixels",
        &format!("validation: the 24 images of {}", data.join("val").display()),
        "normalised per channel by the training images' mean ",
    ] {
        assert!(said.contains(line), "expected {line:?} in: {said}");
    }
    let last: serde_json::Value = serde_json::from_str(lines.lines().last().expect("an epoch line")).expect("JSON");
    let reported = last["test_accuracy"].as_f64().expect("an accuracy");
    assert!(reported >= 0.7, "chance is 1/3; it learned only {reported}");

    // eval: the run's accuracy, per class by name.
    let mut args = vec!["eval", "--checkpoint", s(&ck), "--json"];
    args.extend(CPU);
    let eval: serde_json::Value = serde_json::from_str(&stdout(&bumpgrad(&args))).expect("one JSON object");
    assert_eq!(eval["accuracy"].as_f64(), Some(reported), "{eval}");
    assert_eq!(eval["examples"].as_u64(), Some(24));
    assert_eq!(eval["class_names"], serde_json::json!(["blue", "green", "red"]));
    let mut args = vec!["eval", "--checkpoint", s(&ck)];
    args.extend(CPU);
    let table = stdout(&bumpgrad(&args));
    assert_eq!(table.lines().count(), 2 + 3, "{table}");
    for (line, (name, _)) in table.lines().skip(2).zip(CLASSES) {
        assert!(line.trim_start().starts_with(&format!("{name} ")), "{table}");
    }

    // predict: each validation PNG by name, as eval scored them (the
    // stored normalisation applied).
    let mut args = vec!["predict", "--checkpoint", s(&ck), "--top", "2"];
    args.extend(CPU);
    let mut images = Vec::new();
    for (name, _) in CLASSES {
        for i in 0..8 {
            images.push((name, data.join("val").join(name).join(format!("{i:03}.png"))));
        }
    }
    args.extend(images.iter().map(|(_, path)| s(path)));
    let predicted = stdout(&bumpgrad(&args));
    assert_eq!(predicted.lines().count(), 24, "{predicted}");
    let mut correct = 0;
    for (line, (name, path)) in predicted.lines().zip(&images) {
        let (image, top) = line.split_once(": ").expect("`image: classes`");
        assert_eq!(image, s(path));
        let names: Vec<&str> = top.split(", ").map(|c| c.split(' ').next().unwrap()).collect();
        assert_eq!(names.len(), 2, "{line}");
        assert!(names.iter().all(|n| CLASSES.iter().any(|(c, _)| c == n)), "{line}");
        correct += usize::from(names[0] == *name);
    }
    assert_eq!(correct as f64 / 24.0, reported, "predict agrees with eval: {predicted}");

    // A JPEG of another size is resized to what the model reads.
    let jpeg = dir.join("big-red.jpg");
    image::RgbImage::from_pixel(50, 40, image::Rgb([210, 50, 40]))
        .save(&jpeg)
        .expect("write a JPEG");
    let mut args = vec!["predict", "--checkpoint", s(&ck), "--top", "1"];
    args.extend(CPU);
    args.push(s(&jpeg));
    let line = stdout(&bumpgrad(&args));
    assert!(line.starts_with(&format!("{}: ", jpeg.display())), "{line}");

    // A corrupt image is named.
    let broken = dir.join("broken.png");
    std::fs::write(&broken, b"\x89PNG\r\n\x1a\n cut short").expect("write");
    let mut args = vec!["predict", "--checkpoint", s(&ck)];
    args.extend(CPU);
    args.push(s(&broken));
    fails_with(
        bumpgrad(&args),
        1,
        &[&format!("{} is not a readable PNG or JPEG image", broken.display())],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_split_is_remembered_and_no_validation_set_is_said() {
    let dir = scratch("split");
    let data = dir.join("colours");
    shapes(&data, 20, 3);
    let ck = dir.join("ck");
    let out = bumpgrad(&train_args(s(&data), s(&ck), "1", &["--val-split", "0.25"]));
    let text = stdout(&out);
    assert!(
        text.contains("45 training / 15 test images")
            && text.contains("validation: 15 of the 60 images (25% of each class, held out by a fixed seed"),
        "{text}"
    );
    // eval finds the same 15 images from what the checkpoint stored.
    let mut args = vec!["eval", "--checkpoint", s(&ck), "--json"];
    args.extend(CPU);
    let eval: serde_json::Value = serde_json::from_str(&stdout(&bumpgrad(&args))).expect("one JSON object");
    assert_eq!(eval["examples"].as_u64(), Some(15), "{eval}");

    // Without val/ or a split: said, and nothing to evaluate on.
    let ck2 = dir.join("ck2");
    let text = stdout(&bumpgrad(&train_args(s(&data), s(&ck2), "1", &[])));
    assert!(text.contains("60 training / 0 test images"), "{text}");
    assert!(text.contains("no validation set: "), "{text}");
    let epoch = text.lines().find(|l| l.starts_with("epoch")).expect("an epoch line");
    assert!(epoch.contains("no validation set") && !epoch.contains("NaN"), "{epoch}");
    let mut args = vec!["eval", "--checkpoint", s(&ck2)];
    args.extend(CPU);
    fails_with(bumpgrad(&args), 1, &["has no validation images", "--val-split"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_folders_are_refused_with_what_to_do() {
    let dir = scratch("bad");
    let train = |data: &Path, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--data",
            s(data),
            "--epochs",
            "1",
            "--batch",
            "4",
            "--checkpoint-every",
            "off",
        ];
        args.extend(CPU);
        args.extend_from_slice(extra);
        bumpgrad(&args)
    };
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    fails_with(
        train(&empty, &[]),
        1,
        &["is empty", "one subfolder of PNG or JPEG images per class"],
    );

    let one = dir.join("one");
    shapes(&one, 2, 4);
    for (name, _) in &CLASSES[1..] {
        std::fs::remove_dir_all(one.join(name)).expect("rm");
    }
    fails_with(
        train(&one, &[]),
        1,
        &["holds 1 class folder (blue)", "needs at least 2"],
    );

    let data = dir.join("colours");
    shapes(&data, 4, 5);
    let nothing = data.join("zebra");
    std::fs::create_dir_all(&nothing).expect("mkdir");
    std::fs::write(nothing.join("readme.txt"), b"no images here").expect("write");
    fails_with(
        train(&data, &[]),
        1,
        &[&format!("{} holds no PNG or JPEG image", nothing.display())],
    );
    std::fs::remove_dir_all(&nothing).expect("rm");

    let corrupt = data.join("red/999.png");
    std::fs::write(&corrupt, b"\x89PNG\r\n\x1a\nthis is no image").expect("write");
    fails_with(
        train(&data, &[]),
        1,
        &[
            &format!("{} is not a readable PNG or JPEG image", corrupt.display()),
            "replace or remove the file",
        ],
    );
    std::fs::remove_file(&corrupt).expect("rm");

    for split in ["0", "1", "1.5", "-0.2"] {
        fails_with(
            train(&data, &["--val-split", split]),
            1,
            &["is not a fraction between 0 and 1", "pass --val-split between 0 and 1"],
        );
    }
    for size in ["32", "0x5", "32x", "axb"] {
        fails_with(
            train(&data, &["--image-size", size]),
            2,
            &[&format!("`{size}` is not an image size"), "such as 32x32"],
        );
    }

    let odd = data.join("green/odd.png");
    image::RgbImage::new(10, 12).save(&odd).expect("write");
    fails_with(
        train(&data, &[]),
        1,
        &[
            &format!("{} is 24×24 pixels", data.join("blue/000.png").display()),
            &format!("{} is 12×10", odd.display()),
            "pass --image-size HxW",
        ],
    );
    // Resized, the same folder reads.
    let ck = dir.join("ck");
    let out = train(
        &data,
        &[
            "--image-size",
            "16x16",
            "--model",
            "resnet18",
            "--width-mult",
            "0.125",
            "--checkpoint-dir",
            s(&ck),
        ],
    );
    let text = stdout(&out);
    assert!(text.contains("16×16 pixels (each resized to it)"), "{text}");

    let mnist = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mnist");
    fails_with(
        train(&mnist, &["--val-split", "0.2"]),
        1,
        &["holds MNIST, not an image folder", "drop --image-size and --val-split"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `models --image-size` counts parameters for a folder's images resized as
/// `train --image-size` reads them: a folder of greyscale images of two
/// sizes is refused without it (naming the flag), and with 28×28 the MNIST
/// CNN fits it and is counted exactly as the run that trains it states.
#[test]
fn models_counts_a_folder_resized_as_train_reads_it() {
    let dir = scratch("models-image-size");
    for (class, shade) in [("dark", 40u8), ("light", 210u8)] {
        let folder = dir.join(class);
        std::fs::create_dir_all(&folder).expect("mkdir");
        for (i, (width, height)) in [(40, 40), (36, 30), (40, 40), (36, 30)].into_iter().enumerate() {
            let image = image::GrayImage::from_fn(width, height, |x, y| {
                image::Luma([shade.wrapping_add(((x * 7 + y * 3 + i as u32) % 23) as u8)])
            });
            image.save(folder.join(format!("{i}.png"))).expect("write a PNG");
        }
    }
    let data = s(&dir);
    fails_with(
        bumpgrad(&["models", "--data", data]),
        1,
        &["must be resized to one size", "pass --image-size HxW"],
    );
    let listed = stdout(&bumpgrad(&["models", "--data", data, "--image-size", "28x28"]));
    assert!(listed.contains("[1, 28, 28] images and 2 classes"), "{listed}");
    let row = listed
        .lines()
        .find(|l| l.trim_start().starts_with("mnist-cnn"))
        .expect(&listed);
    let counted = row.split_whitespace().nth(1).expect(row);
    // MNIST's 21,810 with 2 outputs rather than 10: 8 × (50 + 1) fewer.
    assert_eq!(counted, "21402", "{listed}");
    let out = bumpgrad(&[
        "train",
        "--data",
        data,
        "--image-size",
        "28x28",
        "--model",
        "mnist-cnn",
        "--batch",
        "4",
        "--epochs",
        "1",
        "--device",
        "cpu",
        "--threads",
        "2",
        "--checkpoint-every",
        "off",
        "--checkpoint-dir",
        s(&dir.join("ck")),
    ]);
    // What the run says first, on stdout here (stderr under --json).
    let said = stdout(&out);
    assert!(said.contains(&format!("mnist-cnn ({counted} parameters)")), "{said}");
}
