//! Writes a small image folder to train on: three classes of synthetic
//! 32×32 PNGs (a disc, a square and a cross, each in a colour of its own,
//! at random places and sizes on a noisy background), one subfolder per
//! class, and a `val/` folder of the same classes for validation.
//!
//! ```text
//! cargo run --release --example make_image_folder -- shapes
//! bumpgrad train --data shapes --epochs 2 --device cpu
//! ```
//!
//! `--per-class N` sets the training images per class (default 60; a
//! quarter as many go to `val/`), `--seed S` the drawing.

use std::path::{Path, PathBuf};

const SIDE: u32 = 32;

/// The classes: a name, and the colour its shape is drawn in (jittered).
const CLASSES: [(&str, [u8; 3]); 3] = [
    ("cross", [60, 90, 220]),
    ("disc", [220, 60, 50]),
    ("square", [50, 190, 70]),
];

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut dir = None;
    let mut per_class = 60usize;
    let mut seed = 7u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or(format!("{flag} needs a value"));
        match arg.as_str() {
            "--per-class" => {
                per_class = value("--per-class")?
                    .parse()
                    .map_err(|_| "--per-class takes a whole number".to_string())?
            }
            "--seed" => {
                seed = value("--seed")?
                    .parse()
                    .map_err(|_| "--seed takes a whole number".to_string())?
            }
            flag if flag.starts_with("--") => return Err(format!("unknown flag {flag}")),
            path => dir = Some(PathBuf::from(path)),
        }
    }
    let dir = dir.ok_or("usage: make_image_folder DIR [--per-class N] [--seed S]")?;
    if per_class < 4 {
        return Err("--per-class must be at least 4".into());
    }
    let mut rng = Rng(seed);
    let mut written = 0;
    for (split, count) in [(dir.clone(), per_class), (dir.join("val"), per_class / 4)] {
        for (label, (name, _)) in CLASSES.iter().enumerate() {
            let class_dir = split.join(name);
            std::fs::create_dir_all(&class_dir).map_err(|e| format!("cannot create {}: {e}", class_dir.display()))?;
            for i in 0..count {
                write(&class_dir.join(format!("{name}-{i:03}.png")), label, &mut rng)?;
                written += 1;
            }
        }
    }
    println!(
        "wrote {written} PNGs of {} classes to {} ({per_class} training and {} validation images a class)",
        CLASSES.len(),
        dir.display(),
        per_class / 4
    );
    Ok(())
}

/// One image of class `label`.
fn write(path: &Path, label: usize, rng: &mut Rng) -> Result<(), String> {
    let colour = CLASSES[label]
        .1
        .map(|c| (c as i32 + rng.range(-30, 30)).clamp(0, 255) as u8);
    let half = rng.range(5, 10);
    let (cx, cy) = (rng.range(half, SIDE as i32 - half), rng.range(half, SIDE as i32 - half));
    let mut image = image::RgbImage::new(SIDE, SIDE);
    for (x, y, pixel) in image.enumerate_pixels_mut() {
        let (dx, dy) = (x as i32 - cx, y as i32 - cy);
        let inside = (dx.abs() <= half && dy.abs() <= half)
            && match label {
                0 => dx.abs() <= half / 3 || dy.abs() <= half / 3,
                1 => dx * dx + dy * dy <= half * half,
                _ => true,
            };
        *pixel = match inside {
            true => image::Rgb(colour),
            false => image::Rgb([0; 3].map(|_| rng.range(0, 60) as u8)),
        };
    }
    image
        .save(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// SplitMix64: the same images from the same seed everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    fn range(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next() % (hi - lo) as u64) as i32
    }
}
