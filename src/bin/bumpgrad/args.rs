//! The flags of `train` and `memory` (and `models`), what they may hold,
//! and the run's settings made of them.

use super::choices;
use bumpgrad::backend::{DeviceRequest, Precision};
use bumpgrad::data::{DataKind, DataSource, ImageOptions, ImageSize};
use bumpgrad::memory::ByteSize;
use bumpgrad::models::{SstLstm, TreeLstmSentiment};
use bumpgrad::ops::gather::Augment;
use bumpgrad::tasks::{
    Classification, ClassificationConfig, LanguageModel, LanguageModelConfig, SentenceClassification,
    SentenceClassificationConfig, TaskChoice, TreeBatching, TreeSentiment, TreeSentimentConfig,
};
use bumpgrad::train::{CheckpointPolicy, ConvAlgos, Every, Recompute, TrainConfig};
use clap::ValueEnum;
use std::path::PathBuf;

/// The ways `--tree-batching` runs a batch of trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TreeBatchingArg {
    /// Each tree's nodes one at a time, in post-order.
    None,
    /// Every node of one height across the batch's trees at once.
    Levels,
}

#[derive(clap::Args)]
pub(crate) struct MemoryArgs {
    #[command(flatten)]
    pub(crate) train: TrainArgs,
    /// Instead of one batch's plan, find the largest --batch whose whole arena (persistent region
    /// and the largest step) fits --arena-size, by dry runs (progress on stderr).
    #[arg(long)]
    pub(crate) max_batch: bool,
}

#[derive(clap::Args)]
pub(crate) struct ModelsArgs {
    /// The data set whose image shape and classes the models are counted for (a directory or
    /// `synthetic:cifar10[:N]`, as `train --data`).
    #[arg(long, default_value = "data/mnist", value_parser = parse_data)]
    pub(crate) data: DataSource,
    /// An image folder's images resized to HEIGHTxWIDTH pixels, as
    /// `train --image-size` reads
    /// them [default: their own size].
    #[arg(long, value_name = "HxW", value_parser = parse_image_size)]
    pub(crate) image_size: Option<ImageSize>,
    /// The image models' widths scaled by F, as `train --width-mult` scales them (the MNIST CNN
    /// has fixed widths) [default: 1].
    #[arg(long, value_name = "F", value_parser = choices::width_mult, allow_negative_numbers = true)]
    pub(crate) width_mult: Option<f32>,
}

/// `--image-size`: parsed by the library.
pub(crate) fn parse_image_size(text: &str) -> Result<ImageSize, String> {
    text.parse::<ImageSize>().map_err(|e| e.to_string())
}

/// `--data`: parsed by the library, so a bad synthetic source is refused
/// before anything runs.
pub(crate) fn parse_data(text: &str) -> Result<DataSource, String> {
    DataSource::parse(text).map_err(|e| e.to_string())
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum DeviceArg {
    /// The GPU when one is usable, else the CPU.
    Auto,
    Cpu,
    /// The GPU (`gpu` says the same).
    #[value(alias = "gpu")]
    Cuda,
}

/// `--precision`: the arithmetic of convolutions and matrix products.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum PrecisionArg {
    /// IEEE single-precision FMA math everywhere (the default; GPU results match the CPU's
    /// within float rounding).
    Fp32,
    /// Convolutions and matrix products on the tensor cores with TF32 inputs (10-bit mantissa)
    /// and fp32 accumulation, as PyTorch's allow_tf32; GPU only.
    Tf32,
    /// Mixed precision, as PyTorch's bf16 autocast: convolutions and matrix products on the tensor
    /// cores in bf16 with fp32 accumulation, activations and their gradients kept in bf16;
    /// batch-norm statistics, the loss and sums in fp32; fp32 weights, gradients and optimizer
    /// state (checkpoints stay fp32); GPU only.
    Bf16,
}

