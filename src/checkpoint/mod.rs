//! Checkpoints: a training run's tensors and counters in one file that
//! survives crashes and loads in PyTorch.
//!
//! This module works on host data only: the caller copies parameters and
//! optimizer state out of the arena into a [`Checkpoint`] and back.
//!
//! # The file
//!
//! A [safetensors] file (`ckpt-<step, 12 digits>.safetensors`):
//!
//! ```text
//! u64 little-endian N | N bytes of JSON header, space-padded | data: every tensor's bytes, back to back
//! ```
//!
//! - **Tensors** are F32, little-endian, row-major, named as a PyTorch
//!   `state_dict` of the same model names them, so the parameters of
//!   `safetensors.torch.load_file(path)` go straight into
//!   `model.load_state_dict` (`scripts/check_checkpoint_torch.py`). For
//!   the MNIST CNN: `conv1.weight [10, 1, 5, 5]`, `conv2.weight [20, 10, 5, 5]`,
//!   `fc1.weight [50, 320]`, `fc1.bias [50]`, `fc2.weight [10, 50]`,
//!   `fc2.bias [10]` — [`ParamStore::name`](crate::nn::ParamStore::name)
//!   gives them. Optimizer state goes beside them as
//!   `optimizer.<parameter name>.momentum_buffer` ([`momentum_buffer_name`]),
//!   like the `momentum_buffer` of PyTorch's SGD state.
//! - **Metadata**, in the header's `__metadata__` string → string map:
//!   `format` = `bumpgrad-checkpoint`, `version` = `1`, `epoch` (epochs
//!   completed), `step` (steps done in all), `seed`, `config` (the training
//!   configuration as JSON, written by the caller), `checksum`, and the
//!   caller's extra entries (RNG state, dropout seeds, ...) under their own
//!   keys.
//! - **`checksum`** is `sha256:<hex>` over everything else in the file —
//!   metadata, names, shapes, offsets, data — in a canonical encoding
//!   independent of the header's JSON layout (see `format.rs`), so a file
//!   damaged anywhere, not only in its header, is refused.
//!
//! # Invariants
//!
//! - **Atomic.** A checkpoint is written under a temporary name, synced,
//!   renamed into place and the directory synced: a reader never sees a
//!   half-written file under a final name, and a crash at any moment leaves
//!   every earlier checkpoint intact (at worst a `.tmp` file, which readers
//!   ignore and the next write deletes).
//! - **Strict and total reading.** [`parse`] turns any bytes into a
//!   [`Checkpoint`] or a [`CheckpointError`] that names the file; it never
//!   panics and never allocates from a length field before checking it
//!   against the bytes present (it is fuzzed: `fuzz/`).
//! - **What is written reads back.** [`encode`] parses its own output before
//!   returning it, and values round-trip bit for bit (NaN payloads too).
//! - **Resume takes the newest good file.** [`latest_valid`] skips damaged
//!   newer checkpoints and reports them, rather than failing or silently
//!   starting over.
//!
//! [safetensors]: https://github.com/huggingface/safetensors

mod error;
mod files;
mod format;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use error::CheckpointError;
pub use files::{check_writable, file_name, latest_valid, read, step_of, write_atomic, Latest};
pub use format::{encode, parse};

/// The `format` metadata entry of every bumpgrad checkpoint.
pub const FORMAT: &str = "bumpgrad-checkpoint";
/// The layout version this build writes and reads.
pub const VERSION: u32 = 1;

const KEY_FORMAT: &str = "format";
const KEY_VERSION: &str = "version";
const KEY_EPOCH: &str = "epoch";
const KEY_STEP: &str = "step";
const KEY_SEED: &str = "seed";
const KEY_CONFIG: &str = "config";
const KEY_CHECKSUM: &str = "checksum";
/// Metadata keys with a typed field; [`Checkpoint::extra`] may not use them.
pub const RESERVED_KEYS: [&str; 7] = [
    KEY_FORMAT,
    KEY_VERSION,
    KEY_EPOCH,
    KEY_STEP,
    KEY_SEED,
    KEY_CONFIG,
    KEY_CHECKSUM,
];

/// One F32 tensor by name, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    /// Its name, as PyTorch's `state_dict` names it.
    pub name: String,
    /// Its shape, outermost first.
    pub shape: Vec<usize>,
    /// `shape.iter().product()` values.
    pub values: Vec<f32>,
}

impl NamedTensor {
    /// A tensor of `shape` named `name`; `values` must hold `shape`'s product
    /// of them (checked when written).
    pub fn new(name: impl Into<String>, shape: &[usize], values: Vec<f32>) -> Self {
        Self {
            name: name.into(),
            shape: shape.to_vec(),
            values,
        }
    }
}

/// Everything a run needs to continue where it stopped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checkpoint {
    /// Epochs completed.
    pub epoch: u64,
    /// Steps done in all; also the file's name.
    pub step: u64,
    /// The run's seed: a resumed run draws what the straight one would have.
    pub seed: u64,
    /// The training configuration, serialised by the caller.
    pub config_json: String,
    /// Further metadata (RNG state, dropout seeds, ...); keys must not be
    /// one of [`RESERVED_KEYS`].
    pub extra: BTreeMap<String, String>,
    /// Parameters and optimizer state; names unique. [`parse`] returns them
    /// sorted by name, whatever order they were written in.
    pub tensors: Vec<NamedTensor>,
}

impl Checkpoint {
    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&NamedTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// Where a parameter's SGD momentum goes: `optimizer.<param>.momentum_buffer`.
pub fn momentum_buffer_name(param: &str) -> String {
    optimizer_state_name(param, "momentum_buffer")
}

/// Where a checkpoint keeps optimizer state `state` (`exp_avg`, …) of
/// parameter `param`.
pub fn optimizer_state_name(param: &str, state: &str) -> String {
    format!("optimizer.{param}.{state}")
}
