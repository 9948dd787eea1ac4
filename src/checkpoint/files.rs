//! Checkpoint files in a directory: atomic writes, pruning, and finding the
//! newest one that reads cleanly.

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::format::{encode, parse};
use super::{Checkpoint, CheckpointError};

const PREFIX: &str = "ckpt-";
const SUFFIX: &str = ".safetensors";
const TMP_SUFFIX: &str = ".tmp";

/// The file name of the checkpoint taken after `step` steps:
/// `ckpt-<step, 12 digits at least>.safetensors`, so that names sort by step
/// in a directory listing for any run shorter than 10^12 steps.
pub fn file_name(step: u64) -> String {
    format!("{PREFIX}{step:012}{SUFFIX}")
}

/// The step of a checkpoint file name, if `name` is exactly what
/// [`file_name`] makes; anything else (other files, `.tmp` leftovers,
/// `ckpt-7.safetensors`) is not a checkpoint of ours.
pub fn step_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let step = digits.parse().ok()?;
    (file_name(step) == name).then_some(step)
}

/// Reads and verifies one checkpoint file (see [`parse`](super::parse) for
/// the checks). The file is read whole, so no length inside it can make
/// this allocate more than the file's size (plus the decoded values).
pub fn read(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let bytes = fs::read(path).map_err(|source| CheckpointError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&bytes, path)
}