/// `--recompute`: what a step recomputes without a budget.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum RecomputeArg {
    /// As cheap, then on a GPU that times its convolutions the least step a search over budgets
    /// finds whose predicted cost stays within 2.5% of the step's predicted time, or within the
    /// cheap drops' own cost where more (convolution and block outputs recomputed, workspaces
    /// held); the same losses (the default).
    Lean,
    /// The outputs made again without a multiply-add (a residual block's batch norm + add +
    /// relu) where that lowers the step's peak: an elementwise pass each in backward, the same
    /// losses.
    Cheap,
    /// Nothing: every output backward reads is kept (the most step memory).
    None,
}

impl From<RecomputeArg> for Recompute {
    fn from(arg: RecomputeArg) -> Self {
        match arg {
            RecomputeArg::Lean => Self::Lean,
            RecomputeArg::Cheap => Self::Cheap,
            RecomputeArg::None => Self::Nothing,
        }
    }
}

/// `--conv-algos`: how a GPU chooses each convolution's algorithms.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ConvAlgosArg {
    /// Time every algorithm on the device before the first step and keep the fastest, as
    /// PyTorch's cudnn.benchmark (the default): a larger workspace where the step stays within
    /// 20% of the heuristic's; two runs may choose, and so round, differently.
    Timed,
    /// cuDNN's heuristic choice with at most 8 MiB of workspace: the same algorithms every run.
    Heuristic,
}

impl From<DeviceArg> for DeviceRequest {
    fn from(arg: DeviceArg) -> Self {
        match arg {
            DeviceArg::Auto => Self::Auto,
            DeviceArg::Cpu => Self::Cpu,
            DeviceArg::Cuda => Self::Cuda,
        }
    }
}

impl From<ConvAlgosArg> for ConvAlgos {
    fn from(arg: ConvAlgosArg) -> Self {
        match arg {
            ConvAlgosArg::Timed => Self::Timed,
            ConvAlgosArg::Heuristic => Self::Heuristic,
        }
    }
}

