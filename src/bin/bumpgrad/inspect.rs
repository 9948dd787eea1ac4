//! `eval` and `predict`: a trained image classifier's checkpoint,
//! evaluated on a test split or asked about images. The model, its width,
//! the data set and the batch come from the settings the checkpoint stored,
//! so only the checkpoint has to be named.

use super::args::{parse_data, DeviceArg};
use super::choices;
use anyhow::Context;
use bumpgrad::checkpoint::Checkpoint;
use bumpgrad::data::{DataSource, ImageOptions, ImageSet, ImageSize};
use bumpgrad::nn::ModelChoice;
use bumpgrad::train::{self, Evaluation, ImageInput, Predictor, TrainConfig};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(crate) struct EvalArgs {
    /// A checkpoint file, or a checkpoint directory (its newest valid checkpoint is taken).
    #[arg(long)]
    pub(crate) checkpoint: PathBuf,
    /// The data set whose test split is evaluated; default: the one the checkpoint trained on.
    #[arg(long, value_parser = parse_data)]
    pub(crate) data: Option<DataSource>,
    /// Evaluate on the first N test images only.
    #[arg(long)]
    pub(crate) test_limit: Option<usize>,
    /// Images per step; default: the batch the checkpoint trained with.
    #[arg(long)]
    pub(crate) batch: Option<usize>,
    #[command(flatten)]
    pub(crate) device: DeviceFlags,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(clap::Args)]
pub(crate) struct PredictArgs {
    /// A checkpoint file, or a checkpoint directory (its newest valid checkpoint is taken).
    #[arg(long)]
    pub(crate) checkpoint: PathBuf,
    /// The classes to print for each image, most probable first.
    #[arg(long, default_value_t = 3)]
    pub(crate) top: usize,
    #[command(flatten)]
    pub(crate) device: DeviceFlags,
    /// Images to classify: PNG or JPEG files (.png, .jpg, .jpeg: resized and converted to what the
    /// model reads), IDX image files (as MNIST's, gzip or raw: every image in them), or raw files
    /// of exactly one image's 8-bit pixels, channels first (784 bytes for MNIST, 3072 for
    /// CIFAR-10).
    #[arg(required = true)]
    pub(crate) images: Vec<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct DeviceFlags {
    /// Where to run.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) device: DeviceArg,
    /// CPU worker threads; 0 uses every core.
    #[arg(long, default_value_t = 0)]
    pub(crate) threads: usize,
}

/// The settings a checkpoint's run stored, as far as `eval` and `predict`
/// need them.
struct Stored {
    model: ModelChoice,
    data: String,
    batch: usize,
    /// How its run read an image folder (the defaults otherwise).
    image_options: ImageOptions,
}

/// Reads the checkpoint at `path` and what its run stored.
fn open(path: &Path) -> anyhow::Result<(PathBuf, Checkpoint, Stored)> {
    let (file, ckpt) =
        train::open_checkpoint(path).with_context(|| format!("reading the checkpoint {}", path.display()))?;
    let stored = stored(&ckpt).with_context(|| format!("reading the settings stored in {}", file.display()))?;
    Ok((file, ckpt, stored))
}

fn stored(ckpt: &Checkpoint) -> anyhow::Result<Stored> {
    let config: serde_json::Value = serde_json::from_str(&ckpt.config_json).context("its settings are not JSON")?;
    // The run's settings are flattened into one object.
    let run = &config;
    let described = run["model"].as_str().context("it names no model")?;
    // "resnet18 ResNetConfig { depth: R18, width_mult: 0.125 }"
    let name = described.split_whitespace().next().unwrap_or_default();
    let name = choices::model_name(name).map_err(anyhow::Error::msg)?;
    let width_mult = described
        .split("width_mult: ")
        .nth(1)
        .and_then(|rest| rest.split([',', ' ', '}']).next())
        .map(|w| w.parse::<f32>().context("its width_mult is not a number"))
        .transpose()?
        .filter(|&w| w != 1.0);
    let flags = choices::ModelFlags {
        width_mult,
        ..Default::default()
    };
    let model = choices::model(name, &flags).map_err(anyhow::Error::msg)?;
    Ok(Stored {
        model,
        data: run["data_dir"].as_str().context("it names no data set")?.to_string(),
        batch: run["batch"].as_u64().context("it has no batch size")? as usize,
        // Absent from checkpoints written before image folders were read.
        image_options: match run.get("image_options") {
            Some(options) => {
                serde_json::from_value(options.clone()).context("its image folder settings do not read")?
            }
            None => ImageOptions::default(),
        },
    })
}

pub(crate) fn run_eval(args: &EvalArgs) -> anyhow::Result<()> {
    let (file, ckpt, stored) = open(&args.checkpoint)?;
    let data = args.data.as_ref().map_or(stored.data.clone(), |d| d.to_string());
    let mut cfg = TrainConfig::default();
    cfg.run.model = stored.model;
    cfg.run.batch = args.batch.unwrap_or(stored.batch);
    cfg.run.data_dir = PathBuf::from(&data);
    // An image folder is read as the model reads: its validation images as
    // the run chose them, at the size and in the colours it trained on.
    if ImageSet::is_folder(&cfg.run.data_dir) {
        cfg.run.image_options = stored.image_options;
        if let Ok(input) = ImageInput::of_checkpoint(&ckpt) {
            let [channels, rows, cols] = input.example[..] else {
                anyhow::bail!(
                    "the checkpoint's image shape {:?} is not [channels, rows, cols]",
                    input.example
                );
            };
            cfg.run.image_options.size = Some(ImageSize { rows, cols });
            cfg.run.image_options.channels = Some(channels);
        }
    }
    cfg.run.test_limit = args.test_limit;
    cfg.run.checkpoints = None;
    cfg.device.request = args.device.device.into();
    cfg.device.threads = args.device.threads;
    let eval = train::evaluate(&cfg, &ckpt).with_context(|| format!("evaluating {} on {data}", file.display()))?;
    let text = if args.json {
        let mut value = serde_json::to_value(&eval).context("encoding the evaluation")?;
        value["accuracy"] = eval.accuracy().into();
        value["class_accuracy"] = serde_json::to_value(eval.class_accuracy()).context("encoding")?;
        value["checkpoint"] = file.display().to_string().into();
        value["data"] = data.into();
        value.to_string() + "\n"
    } else {
        table(&file, &data, &eval)
    };
    super::emit(&text)
}

/// The evaluation for people: the headline, each class's accuracy, the
/// confusion matrix.
fn table(file: &Path, data: &str, eval: &Evaluation) -> String {
    let mut out = format!(
        "{} on {data}: accuracy {:.2}% ({} of {}), loss {:.4}\n",
        file.display(),
        100.0 * eval.accuracy(),
        eval.correct,
        eval.examples,
        eval.loss
    );
    let names: Vec<String> = (0..eval.confusion.len())
        .map(|class| {
            eval.class_names
                .get(class)
                .cloned()
                .unwrap_or_else(|| class.to_string())
        })
        .collect();
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0).max(5);
    out += &format!("{:>width$}  accuracy  confusion (columns: predicted class)\n", "class");
    for ((name, row), acc) in names.iter().zip(&eval.confusion).zip(eval.class_accuracy()) {
        let acc = acc.map_or("       -".to_string(), |a| format!("{:7.2}%", 100.0 * a));
        let cells: Vec<String> = row.iter().map(|n| format!("{n:>5}")).collect();
        out += &format!("{name:>width$}  {acc}  {}\n", cells.join(""));
    }
    out
}

