//! A trained image classifier, ready to classify images one batch at a
//! time: its network built in an arena sized by a dry run of its own
//! forward step (no hand-sized arena), its weights read from a checkpoint,
//! and the normalisation the training run applied, as the checkpoint
//! stored it.

use super::evaluate::softmax;
use crate::backend::{Device, DeviceRequest};
use crate::checkpoint::{Checkpoint, NamedTensor};
use crate::nn::{Input, Mode, ModelChoice, Network, ParamStore};
use crate::tensor::Shape;
use crate::{Engine, Error, Result};
use std::path::{Path, PathBuf};

/// The checkpoint metadata key under which a run stores what its image
/// model was built for: `{"example": [C, H, W], "classes": N, "normalize":
/// [[mean, std], …], "class_names": [..]}` (one pair per channel, of pixels
/// scaled to [0, 1]; one name per class).
pub const IMAGE_INPUT_KEY: &str = "image_input";

/// What an image classifier reads and how its pixels were normalised.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImageInput {
    /// One image: `[channels, rows, cols]`.
    pub example: Vec<usize>,
    /// The model's classes.
    pub classes: usize,
    /// Mean and standard deviation per channel.
    pub normalize: Vec<(f32, f32)>,
    /// The classes' names in label order; empty in a checkpoint written
    /// before they were stored (then a class is its number).
    #[serde(default)]
    pub class_names: Vec<String>,
}

impl ImageInput {
    /// What the checkpoint's run stored, from its configuration.
    pub fn of_checkpoint(ckpt: &Checkpoint) -> Result<Self> {
        let config: serde_json::Value = serde_json::from_str(&ckpt.config_json)
            .map_err(|e| Error::Config(format!("the checkpoint's configuration is not JSON: {e}")))?;
        let stored = config.get(IMAGE_INPUT_KEY).ok_or_else(|| {
            Error::Config(
                "the checkpoint does not say what images its model reads (it was written by a language model, or before checkpoints stored it)"
                    .into(),
            )
        })?;
        let input: Self = serde_json::from_value(stored.clone())
            .map_err(|e| Error::Config(format!("the checkpoint's {IMAGE_INPUT_KEY} does not read: {e}")))?;
        let names = input.class_names.len();
        if input.example.len() != 3
            || input.normalize.len() != input.example[0]
            || input.classes == 0
            || (names != 0 && names != input.classes)
        {
            return Err(Error::Config(format!(
                "the checkpoint's {IMAGE_INPUT_KEY} is inconsistent: {input:?}"
            )));
        }
        Ok(input)
    }

    /// Class `class`'s name: the stored one, else its number.
    pub fn class_name(&self, class: usize) -> String {
        self.class_names
            .get(class)
            .cloned()
            .unwrap_or_else(|| class.to_string())
    }

    /// Bytes of one image, channels first.
    pub fn image_bytes(&self) -> usize {
        self.example.iter().product()
    }
}

/// Reads the checkpoint at `path`: a checkpoint file, or a directory whose
/// newest valid checkpoint is taken. Returns the file read.
pub fn open_checkpoint(path: &Path) -> Result<(PathBuf, Checkpoint)> {
    if path.is_dir() {
        let latest = crate::checkpoint::latest_valid(path)?
            .ok_or_else(|| Error::Config(format!("{} holds no checkpoint file", path.display())))?;
        return Ok((latest.path, latest.checkpoint));
    }
    Ok((path.to_path_buf(), crate::checkpoint::read(path)?))
}

/// A trained classifier in an arena of its own.
pub struct Predictor {
    engine: Engine,
    network: Box<dyn Network>,
    input: ImageInput,
    batch: usize,
    /// The batch's normalised pixels and its logits, reused from call to
    /// call.
    pixels: Vec<f32>,
    logits: Vec<f32>,
}

/// The one step a predictor plans and runs.
const FORWARD: u32 = 0;

impl Predictor {
    /// The classifier `model` (the model that wrote the checkpoint), with
    /// the weights of the checkpoint at `path` (a file, or a directory's
    /// newest valid one), classifying up to `batch` images a step on the
    /// device `request` opens with `threads` CPU threads (0: every core).
    pub fn from_checkpoint(
        path: &Path,
        model: &ModelChoice,
        request: DeviceRequest,
        threads: usize,
        batch: usize,
    ) -> Result<Self> {
        let (_, ckpt) = open_checkpoint(path)?;
        Self::new(&ckpt, model, request, threads, batch)
    }