impl From<PrecisionArg> for Precision {
    fn from(arg: PrecisionArg) -> Self {
        match arg {
            PrecisionArg::Fp32 => Self::Fp32,
            PrecisionArg::Tf32 => Self::Tf32,
            PrecisionArg::Bf16 => Self::Bf16,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum GraphArg {
    /// On for the GPU, off for the CPU.
    Auto,
    On,
    Off,
}

#[derive(clap::Args)]
pub(crate) struct TrainArgs {
    /// Where to train.
    #[arg(help_heading = "Device and GPU", long, value_enum, default_value = "auto")]
    pub(crate) device: DeviceArg,
    /// Passes over the training set.
    #[arg(help_heading = "Optimisation", long, default_value_t = 4, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) epochs: usize,
    /// Examples per step (training and evaluation).
    #[arg(help_heading = "Optimisation", long, default_value_t = 100, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) batch: usize,
    /// The network to train (`bumpgrad models` lists them).
    #[arg(help_heading = "Model", long, default_value = choices::MODELS[0].0, value_parser = choices::model_name)]
    pub(crate) model: &'static str,
    /// Scales every channel count of resnet18, resnet50 and squeezenet (0.125 trains a small
    /// ResNet quickly on a CPU); default 1.
    #[arg(help_heading = "Model", long, value_parser = choices::width_mult, allow_negative_numbers = true)]
    pub(crate) width_mult: Option<f32>,
    /// Tokens each stream of a language model reads per step (the window of truncated
    /// backpropagation through time); a text corpus only.
    #[arg(help_heading = "Model", long, default_value_t = 64, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) seq_len: usize,
    /// Units of each recurrent layer of char-lstm and char-rnn (default 256) and sst-lstm
    /// (default 150).
    #[arg(help_heading = "Model", long, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) hidden: Option<usize>,
    /// Recurrent layers of char-lstm and char-rnn (default 2) and sst-lstm (default 1).
    #[arg(help_heading = "Model", long, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) layers: Option<usize>,
    /// Sentiment classes of a treebank's sentences: 5 (the root's label) or 2 (neutral
    /// sentences dropped).
    #[arg(help_heading = "Model", long, default_value_t = 5, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) classes: usize,
    /// Length buckets of a treebank's sentences, at most (each a step plan and a CUDA graph).
    #[arg(help_heading = "Model", long, default_value_t = 8, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) buckets: usize,
    /// How tree-lstm runs a batch of trees: `none`, each tree's nodes one at a time in
    /// post-order (Lantern's way); `levels`, every node of one height across the batch's
    /// trees at once. Default: levels when --batch is above 1.
    #[arg(help_heading = "Model", long, value_enum)]
    pub(crate) tree_batching: Option<TreeBatchingArg>,
    /// Word vectors to start sst-lstm's or tree-lstm's word embedding from, in GloVe's text
    /// format (a word, then its numbers, a line each; word2vec's text format too): each word of
    /// the training sentences the file has takes its vector, the others are drawn at random.
    /// Their length must be --embed (e.g. --embed 300 for glove.840B.300d.txt).
    #[arg(help_heading = "Model", long)]
    pub(crate) embeddings: Option<PathBuf>,
    /// Keep the word embedding fixed at the vectors of --embeddings: never trained.
    #[arg(help_heading = "Model", long)]
    pub(crate) freeze_embeddings: bool,
    /// Features of char-lstm's and char-rnn's token embedding (default: --hidden; 0: no
    /// embedding, the first recurrent layer reads one-hot tokens, as Lantern's models) and of
    /// sst-lstm's word embedding (default 300).
    #[arg(help_heading = "Model", long, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) embed: Option<usize>,
    /// The optimizer.
    #[arg(help_heading = "Optimisation", long, value_enum, default_value = "sgd")]
    pub(crate) optimizer: choices::OptimizerArg,
    /// Base learning rate (the schedule scales it step by step).
    #[arg(
        help_heading = "Optimisation",
        long,
        default_value_t = 0.05,
        allow_negative_numbers = true
    )]
    pub(crate) lr: f32,
    /// How the rate changes: constant, step:EPOCHS,GAMMA (times GAMMA every EPOCHS epochs) or
    /// cosine (to 0 at the end of the run).
    #[arg(help_heading = "Optimisation", long, default_value = "constant")]
    pub(crate) schedule: bumpgrad::optim::Schedule,
    /// Epochs of linear warm-up (from lr/W to lr over the first W steps) before the schedule.
    #[arg(
        help_heading = "Optimisation",
        long,
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub(crate) warmup_epochs: f64,
    /// Label smoothing ε of the cross-entropy loss, in [0, 1): the target is (1 − ε)·onehot + ε/C.
    #[arg(
        help_heading = "Optimisation",
        long,
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub(crate) label_smoothing: f32,
    /// SGD momentum, in [0, 1) (default 0).
    #[arg(help_heading = "Optimisation", long, allow_negative_numbers = true)]
    pub(crate) momentum: Option<f32>,
    /// SGD with Nesterov momentum (needs --momentum above 0).
    #[arg(help_heading = "Optimisation", long)]
    pub(crate) nesterov: bool,
    /// Weight decay: an L2 term added to the gradient (SGD, default 0) or decoupled decay
    /// (AdamW, default 0.01).
    #[arg(help_heading = "Optimisation", long, allow_negative_numbers = true)]
    pub(crate) weight_decay: Option<f64>,
    /// AdamW's betas (default 0.9,0.999).
    #[arg(help_heading = "Optimisation", long, value_parser = choices::betas, allow_negative_numbers = true)]
    pub(crate) betas: Option<(f64, f64)>,
    /// AdamW's or Adagrad's eps, above 0 (default 1e-8 for AdamW, 1e-10 for Adagrad).
    #[arg(help_heading = "Optimisation", long, allow_negative_numbers = true)]
    pub(crate) eps: Option<f64>,
    /// Clips the gradients before each update to this 2-norm over all parameters, as
    /// torch.nn.utils.clip_grad_norm_ (on the device, inside the step); any optimizer.
    #[arg(help_heading = "Optimisation", long, allow_negative_numbers = true)]
    pub(crate) clip_norm: Option<f32>,
    /// Adagrad's rate decay: step t runs at lr / (1 + (t − 1)·X) (default 0).
    #[arg(help_heading = "Optimisation", long, allow_negative_numbers = true)]
    pub(crate) lr_decay: Option<f64>,
    /// Adagrad's accumulator before the first step, 0 or more (default 0).
    #[arg(help_heading = "Optimisation", long, allow_negative_numbers = true)]
    pub(crate) initial_accumulator: Option<f64>,
    /// Seeds the initial weights, the epoch order and dropout.
    #[arg(help_heading = "Data", long, default_value_t = 42, value_parser = count::<u64>, allow_negative_numbers = true)]
    pub(crate) seed: u64,
    /// The data set: a directory holding MNIST's four IDX files (gzip or raw) or CIFAR-10's six
    /// binary batch files, an image folder (one subfolder of PNG or JPEG images per class, and
    /// an optional val/ folder of the same subfolders for validation), or `synthetic:cifar10[:N]`
    /// (N random CIFAR-10-shaped training images, default 50000, and N/5 test images: for speed
    /// and memory runs); or a text file, a character corpus for char-lstm and char-rnn (--batch
    /// streams of --seq-len tokens a step).
    #[arg(help_heading = "Data", long, default_value = "data/mnist", value_parser = parse_data)]
    pub(crate) data: DataSource,
    /// An image folder's images are resized to HEIGHTxWIDTH pixels (such as 64x64); needed when
    /// they differ in size [default: their own size].
    #[arg(help_heading = "Data", long, value_name = "HxW", value_parser = parse_image_size)]
    pub(crate) image_size: Option<ImageSize>,
    /// An image folder without val/: hold out this fraction of each class's images for validation
    /// (such as 0.2; the same images every run) [default: no validation set].
    #[arg(help_heading = "Data", long, value_name = "F", allow_negative_numbers = true)]
    pub(crate) val_split: Option<f64>,
    /// Random changes to each training image: `crop4` (pad 4 zero pixels, crop at a random
    /// offset), `flip` (mirror left-right half the time), `crop4,flip`, or `none`.
    #[arg(help_heading = "Data", long, default_value = "none")]
    pub(crate) augment: Augment,
    /// Arena size (64MiB, 2GiB, ...), or `auto` to measure exactly what the run needs.
    #[arg(help_heading = "Memory", long, default_value = "auto", value_parser = parse_arena_size)]
    pub(crate) arena_size: ArenaSize,
    /// CPU worker threads; 0 uses every core.
    #[arg(help_heading = "Device and GPU", long, default_value_t = 0, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) threads: usize,
    /// Train on the first N training images only (image data: a text corpus's windows and a treebank's sentences are read whole).
    #[arg(help_heading = "Data", long, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) train_limit: Option<usize>,
    /// Evaluate on the first N test images only (image data: a text corpus's windows and a treebank's sentences are read whole).
    #[arg(help_heading = "Data", long, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) test_limit: Option<usize>,
    /// Capture the first full training step as a CUDA graph and replay it for every later one.
    #[arg(help_heading = "Device and GPU", long, value_enum, default_value = "auto")]
    pub(crate) graph: GraphArg,
    /// Time every op of training step 41 (on the GPU or the CPU) and print where a step's time goes.
    #[arg(help_heading = "Device and GPU", long)]
    pub(crate) profile: bool,
    /// Fill the step region with NaNs after every step, so a kernel reading memory it did not
    /// write shows up as a NaN loss (on by default in debug builds).
    #[arg(help_heading = "Memory", long)]
    pub(crate) poison_step: bool,
    /// Where checkpoints go [default: the --resume directory, else ./checkpoints].
    #[arg(help_heading = "Checkpoints", long)]
    pub(crate) checkpoint_dir: Option<PathBuf>,
    /// How often to write a checkpoint: 500steps, 2epochs, or `off` (then only when stopped by
    /// Ctrl-C or SIGTERM).
    #[arg(help_heading = "Checkpoints", long, default_value = "1epoch", value_parser = parse_every)]
    pub(crate) checkpoint_every: EveryArg,
    /// How many of the newest checkpoints to keep.
    #[arg(help_heading = "Checkpoints", long, default_value_t = 3, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) keep_checkpoints: usize,
    /// Continue from the newest valid checkpoint in DIR (damaged newer ones are reported and skipped).
    #[arg(help_heading = "Checkpoints", long, value_name = "DIR")]
    pub(crate) resume: Option<PathBuf>,
    /// Place step buffers by a liveness plan, reusing the bytes of buffers that died (`off`: every
    /// buffer stays until the step's reset).
    #[arg(help_heading = "Memory", long, value_enum, default_value = "on")]
    pub(crate) memory_plan: Switch,
    /// Convolutions by deterministic cuDNN algorithms only, so that a GPU run repeats bit for bit
    /// (1.3× to 2.5× slower steps on the MNIST CNN; the CPU is deterministic anyway).
    #[arg(help_heading = "Device and GPU", long)]
    pub(crate) deterministic: bool,
    /// The arithmetic of convolutions and matrix products.
    #[arg(help_heading = "Device and GPU", long, value_enum, default_value = "fp32")]
    pub(crate) precision: PrecisionArg,
    /// Step memory a training step may use (512MiB, 2GiB, ...): above it, convolution and block
    /// outputs are recomputed in backward rather than kept, chosen for the least extra time (the
    /// same losses, more time).
    #[arg(help_heading = "Memory", long, value_parser = parse_budget)]
    pub(crate) memory_budget: Option<usize>,
    /// What a training step recomputes in backward when no --memory-budget is given.
    #[arg(help_heading = "Memory", long, value_enum, default_value = "lean")]
    pub(crate) recompute: RecomputeArg,
    /// How the GPU chooses each convolution's algorithms (--deterministic: the heuristic's,
    /// deterministic ones).
    #[arg(help_heading = "Device and GPU", long, value_enum, default_value = "timed")]
    pub(crate) conv_algos: ConvAlgosArg,
    /// How much the timed convolution algorithms' workspaces may grow the step over the
    /// heuristic's, as a fraction of it: more is faster where cuDNN's fastest algorithms need
    /// large workspaces, for more step memory.
    #[arg(help_heading = "Memory", long, value_name = "F", default_value_t = bumpgrad::train::TUNING_GROWTH)]
    pub(crate) workspace_growth: f64,
    /// Write the training step's memory timeline (SVG) to FILE before training.
    #[arg(help_heading = "Memory", long, value_name = "FILE")]
    pub(crate) memory_report: Option<PathBuf>,
    /// Print one JSON object per epoch on stdout; human text goes to stderr.
    #[arg(help_heading = "Output", long)]
    pub(crate) json: bool,
    /// Train data-parallel on N GPUs of this host, one process per GPU, each with --batch
    /// examples per step (a step is N × --batch). On several hosts, start one process per GPU with
    /// srun, mpirun, or RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set as torchrun does.
    #[arg(help_heading = "Distributed", long, value_name = "N", value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) gpus: Option<usize>,
    /// Data-parallel gradient bucket size in KiB: each bucket is summed across the GPUs as soon as
    /// backward has produced it.
    #[arg(help_heading = "Distributed", long, value_name = "KIB", default_value_t = 4, value_parser = count::<usize>, allow_negative_numbers = true)]
    pub(crate) bucket_kib: usize,
    /// Seconds the processes of a data-parallel run wait for each other to start.
    #[arg(help_heading = "Distributed", long, value_name = "SECS", default_value_t = 120, value_parser = count::<u64>, allow_negative_numbers = true)]
    pub(crate) rendezvous_timeout: u64,
    /// File holding this job's rendezvous token (instead of BUMPGRAD_RENDEZVOUS_TOKEN): only
    /// processes that know it can join the run. --gpus makes one itself.
    #[arg(help_heading = "Distributed", long, value_name = "FILE")]
    pub(crate) rendezvous_token_file: Option<PathBuf>,
    /// Seconds a data-parallel process may go without finishing a step before the whole run is
    /// ended (another process stuck or gone).
    #[arg(help_heading = "Distributed", long, value_name = "SECS", default_value_t = 300, value_parser = count::<u64>, allow_negative_numbers = true)]
    pub(crate) collective_timeout: u64,
    /// The flags that define the run, as `resume::recorded` keeps them for
    /// its checkpoints (set by `main`, never parsed).
    #[arg(skip)]
    pub(crate) command_line: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Switch {
    On,
    Off,
}

#[derive(Clone, Copy)]
pub(crate) struct EveryArg(pub(crate) Option<Every>);

pub(crate) fn parse_every(s: &str) -> Result<EveryArg, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(EveryArg(None));
    }
    s.parse::<Every>().map(|e| EveryArg(Some(e)))
}

