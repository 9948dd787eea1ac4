//! Everything that can go wrong writing, reading or finding a checkpoint.

use std::path::{Path, PathBuf};

/// A checkpoint failure. Every variant that involves a file names it, and
/// every message ends with what to do, because these reach the user of the
/// CLI directly (through [`crate::Error::Checkpoint`]).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    // ---- reading -------------------------------------------------------
    #[error("cannot read checkpoint {}: {source} — check the path and its permissions", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{} is not a safetensors file ({reason}) — point at a ckpt-*.safetensors file written by bumpgrad",
        path.display()
    )]
    NotSafetensors { path: PathBuf, reason: String },

    #[error(
        "{} is truncated: its header implies {expected_bytes} bytes but it has {found_bytes} — the write \
         was interrupted or the file was cut short; delete it and resume from an earlier checkpoint",
        path.display()
    )]
    Truncated {
        path: PathBuf,
        expected_bytes: u64,
        found_bytes: u64,
    },

    #[error(
        "{} has trailing bytes: its header implies {expected_bytes} bytes but it has {found_bytes} — the \
         file is corrupt; delete it and resume from an earlier checkpoint",
        path.display()
    )]
    TrailingBytes {
        path: PathBuf,
        expected_bytes: u64,
        found_bytes: u64,
    },

    #[error(
        "{} has an invalid safetensors header ({reason}) — the file is corrupt; delete it and resume from \
         an earlier checkpoint",
        path.display()
    )]
    Header { path: PathBuf, reason: String },

    #[error(
        "{} is a safetensors file but not a bumpgrad checkpoint (format {}) — it holds weights from \
         another tool; resume only from files written by bumpgrad",
        path.display(),
        found.as_deref().map_or_else(|| "tag missing".to_string(), |f| format!("{f:?}"))
    )]
    WrongFormat { path: PathBuf, found: Option<String> },

    #[error(
        "{} is a bumpgrad checkpoint of version {found:?}, but this build reads version {} only — \
         resume with the bumpgrad that wrote it",
        path.display(),
        super::VERSION
    )]
    UnsupportedVersion { path: PathBuf, found: String },

    #[error(
        "{} lacks the metadata entry {key:?} — the file is corrupt or was written by something else; \
         resume from an earlier checkpoint",
        path.display()
    )]
    MissingMetadata { path: PathBuf, key: &'static str },

    #[error(
        "{} has metadata {key:?} = {value:?}, expected {expected} — the file is corrupt; resume from an \
         earlier checkpoint",
        path.display()
    )]
    BadMetadata {
        path: PathBuf,
        key: &'static str,
        value: String,
        expected: &'static str,
    },

    #[error(
        "{} holds tensor {name:?} as {dtype}, but checkpoints hold F32 only — the file was not written \
         by bumpgrad or is corrupt",
        path.display()
    )]
    NotF32 { path: PathBuf, name: String, dtype: String },

    #[error(
        "{}: tensor {name:?} has shape {shape:?}, which needs {expected} bytes of F32, but its data \
         offsets span {found_bytes} bytes — the file is corrupt; resume from an earlier checkpoint",
        path.display(),
        expected = expected_bytes.map_or_else(|| "more than 2^64".to_string(), |b| b.to_string())
    )]
    ShapeMismatch {
        path: PathBuf,
        name: String,
        shape: Vec<u64>,
        /// `None` when the shape's byte count overflows u64.
        expected_bytes: Option<u64>,
        found_bytes: u64,
    },

    #[error(
        "{}: the tensors' data offsets do not tile the data section ({reason}) — the file is corrupt; \
         resume from an earlier checkpoint",
        path.display()
    )]
    Layout { path: PathBuf, reason: String },

    #[error(
        "{} fails its checksum: the header records {expected} but the contents hash to {found} — the \
         file was corrupted on disk or in transit; resume from an earlier checkpoint",
        path.display()
    )]
    Checksum {
        path: PathBuf,
        expected: String,
        found: String,
    },

    #[error(
        "{} is named for step {named} but records step {recorded} — it was renamed or copied over; \
         rename it to ckpt-{recorded:012}.safetensors or delete it",
        path.display()
    )]
    StepMismatch { path: PathBuf, named: u64, recorded: u64 },

    // ---- writing -------------------------------------------------------
    #[error("cannot write checkpoint: {reason} — this is a bug in the code that built the checkpoint")]
    Invalid { reason: String },

    #[error(
        "cannot create checkpoint directory {}: {source} — check the path and its permissions, or \
         choose another directory",
        dir.display()
    )]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "cannot write in checkpoint directory {}: {source} — check its permissions and that its file \
         system is writable, or choose another directory",
        dir.display()
    )]
    NotWritable {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "no space left writing checkpoint {}: {source} — free space on that disk or choose another \
         checkpoint directory; earlier checkpoints there are intact",
        path.display()
    )]
    DiskFull {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "cannot write checkpoint {} ({stage}): {source} — check the directory's permissions and free \
         space; earlier checkpoints there are intact",
        path.display()
    )]
    Write {
        path: PathBuf,
        stage: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "checkpoint {} was saved, but removing the old checkpoint {} failed: {source} — delete it by \
         hand and check the directory's permissions",
        saved.display(),
        path.display()
    )]
    Prune {
        saved: PathBuf,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    // ---- finding -------------------------------------------------------
    #[error(
        "checkpoint directory {} does not exist — check the path, or start without resuming",
        dir.display()
    )]
    MissingDir { dir: PathBuf },

    #[error("cannot list checkpoint directory {}: {source} — check its permissions", dir.display())]
    ListDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "none of the {} checkpoints in {} reads cleanly (the newest: {}) — restore one from a backup, \
         or move them away to start from scratch",
        skipped.len(),
        dir.display(),
        skipped.first().map_or_else(String::new, |(_, why)| why.to_string())
    )]
    NoValidCheckpoint {
        dir: PathBuf,
        /// Every checkpoint file found, newest first, with why it was refused.
        skipped: Vec<(PathBuf, CheckpointError)>,
    },
}

impl CheckpointError {
    /// The file or directory the error is about; `None` only for
    /// [`CheckpointError::Invalid`], which is about no file.
    pub fn path(&self) -> Option<&Path> {
        use CheckpointError::*;
        match self {
            Read { path, .. }
            | NotSafetensors { path, .. }
            | Truncated { path, .. }
            | TrailingBytes { path, .. }
            | Header { path, .. }
            | WrongFormat { path, .. }
            | UnsupportedVersion { path, .. }
            | MissingMetadata { path, .. }
            | BadMetadata { path, .. }
            | NotF32 { path, .. }
            | ShapeMismatch { path, .. }
            | Layout { path, .. }
            | Checksum { path, .. }
            | StepMismatch { path, .. }
            | DiskFull { path, .. }
            | Write { path, .. }
            | Prune { path, .. } => Some(path),
            CreateDir { dir, .. }
            | NotWritable { dir, .. }
            | MissingDir { dir }
            | ListDir { dir, .. }
            | NoValidCheckpoint { dir, .. } => Some(dir),
            Invalid { .. } => None,
        }
    }
}