pub(crate) fn run_predict(args: &PredictArgs) -> anyhow::Result<()> {
    if args.top == 0 {
        anyhow::bail!("--top 0 prints nothing; pass --top 1 or more");
    }
    let (file, ckpt, stored) = open(&args.checkpoint)?;
    let mut predictor = Predictor::new(
        &ckpt,
        &stored.model,
        args.device.device.into(),
        args.device.threads,
        stored.batch.min(256),
    )
    .with_context(|| format!("loading {} to predict", file.display()))?;
    let mut text = String::new();
    for path in &args.images {
        let (pixels, count) = if bumpgrad::data::folder::is_image_file(path) {
            let [channels, rows, cols] = predictor.input().example[..] else {
                anyhow::bail!(
                    "the checkpoint's image shape {:?} is not [channels, rows, cols]",
                    predictor.input().example
                );
            };
            let pixels = bumpgrad::data::folder::read_image(path, channels, rows, cols)
                .with_context(|| format!("reading the image {}", path.display()))?;
            (pixels, 1)
        } else {
            read_images(path, predictor.input().image_bytes(), &predictor.input().example)?
        };
        let probabilities = predictor
            .probabilities(&pixels)
            .with_context(|| format!("classifying {}", path.display()))?;
        for (i, p) in probabilities.iter().enumerate() {
            let mut ranked: Vec<(usize, f32)> = p.iter().copied().enumerate().collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let top: Vec<String> = ranked
                .iter()
                .take(args.top)
                .map(|(class, prob)| format!("{} ({:.2}%)", predictor.input().class_name(*class), 100.0 * prob))
                .collect();
            let which = match count {
                1 => path.display().to_string(),
                _ => format!("{}[{i}]", path.display()),
            };
            text += &format!("{which}: {}\n", top.join(", "));
        }
    }
    super::emit(&text)
}

/// The images of `path`: an IDX image file's, or one raw image of `size`
/// bytes. Returns their pixels and how many there are.
fn read_images(path: &Path, size: usize, example: &[usize]) -> anyhow::Result<(Vec<u8>, usize)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading the image file {}", path.display()))?;
    let idx = bumpgrad::data::idx::is_gzip(&bytes) || bytes.starts_with(&[0, 0, 8, 3]);
    if idx {
        let images = bumpgrad::data::read_images(path)?;
        let shape = [images.channels, images.rows, images.cols];
        if shape != example {
            anyhow::bail!(
                "{} holds {:?} images, and the checkpoint's model reads {example:?}",
                path.display(),
                shape
            );
        }
        if images.count == 0 {
            anyhow::bail!("{} holds no image", path.display());
        }
        return Ok((images.pixels, images.count));
    }
    if bytes.len() != size {
        anyhow::bail!(
            "{} is neither an IDX image file nor one raw image of {example:?} 8-bit pixels ({size} bytes): it has {} bytes",
            path.display(),
            bytes.len()
        );
    }
    Ok((bytes, 1))
}