/// Writes `ckpt` to `dir/ckpt-<step>.safetensors` atomically and durably,
/// then deletes older checkpoints so that the newest `keep` remain (by step
/// in the name), and stale `.tmp` files that crashed writes left behind.
/// Returns the path written.
///
/// Keep at least 2: a checkpoint damaged on disk later (a bad sector, a
/// full-disk truncation by another tool) then still has a predecessor for
/// [`latest_valid`] to fall back on. The checkpoint just written is never
/// deleted, even with `keep == 0` or when newer checkpoints exist (after
/// resuming from an older one, which the caller may want to move away); files
/// whose names [`step_of`] does not recognise are never touched. One writer
/// per directory: two processes checkpointing into the same directory would
/// share temporary names.
///
/// Order of events, each failure removing the temporary file and leaving
/// every existing checkpoint as it was:
/// 1. encode (a checkpoint that would not read back never reaches the disk);
/// 2. create `dir`; write `<name>.tmp`; `fsync` it;
/// 3. rename it to `<name>` (atomic: readers see the old file or the whole
///    new one, never a part), and `fsync` the directory so the rename
///    survives a power cut;
/// 4. prune.
pub fn write_atomic(dir: &Path, ckpt: &Checkpoint, keep: usize) -> Result<PathBuf, CheckpointError> {
    let bytes = encode(ckpt)?;
    fs::create_dir_all(dir).map_err(|source| CheckpointError::CreateDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let name = file_name(ckpt.step);
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    if let Err(err) = write_then_rename(&bytes, &tmp, &path) {
        // Best effort: the error being returned is the one that matters,
        // and a leftover .tmp is ignored by readers and pruned later.
        let _ = fs::remove_file(&tmp);
        return Err(err);
    }
    sync_dir(dir).map_err(|source| write_error(&path, "fsync the directory", source))?;
    prune(dir, &path, ckpt.step, keep)?;
    Ok(path)
}

/// Probes made by this process so far: with the process id, each probe's
/// name is its own, so runs starting together in one directory (tests do)
/// never remove each other's.
static PROBES: AtomicU64 = AtomicU64::new(0);

/// Makes sure checkpoints could be written in `dir` before a run depends on
/// it, without making `dir` or leaving anything in it: a run refused later
/// (bad data, a model that does not fit it, an arena too small) must leave
/// no directory behind. [`write_atomic`] makes `dir` at the first
/// checkpoint.
///
/// `dir`, or its nearest ancestor that exists, must be a directory that
/// takes a file: a probe file is made there and removed at once. Checking
/// the permission bits would not do: root passes them on a read-only file
/// system, and a path under a regular file has none to check. Without this a
/// run would learn at its first checkpoint — an epoch in, or at the Ctrl-C
/// meant to save it — that its work cannot be kept.
pub fn check_writable(dir: &Path) -> Result<(), CheckpointError> {
    let cannot_create = |source| CheckpointError::CreateDir {
        dir: dir.to_path_buf(),
        source,
    };
    let mut existing = None;
    for at in dir.ancestors() {
        // A relative path's last ancestor is "": the working directory.
        let at = if at.as_os_str().is_empty() { Path::new(".") } else { at };
        match fs::metadata(at) {
            Ok(meta) => {
                existing = Some((at, meta));
                break;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            // A regular file on the way (ENOTDIR), or a directory that may
            // not be looked into.
            Err(e) => return Err(cannot_create(e)),
        }
    }
    let Some((at, meta)) = existing else {
        return Err(cannot_create(std::io::Error::new(
            ErrorKind::NotFound,
            "no part of the path exists",
        )));
    };
    if !meta.is_dir() {
        return Err(cannot_create(std::io::Error::other(format!(
            "{} is a file, not a directory",
            at.display()
        ))));
    }
    let not_writable = |source| match at == dir {
        true => CheckpointError::NotWritable {
            dir: dir.to_path_buf(),
            source,
        },
        false => cannot_create(source),
    };
    // Named unlike any checkpoint, so one left by a killed process is never
    // taken for one.
    let n = PROBES.fetch_add(1, Ordering::Relaxed);
    let probe = at.join(format!(".bumpgrad-write-probe-{}-{n}{TMP_SUFFIX}", std::process::id()));
    File::create(&probe).map_err(not_writable)?;
    fs::remove_file(&probe).map_err(not_writable)
}

fn write_then_rename(bytes: &[u8], tmp: &Path, path: &Path) -> Result<(), CheckpointError> {
    let mut file = File::create(tmp).map_err(|e| write_error(tmp, "create", e))?;
    file.write_all(bytes).map_err(|e| write_error(tmp, "write", e))?;
    // Data on disk before the name points at it: otherwise a crash after
    // the rename could leave the final name on a zero-length file.
    file.sync_all().map_err(|e| write_error(tmp, "fsync", e))?;
    drop(file);
    fs::rename(tmp, path).map_err(|e| write_error(path, "rename into place", e))
}

fn write_error(path: &Path, stage: &'static str, source: std::io::Error) -> CheckpointError {
    let path = path.to_path_buf();
    match source.kind() {
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => CheckpointError::DiskFull { path, source },
        _ => CheckpointError::Write { path, stage, source },
    }
}

/// Makes a rename in `dir` durable. Only meaningful (and only possible:
/// directories cannot be opened as files elsewhere) on Unix.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        match File::open(dir).and_then(|d| d.sync_all()) {
            // Some file systems cannot sync a directory; the rename is then
            // as durable as they make it.
            Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported) => Ok(()),
            other => other,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Deletes all checkpoints but the newest `keep` and `saved`, and `.tmp`
/// leftovers of writes other than the one that just succeeded.
fn prune(dir: &Path, saved: &Path, saved_step: u64, keep: usize) -> Result<(), CheckpointError> {
    let prune_error = |path: PathBuf, source| CheckpointError::Prune {
        saved: saved.to_path_buf(),
        path,
        source,
    };
    let entries = fs::read_dir(dir).map_err(|e| prune_error(dir.to_path_buf(), e))?;
    let mut checkpoints = Vec::new();
    let mut leftovers = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| prune_error(dir.to_path_buf(), e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Some(step) = step_of(&name) {
            checkpoints.push((step, entry.path()));
        } else if name.strip_suffix(TMP_SUFFIX).and_then(step_of).is_some() {
            leftovers.push(entry.path());
        }
    }
    checkpoints.sort_by_key(|c| std::cmp::Reverse(c.0));
    let doomed = checkpoints
        .into_iter()
        .skip(keep)
        .filter(|(step, _)| *step != saved_step)
        .map(|(_, path)| path);
    for path in doomed.chain(leftovers) {
        match fs::remove_file(&path) {
            // Someone else removed it meanwhile: the goal is met.
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(prune_error(path, e)),
            Ok(()) => {}
        }
    }
    Ok(())
}

/// The newest checkpoint in a directory that reads cleanly.
#[derive(Debug)]
pub struct Latest {
    /// Its file.
    pub path: PathBuf,
    /// What it holds.
    pub checkpoint: Checkpoint,
    /// Newer checkpoint files that did not read cleanly, newest first, with
    /// why; the caller reports each as `skipped <path>: <why>`.
    pub skipped: Vec<(PathBuf, CheckpointError)>,
}

/// Scans `dir` for `ckpt-<step>.safetensors` files, newest (highest step)
/// first, and returns the first that reads cleanly and records the step its
/// name says, with the newer ones skipped on the way.
///
/// - `dir` missing: [`CheckpointError::MissingDir`].
/// - no checkpoint files (an empty directory, or only other files and
///   `.tmp` leftovers of crashed writes): `Ok(None)`, start from scratch.
/// - checkpoint files but none readable: [`CheckpointError::NoValidCheckpoint`]
///   with every file and why — silently starting over would discard a run.
pub fn latest_valid(dir: &Path) -> Result<Option<Latest>, CheckpointError> {
    let list_error = |source: std::io::Error| {
        if source.kind() == ErrorKind::NotFound {
            CheckpointError::MissingDir { dir: dir.to_path_buf() }
        } else {
            CheckpointError::ListDir {
                dir: dir.to_path_buf(),
                source,
            }
        }
    };
    let mut candidates = Vec::new();
    for entry in fs::read_dir(dir).map_err(list_error)? {
        let entry = entry.map_err(list_error)?;
        if let Some(step) = entry.file_name().to_str().and_then(step_of) {
            candidates.push((step, entry.path()));
        }
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));

    let mut skipped = Vec::new();
    for (named, path) in candidates {
        match read(&path) {
            Ok(checkpoint) if checkpoint.step == named => {
                return Ok(Some(Latest {
                    path,
                    checkpoint,
                    skipped,
                }))
            }
            Ok(checkpoint) => {
                let err = CheckpointError::StepMismatch {
                    path: path.clone(),
                    named,
                    recorded: checkpoint.step,
                };
                skipped.push((path, err));
            }
            Err(err) => skipped.push((path, err)),
        }
    }
    if skipped.is_empty() {
        Ok(None)
    } else {
        Err(CheckpointError::NoValidCheckpoint {
            dir: dir.to_path_buf(),
            skipped,
        })
    }
}