    /// As [`Predictor::from_checkpoint`], from a checkpoint already read.
    pub fn new(
        ckpt: &Checkpoint,
        model: &ModelChoice,
        request: DeviceRequest,
        threads: usize,
        batch: usize,
    ) -> Result<Self> {
        if batch == 0 {
            return Err(Error::Config("a predictor needs a batch of at least one image".into()));
        }
        let input = ImageInput::of_checkpoint(ckpt)?;
        let (device, _) = Device::open_on(request, threads, 0, crate::ops::KERNELS)?;
        // A dry run of the forward step measures the arena and plans it;
        // the real engine then adopts that plan, so the step runs exactly
        // in the bytes measured.
        let mut dry = Engine::planning(&device, None);
        let (_, dry_net) = build(&mut dry, model, &input)?;
        let zeros = vec![0.0; batch * input.image_bytes()];
        let mut logits = vec![0.0; batch * input.classes];
        forward(&mut dry, dry_net.as_ref(), &input, batch, &zeros, &mut logits)?;
        let plans = dry.arena().plans().to_vec();
        let stats = dry.arena().stats();
        let peak = plans
            .iter()
            .map(|p| p.peak)
            .max()
            .unwrap_or(stats.step_high_water_bytes);
        let mut engine = Engine::new(device, stats.persistent_bytes + peak)?;
        engine.arena_mut().adopt_plans(&plans);
        let (store, network) = build(&mut engine, model, &input)?;
        load(&mut engine, &store, &ckpt.tensors)?;
        Ok(Self {
            engine,
            network,
            input,
            batch,
            pixels: zeros,
            logits,
        })
    }

    /// What the classifier reads.
    pub fn input(&self) -> &ImageInput {
        &self.input
    }

    /// Class probabilities of each image of `images`: 8-bit pixels, channels
    /// first, `input().image_bytes()` bytes an image, normalised as the
    /// training run normalised them.
    pub fn probabilities(&mut self, images: &[u8]) -> Result<Vec<Vec<f32>>> {
        let size = self.input.image_bytes();
        if images.is_empty() || !images.len().is_multiple_of(size) {
            return Err(Error::Config(format!(
                "{} bytes of pixels are not whole images of {size} bytes ({:?})",
                images.len(),
                self.input.example
            )));
        }
        let plane = size / self.input.example[0];
        let mut out = Vec::with_capacity(images.len() / size);
        for chunk in images.chunks(size * self.batch) {
            let n = chunk.len() / size;
            for (i, (&byte, value)) in chunk.iter().zip(self.pixels.iter_mut()).enumerate() {
                let (mean, std) = self.input.normalize[(i % size) / plane];
                *value = (byte as f32 / 255.0 - mean) / std;
            }
            // A short last batch runs as a full one, padded: one step shape,
            // one plan.
            self.pixels[chunk.len()..].fill(0.0);
            forward(
                &mut self.engine,
                self.network.as_ref(),
                &self.input,
                self.batch,
                &self.pixels,
                &mut self.logits,
            )?;
            out.extend(self.logits.chunks_exact(self.input.classes).take(n).map(softmax));
        }
        Ok(out)
    }
}

/// Declares `model`'s parameters in `engine`'s persistent region.
fn build(engine: &mut Engine, model: &ModelChoice, input: &ImageInput) -> Result<(ParamStore, Box<dyn Network>)> {
    let input = Input {
        example: Shape::new(&input.example),
        classes: input.classes,
    };
    let mut p = engine.persistent();
    // The seed draws initial weights the checkpoint then overwrites.
    ParamStore::build(&mut p, 0, |pb| model.build(input, pb))
}

/// The network's logits for one batch of normalised pixels.
fn forward(
    engine: &mut Engine,
    network: &dyn Network,
    input: &ImageInput,
    batch: usize,
    pixels: &[f32],
    logits: &mut [f32],
) -> Result<()> {
    let mut dims = vec![batch];
    dims.extend(&input.example);
    engine.planned_step(FORWARD, |s| {
        s.set_grad_enabled(false);
        let x = s.input("images", Shape::new(&dims), pixels)?;
        let y = network.forward(s, x.into(), Mode::Eval)?;
        s.read(y, logits)
    })
}

/// Writes the model's parameters and buffers from `tensors`, every one
/// checked before any is written.
fn load(engine: &mut Engine, store: &ParamStore, tensors: &[NamedTensor]) -> Result<()> {
    let mut writes = Vec::new();
    let mut problem = None;
    store.visit(
        &mut |entry, param| match tensors.iter().find(|t| t.name == entry.name) {
            Some(t) if t.shape == entry.shape.dims() => writes.push((param.buf(), t)),
            Some(t) => {
                problem.get_or_insert_with(|| {
                    format!(
                        "the checkpoint's {} is {:?}, the model's is {}: it was written by another model or width",
                        entry.name, t.shape, entry.shape
                    )
                });
            }
            None => {
                problem.get_or_insert_with(|| {
                    format!("the checkpoint has no {}: it was written by another model", entry.name)
                });
            }
        },
    );
    if let Some(problem) = problem {
        return Err(Error::Config(problem));
    }
    for (buf, t) in writes {
        engine.write_persistent(buf, &t.values)?;
    }
    Ok(())
}
