//! Everything that can go wrong writing, reading or finding a checkpoint.

use std::path::{Path, PathBuf};

/// A checkpoint failure. Every variant that involves a file names it, and
/// every message ends with what to do, because these reach the user of the
/// CLI directly (through [`crate::Error::Checkpoint`]).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    // ---- reading -------------------------------------------------------
    /// A checkpoint file could not be read.
    #[error("cannot read checkpoint {}: {source} — check the path and its permissions", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    /// A file that does not parse as safetensors.
    #[error(
        "{} is not a safetensors file ({reason}) — point at a ckpt-*.safetensors file written by bumpgrad",
        path.display()
    )]
    NotSafetensors {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },

    /// A file shorter than its header says: a write cut short.
    #[error(
        "{} is truncated: its header implies {expected_bytes} bytes but it has {found_bytes} — the write \
         was interrupted or the file was cut short; delete it and resume from an earlier checkpoint",
        path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes the header implies.
        expected_bytes: u64,
        /// Bytes there are.
        found_bytes: u64,
    },

    /// A file longer than its header says.
    #[error(
        "{} has trailing bytes: its header implies {expected_bytes} bytes but it has {found_bytes} — the \
         file is corrupt; delete it and resume from an earlier checkpoint",
        path.display()
    )]
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// Bytes the header implies.
        expected_bytes: u64,
        /// Bytes there are.
        found_bytes: u64,
    },

    /// A safetensors header that is not valid JSON of the format's shape.
    #[error(
        "{} has an invalid safetensors header ({reason}) — the file is corrupt; delete it and resume from \
         an earlier checkpoint",
        path.display()
    )]
    Header {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A safetensors file another tool wrote.
    #[error(
        "{} is a safetensors file but not a bumpgrad checkpoint (format {}) — it holds weights from \
         another tool; resume only from files written by bumpgrad",
        path.display(),
        found.as_deref().map_or_else(|| "tag missing".to_string(), |f| format!("{f:?}"))
    )]
    WrongFormat {
        /// The file.
        path: PathBuf,
        /// The format its metadata names, if any.
        found: Option<String>,
    },

    /// A checkpoint of a format version this build does not read.
    #[error(
        "{} is a bumpgrad checkpoint of version {found:?}, but this build reads version {} only — \
         resume with the bumpgrad that wrote it",
        path.display(),
        super::VERSION
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version it records.
        found: String,
    },

    /// A checkpoint without a metadata entry every checkpoint has.
    #[error(
        "{} lacks the metadata entry {key:?} — the file is corrupt or was written by something else; \
         resume from an earlier checkpoint",
        path.display()
    )]
    MissingMetadata {
        /// The file.
        path: PathBuf,
        /// The entry.
        key: &'static str,
    },

    /// A metadata entry whose value does not parse.
    #[error(
        "{} has metadata {key:?} = {value:?}, expected {expected} — the file is corrupt; resume from an \
         earlier checkpoint",
        path.display()
    )]
    BadMetadata {
        /// The file.
        path: PathBuf,
        /// The entry.
        key: &'static str,
        /// Its value.
        value: String,
        /// What it should be, in words.
        expected: &'static str,
    },

    /// A tensor of another type than F32, which checkpoints hold only.
    #[error(
        "{} holds tensor {name:?} as {dtype}, but checkpoints hold F32 only — the file was not written \
         by bumpgrad or is corrupt",
        path.display()
    )]
    NotF32 {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its type.
        dtype: String,
    },

    /// A tensor whose data spans other bytes than its shape needs.
    #[error(
        "{}: tensor {name:?} has shape {shape:?}, which needs {expected} bytes of F32, but its data \
         offsets span {found_bytes} bytes — the file is corrupt; resume from an earlier checkpoint",
        path.display(),
        expected = expected_bytes.map_or_else(|| "more than 2^64".to_string(), |b| b.to_string())
    )]
    ShapeMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its shape.
        shape: Vec<u64>,
        /// `None` when the shape's byte count overflows u64.
        expected_bytes: Option<u64>,
        /// Bytes its data offsets span.
        found_bytes: u64,
    },

    /// Tensors whose data overlap or leave gaps in the data section.
    #[error(
        "{}: the tensors' data offsets do not tile the data section ({reason}) — the file is corrupt; \
         resume from an earlier checkpoint",
        path.display()
    )]
    Layout {
        /// The file.
        path: PathBuf,
        /// Where the tiling breaks.
        reason: String,
    },

    /// A file whose SHA-256 is not the one its header records: damage anywhere
    /// in it.
    #[error(
        "{} fails its checksum: the header records {expected} but the contents hash to {found} — the \
         file was corrupted on disk or in transit; resume from an earlier checkpoint",
        path.display()
    )]
    Checksum {
        /// The file.
        path: PathBuf,
        /// The digest recorded, in hex.
        expected: String,
        /// The contents' digest, in hex.
        found: String,
    },

    /// A checkpoint whose name and contents disagree on its step.
    #[error(
        "{} is named for step {named} but records step {recorded} — it was renamed or copied over; \
         rename it to ckpt-{recorded:012}.safetensors or delete it",
        path.display()
    )]
    StepMismatch {
        /// The file.
        path: PathBuf,
        /// The step its name says.
        named: u64,
        /// The step it records.
        recorded: u64,
    },

    // ---- writing -------------------------------------------------------
    /// A checkpoint built wrong (a name twice, a length off): the caller's bug,
    /// refused before writing.
    #[error("cannot write checkpoint: {reason} — this is a bug in the code that built the checkpoint")]
    Invalid {
        /// What is wrong.
        reason: String,
    },

    /// The checkpoint directory could not be made.
    #[error(
        "cannot create checkpoint directory {}: {source} — check the path and its permissions, or \
         choose another directory",
        dir.display()
    )]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    /// The checkpoint directory cannot be written in, found before training
    /// starts.
    #[error(
        "cannot write in checkpoint directory {}: {source} — check its permissions and that its file \
         system is writable, or choose another directory",
        dir.display()
    )]
    NotWritable {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    /// The disk filled while a checkpoint was written; the earlier ones are
    /// intact.
    #[error(
        "no space left writing checkpoint {}: {source} — free space on that disk or choose another \
         checkpoint directory; earlier checkpoints there are intact",
        path.display()
    )]
    DiskFull {
        /// The checkpoint being written.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    /// A step of the atomic write failed; the earlier checkpoints are intact.
    #[error(
        "cannot write checkpoint {} ({stage}): {source} — check the directory's permissions and free \
         space; earlier checkpoints there are intact",
        path.display()
    )]
    Write {
        /// The checkpoint being written.
        path: PathBuf,
        /// The step that failed ("writing", "syncing", "renaming"...).
        stage: &'static str,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    /// A checkpoint was saved, but an old one past `--keep-checkpoints` could
    /// not be removed.
    #[error(
        "checkpoint {} was saved, but removing the old checkpoint {} failed: {source} — delete it by \
         hand and check the directory's permissions",
        saved.display(),
        path.display()
    )]
    Prune {
        /// The checkpoint saved.
        saved: PathBuf,
        /// The old checkpoint.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    // ---- finding -------------------------------------------------------
    /// A directory to resume from that does not exist.
    #[error(
        "checkpoint directory {} does not exist — check the path, or start without resuming",
        dir.display()
    )]
    MissingDir {
        /// The directory.
        dir: PathBuf,
    },

    /// A checkpoint directory that could not be listed.
    #[error("cannot list checkpoint directory {}: {source} — check its permissions", dir.display())]
    ListDir {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    /// A directory whose every checkpoint was refused.
    #[error(
        "none of the {} checkpoints in {} reads cleanly (the newest: {}) — restore one from a backup, \
         or move them away to start from scratch",
        skipped.len(),
        dir.display(),
        skipped.first().map_or_else(String::new, |(_, why)| why.to_string())
    )]
    NoValidCheckpoint {
        /// The directory.
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