/// A count or a number of seconds. Negative numbers reach this parser
/// rather than being taken for a flag, so `--batch -5` is told what the flag
/// takes, not "unexpected argument '-5'".
pub(crate) fn count<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("expected a whole number (0, 1, 2, ...), got {s:?}"))
}

#[derive(Clone, Copy)]
pub(crate) struct ArenaSize(pub(crate) Option<usize>);

pub(crate) fn parse_budget(s: &str) -> Result<usize, String> {
    match s.parse::<ByteSize>() {
        Ok(b) if b.0 > 0 => Ok(b.0),
        Ok(_) => Err("a budget of 0 bytes fits no step".into()),
        Err(e) => Err(e.to_string()),
    }
}

pub(crate) fn parse_arena_size(s: &str) -> Result<ArenaSize, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(ArenaSize(None));
    }
    s.parse::<ByteSize>()
        .map(|b| ArenaSize(Some(b.0)))
        .map_err(|e| e.to_string())
}

impl TrainArgs {
    /// Refuses values no run can use, whether or not this run would reach
    /// the code that reads them (a data-parallel setting on a run alone),
    /// the same for `train` and `memory`, and a `--memory-report` file that
    /// cannot be written. Values that depend on the data or the device are
    /// the library's to refuse.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if self.gpus == Some(0) {
            anyhow::bail!("--gpus must be at least 1");
        }
        if self.gpus.is_some() && matches!(self.device, DeviceArg::Cpu) {
            anyhow::bail!(
                "--gpus trains on GPUs (through NCCL); drop --device cpu, or drop --gpus to train on the CPU"
            );
        }
        choices::model(self.model, &self.model_flags()).map_err(anyhow::Error::msg)?;
        if let Some(path) = &self.embeddings {
            let readers = [SstLstm::NAME, TreeLstmSentiment::NAME];
            if !readers.contains(&self.model) {
                anyhow::bail!(
                    "--embeddings starts a model's word embedding, and {} has none ({} and {} do); drop it",
                    self.model,
                    readers[0],
                    readers[1]
                );
            }
            if !path.is_file() {
                anyhow::bail!(
                    "--embeddings {}: no such file; pass a file of word vectors in GloVe's text format (a word, then its numbers, a line each)",
                    path.display()
                );
            }
        }
        if self.freeze_embeddings && self.embeddings.is_none() {
            anyhow::bail!(
                "--freeze-embeddings keeps pretrained word vectors fixed; pass them with --embeddings FILE, or drop it to train the embedding from random"
            );
        }
        if self.tree_batching.is_some() && self.model != TreeLstmSentiment::NAME {
            anyhow::bail!(
                "--tree-batching says how {} runs a batch of trees; {} reads no trees, so drop it",
                TreeLstmSentiment::NAME,
                self.model
            );
        }
        if let Some(m) = self.momentum.filter(|m| !(0.0..1.0).contains(m)) {
            anyhow::bail!("--momentum must be in [0, 1), got {m}");
        }
        if self.nesterov && self.momentum.unwrap_or(0.0) == 0.0 {
            anyhow::bail!("--nesterov needs a --momentum above 0 (e.g. --momentum 0.9)");
        }
        if let Some(wd) = self.weight_decay.filter(|wd| !(wd.is_finite() && *wd >= 0.0)) {
            anyhow::bail!("--weight-decay must be 0 or more, got {wd}");
        }
        if let Some((b1, b2)) = self
            .betas
            .filter(|(a, b)| !((0.0..1.0).contains(a) && (0.0..1.0).contains(b)))
        {
            anyhow::bail!("--betas must both be in [0, 1), got {b1},{b2}");
        }
        if let Some(eps) = self.eps.filter(|e| !(e.is_finite() && *e > 0.0)) {
            anyhow::bail!("--eps must be above 0, got {eps}");
        }
        if let Some(x) = self.clip_norm.filter(|x| !(x.is_finite() && *x > 0.0)) {
            anyhow::bail!("--clip-norm must be above 0, got {x} (e.g. --clip-norm 1.0; drop it not to clip)");
        }
        if let Some(x) = self.lr_decay.filter(|x| !(x.is_finite() && *x >= 0.0)) {
            anyhow::bail!("--lr-decay must be 0 or more, got {x}");
        }
        if let Some(x) = self.initial_accumulator.filter(|x| !(x.is_finite() && *x >= 0.0)) {
            anyhow::bail!("--initial-accumulator must be 0 or more, got {x}");
        }
        if !(self.warmup_epochs.is_finite() && self.warmup_epochs >= 0.0) {
            anyhow::bail!("--warmup-epochs must be 0 or more, got {}", self.warmup_epochs);
        }
        self.optimizer_choice()?;
        if self.bucket_kib == 0 {
            anyhow::bail!("--bucket-kib must be at least 1 (KiB of gradients summed at once; the default is 4)");
        }
        if self.rendezvous_timeout == 0 {
            anyhow::bail!("--rendezvous-timeout must be at least 1 second (the default is 120)");
        }
        if self.collective_timeout == 0 {
            anyhow::bail!("--collective-timeout must be at least 1 second (the default is 300)");
        }
        if self.memory_report.is_some() && self.memory_plan == Switch::Off {
            // The timeline draws the plan; without one there is nothing to draw.
            anyhow::bail!(
                "--memory-report draws the step's memory plan, which --memory-plan off turns off; drop one of the two"
            );
        }
        if let Some(path) = &self.memory_report {
            check_report_path(path)?;
        }
        Ok(())
    }

    /// The optimizer and its settings, or which flag does not belong to it.
    pub(crate) fn optimizer_choice(&self) -> anyhow::Result<bumpgrad::nn::OptimizerChoice> {
        let flags = choices::OptimizerFlags {
            momentum: self.momentum,
            nesterov: self.nesterov,
            weight_decay: self.weight_decay,
            betas: self.betas,
            eps: self.eps,
            lr_decay: self.lr_decay,
            initial_accumulator: self.initial_accumulator,
        };
        let choice = choices::optimizer(self.optimizer, &flags).map_err(anyhow::Error::msg)?;
        Ok(match self.clip_norm {
            Some(max_norm) => bumpgrad::optim::ClipGradNorm::around(choice, max_norm),
            None => choice,
        })
    }

    fn model_flags(&self) -> choices::ModelFlags {
        choices::ModelFlags {
            width_mult: self.width_mult,
            embed: self.embed,
            hidden: self.hidden,
            layers: self.layers,
            freeze_embeddings: self.freeze_embeddings,
        }
    }

    /// The task the data calls for: language modelling on a text corpus,
    /// sentence classification on a treebank, classification on images.
    fn task(&self) -> TaskChoice {
        match DataKind::of(&self.data) {
            DataKind::Corpus => LanguageModel::choice(LanguageModelConfig { seq_len: self.seq_len }),
            DataKind::Treebank if self.model == TreeLstmSentiment::NAME => TreeSentiment::choice(TreeSentimentConfig {
                batching: match self.tree_batching {
                    None => TreeBatching::Auto,
                    Some(TreeBatchingArg::None) => TreeBatching::PostOrder,
                    Some(TreeBatchingArg::Levels) => TreeBatching::Levels,
                },
            }),
            DataKind::Treebank => SentenceClassification::choice(SentenceClassificationConfig {
                classes: self.classes,
                buckets: self.buckets,
            }),
            DataKind::Images => Classification::choice(ClassificationConfig {
                label_smoothing: self.label_smoothing,
                augment: self.augment,
            }),
        }
    }

    pub(crate) fn config(&self) -> TrainConfig {
        let mut cfg = TrainConfig::builder()
            .epochs(self.epochs)
            .batch(self.batch)
            // Checked in `check`, which every command runs first.
            .model(choices::model(self.model, &self.model_flags()).unwrap_or_default())
            // Checked in `check`, which every command runs first.
            .optimizer(self.optimizer_choice().unwrap_or_default())
            .task(self.task())
            .lr(self.lr)
            .schedule(self.schedule.with_warmup(self.warmup_epochs).unwrap_or(self.schedule))
            .seed(self.seed)
            .data_dir(self.data.to_string())
            .image_options(ImageOptions {
                size: self.image_size,
                val_split: self.val_split,
                channels: None,
            })
            .checkpoints(CheckpointPolicy {
                dir: self
                    .checkpoint_dir
                    .clone()
                    .or_else(|| self.resume.clone())
                    .unwrap_or_else(|| PathBuf::from("checkpoints")),
                every: self.checkpoint_every.0,
                keep: self.keep_checkpoints,
            })
            .command_line(self.command_line.clone())
            .memory_plan(self.memory_plan == Switch::On)
            .workspace_growth(self.workspace_growth)
            .device(self.device.into())
            .threads(self.threads)
            .precision(self.precision.into())
            .deterministic(self.deterministic)
            .conv_algos(self.conv_algos.into())
            .recompute(self.recompute.into())
            .profile(self.profile)
            .build();
        // The settings whose flags may be absent, as the flags left them.
        (cfg.run.train_limit, cfg.run.test_limit, cfg.run.resume) =
            (self.train_limit, self.test_limit, self.resume.clone());
        cfg.run.embeddings = self.embeddings.clone();
        (cfg.memory.arena_size, cfg.memory.memory_budget) = (self.arena_size.0, self.memory_budget);
        cfg.memory.poison_step = self.poison_step.then_some(true);
        cfg.device.graph = match self.graph {
            GraphArg::Auto => None,
            GraphArg::On => Some(true),
            GraphArg::Off => Some(false),
        };
        cfg
    }
}

/// Makes sure `--memory-report`'s file can be written before the work that
/// fills it: a bad path is refused at once, not after planning (`memory`)
/// or as a warning once training has started (`train`). An existing file is
/// not truncated here.
pub(crate) fn check_report_path(path: &std::path::Path) -> anyhow::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map(drop)
        .map_err(|e| report_unwritable(path, e))
}

/// The one message for a memory timeline that cannot be written.
pub(crate) fn report_unwritable(path: &std::path::Path, e: std::io::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot write the memory timeline to {}: {e}; pass --memory-report a file in a directory you can write to",
        path.display()
    )
}
