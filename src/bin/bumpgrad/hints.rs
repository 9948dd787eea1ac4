//! The error line the CLI prints: the library's message, which says what
//! went wrong and the sizes involved but names no flag, and the flag that
//! would fix it ("…; an arena of 4.6 MiB would fit (pass --arena-size 5MiB
//! or more)").

use bumpgrad::backend::cuda::CudaError;
use bumpgrad::backend::BackendError;
use bumpgrad::checkpoint::CheckpointError;
use bumpgrad::data::DataError;
use bumpgrad::distributed::DistError;
use bumpgrad::memory::suggest;
use bumpgrad::{ArenaError, Error};
use std::error::Error as StdError;

/// `err` and its causes, then the hint of the first of them that has one.
pub fn line(err: &anyhow::Error) -> String {
    let mut line = describe(err);
    if let Some(hint) = err.chain().find_map(hint) {
        line.push_str(&hint);
    }
    // A refusal quotes settings as the library records them.
    crate::choices::in_words(&line)
}

/// The error and its causes as anyhow's `{:#}` joins them, less any cause
/// the message before it already quotes: our typed errors name their cause
/// inline, before what to do, and the remedy should end the line.
fn describe(err: &anyhow::Error) -> String {
    let mut line = String::new();
    let mut previous = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !previous.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        previous = text;
    }
    line
}

/// What to append to `err`'s message: the flag that sets what it is about.
fn hint(err: &(dyn StdError + 'static)) -> Option<String> {
    if let Some(e) = err.downcast_ref::<Error>() {
        library(e)
    } else if let Some(e) = err.downcast_ref::<ArenaError>() {
        arena(e)
    } else if let Some(e) = err.downcast_ref::<BackendError>() {
        backend(e)
    } else if let Some(e) = err.downcast_ref::<CudaError>() {
        cuda(e)
    } else if let Some(e) = err.downcast_ref::<DataError>() {
        data(e)
    } else if let Some(e) = err.downcast_ref::<CheckpointError>() {
        checkpoint(e)
    } else if let Some(e) = err.downcast_ref::<DistError>() {
        distributed(e)
    } else {
        None
    }
}

fn library(err: &Error) -> Option<String> {
    match err {
        Error::Arena(e) => arena(e),
        Error::Backend(e) => backend(e),
        Error::Data(e) => data(e),
        Error::Checkpoint(e) => checkpoint(e),
        Error::Diverged { .. } => Some("; lower --lr".into()),
        // A batch past a kernel's 32-bit element count: the library says
        // how many examples fit that op.
        Error::Shape { detail, .. } if detail.contains("count in 32 bits") => {
            let fit = detail.split("at most ").nth(2)?.split(' ').next()?;
            Some(format!(
                "; pass --batch {fit} or less (`bumpgrad memory --max-batch` finds the largest batch that every layer and the memory allow)"
            ))
        }
        Error::Setting {
            setting: bumpgrad::Setting::Graph,
            fix: None,
            ..
        } => Some("; pass --graph off or --device cuda".into()),
        Error::Setting {
            setting: bumpgrad::Setting::Precision,
            ..
        } => Some("; pass --precision fp32, or train on the GPU".into()),
        Error::Setting {
            setting: bumpgrad::Setting::Model,
            fix: None,
            ..
        } => Some(format!(
            "; pass --model {} for a text corpus, {} for a treebank, or {} for images",
            super::choices::TEXT_MODELS,
            super::choices::SENTENCE_MODELS,
            super::choices::IMAGE_MODELS
        )),
        // The library names each size as the model's settings do
        // (`hidden 16, width_mult 0.5`): each is its flag.
        Error::Setting {
            setting: bumpgrad::Setting::ModelSize,
            fix: Some(sizes),
            ..
        } => Some(format!(
            "; pass {}",
            sizes
                .split(", ")
                .map(|size| format!("--{}", size.replace('_', "-")))
                .collect::<Vec<_>>()
                .join(" ")
        )),
        Error::Setting { setting, fix, .. } => {
            let flag = setting_flag(*setting);
            Some(match fix {
                Some(value) => format!("; pass {flag} {value}"),
                None => format!("; check {flag}"),
            })
        }
        Error::Interrupted {
            checkpoint: Some(path), ..
        } => {
            let dir = path.parent().map_or_else(|| ".".into(), |d| d.display().to_string());
            Some(format!("; continue with --resume {dir}"))
        }
        Error::Interrupted { checkpoint: None, .. } => {
            Some("; pass --checkpoint-dir to have a stopped run write one".into())
        }
        _ => None,
    }
}

/// The flag (or variables) that set a run's setting.
fn setting_flag(setting: bumpgrad::Setting) -> &'static str {
    use bumpgrad::Setting as S;
    match setting {
        S::Epochs => "--epochs",
        S::SeqLen => "--seq-len",
        S::Classes => "--classes",
        S::Buckets => "--buckets",
        S::Data => "--data",
        S::ModelSize => "--embed, --hidden, --layers or --width-mult",
        S::Batch => "--batch",
        S::LearningRate => "--lr",
        S::Seed => "--seed",
        S::TrainLimit => "--train-limit",
        S::TestLimit => "--test-limit",
        S::KeepCheckpoints => "--keep-checkpoints",
        S::Graph => "--graph",
        S::ArenaSize => "--arena-size",
        S::BucketSize => "--bucket-kib",
        S::Ranks => "RANK and WORLD_SIZE",
        S::Model => "--model",
        S::Optimizer => "--optimizer and its settings",
        S::Schedule => "--schedule and --warmup-epochs",
        S::LabelSmoothing => "--label-smoothing",
        S::Augment => "--augment",
        S::Precision => "--precision",
        S::MemoryBudget => "--memory-budget",
        S::WorkspaceGrowth => "--workspace-growth",
    }
}

fn arena(err: &ArenaError) -> Option<String> {
    match err {
        ArenaError::Exhausted { would_fit, .. } | ArenaError::StepTooLarge { would_fit, .. } => {
            Some(format!(" (pass --arena-size {} or more)", suggest(*would_fit)))
        }
        // Defects of the caller, not of a setting.
        ArenaError::StaleGraph | ArenaError::OutsidePersistent => None,
    }
}

fn backend(err: &BackendError) -> Option<String> {
    match err {
        BackendError::HostAllocation { .. } => Some(
            "; pass a smaller --arena-size (auto sizes it by a dry run), a smaller --batch, or a --memory-budget to recompute activations rather than keep them; or free memory"
                .into(),
        ),
        BackendError::DeviceAllocation { .. } => Some(
            "; pass a smaller --arena-size (auto sizes it by a dry run), a smaller --batch, or a --memory-budget to recompute activations rather than keep them; or free GPU memory"
                .into(),
        ),
        BackendError::ProcessGroupOnCpu => Some("; pass --device cuda".into()),
        BackendError::Cuda(e) => cuda(e),
        _ => None,
    }
}

fn cuda(err: &CudaError) -> Option<String> {
    match err {
        // Only an absent GPU: a broken one is a defect, not a choice of device.
        CudaError::MissingLibrary { .. } | CudaError::NoDevice { .. } | CudaError::NotBuilt => {
            Some(", or pass --device cpu".into())
        }
        _ => None,
    }
}

fn data(err: &DataError) -> Option<String> {
    match err {
        DataError::Io { .. } => Some(" — check the path given with --data and the file's permissions".into()),
        DataError::BadMagic { .. } => Some("; check the file names in --data".into()),
        DataError::MissingFile { .. } => Some(" or point --data at it".into()),
        DataError::NotImages { .. } => Some(
            " — the image models read MNIST's or CIFAR-10's files or an image folder; check the path given with --data"
                .into(),
        ),
        DataError::Text(bumpgrad::data::text::TextError::SplitTooShort { .. }) => {
            Some(" (pass a smaller --batch or --seq-len, or a longer text to --data)".into())
        }
        DataError::ImageSize { .. } => Some(" — point --data at MNIST (not another IDX data set)".into()),
        DataError::Text(bumpgrad::data::text::TextError::VectorsDim { dim, .. }) => {
            Some(format!(" (pass --embed {dim}, or vectors of the width --embed gives)"))
        }
        DataError::TrainLimit { available, .. } => {
            Some(format!(" — pass --train-limit from 1 to {available}, or omit the flag"))
        }
        DataError::TestLimit { available, .. } => {
            Some(format!(" — pass --test-limit from 1 to {available}, or omit the flag"))
        }
        DataError::MixedSizes { first_size, .. } => Some(format!(
            "; pass --image-size HxW to resize them all (such as --image-size {}x{})",
            first_size.0, first_size.1
        )),
        DataError::ValSplit { .. } => Some("; pass --val-split between 0 and 1, such as 0.2".into()),
        DataError::ValTwice { .. } => Some("; drop --val-split to validate on val/".into()),
        DataError::SplitTooSmall { .. } => Some(" with --val-split".into()),
        DataError::NoValidation { .. } => {
            Some("; pass --data a folder with a val/ folder of the same classes, or train with --val-split F".into())
        }
        DataError::NotAFolder { .. } => Some("; drop --image-size and --val-split".into()),
        _ => None,
    }
}

fn checkpoint(err: &CheckpointError) -> Option<String> {
    match err {
        CheckpointError::CreateDir { .. } | CheckpointError::NotWritable { .. } => {
            Some("; pass --checkpoint-dir a directory you can write to".into())
        }
        CheckpointError::MissingDir { .. } | CheckpointError::ListDir { .. } => {
            Some("; it is the directory given with --resume".into())
        }
        _ => None,
    }
}

fn distributed(err: &DistError) -> Option<String> {
    match err {
        DistError::RendezvousTimeout { .. } => Some(", or wait longer with --rendezvous-timeout".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bumpgrad::memory::Region;
    use bumpgrad::Shape;
    use std::path::PathBuf;

    /// The line printed for `err` reached through a context, as `main`
    /// prints it.
    fn printed(err: impl Into<Error>) -> String {
        let err: Error = err.into();
        line(&anyhow::Error::new(err).context("training on data/mnist"))
    }

    fn io() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied")
    }

    fn exhausted(would_fit: usize) -> ArenaError {
        ArenaError::Exhausted {
            region: Region::Step,
            what: "conv2d output",
            shape: Shape::new(&[100, 20, 8, 8]),
            requested: 512_000,
            in_use: 1024,
            capacity: 2048,
            would_fit,
            live: Vec::new(),
        }
    }

    #[test]
    fn an_exhausted_arena_names_the_size_to_pass() {
        let text = printed(exhausted(57 << 20));
        assert!(text.starts_with("training on data/mnist: arena exhausted"), "{text}");
        assert!(text.ends_with("would fit (pass --arena-size 57MiB or more)"), "{text}");
        let step = ArenaError::StepTooLarge {
            step_bytes: 3 << 20,
            persistent_bytes: 1 << 20,
            capacity: 2 << 20,
            would_fit: (4 << 20) + 1,
            live: vec![("max-pool input grad", 1 << 20)],
        };
        assert!(printed(step).ends_with("would fit (pass --arena-size 5MiB or more)"));
    }

    #[test]
    fn allocation_failures_name_the_sizes_to_lower() {
        let host = printed(Error::Backend(BackendError::HostAllocation { bytes: 1 << 40 }));
        assert!(
            host.contains("could not allocate the arena's 1.00 TiB of host memory; pass a smaller --arena-size")
                && host.contains("a smaller --batch, or a --memory-budget")
                && host.ends_with("or free memory"),
            "{host}"
        );
        // Made by the runtime, as the trainer meets it making its engine.
        let gpu = printed(Error::Backend(BackendError::DeviceAllocation {
            bytes: 1 << 40,
            free: 1 << 30,
        }));
        assert!(
            gpu.contains("free); pass a smaller --arena-size") && gpu.ends_with("or free GPU memory"),
            "{gpu}"
        );
    }

    #[test]
    fn an_absent_gpu_offers_the_cpu_and_a_broken_one_does_not() {
        let missing = printed(BackendError::Cuda(CudaError::MissingLibrary {
            library: "cuDNN (libcudnn.so.9)",
            hint: "install cuDNN 9",
        }));
        assert!(missing.ends_with("install cuDNN 9, or pass --device cpu"), "{missing}");
        let none = printed(BackendError::Cuda(CudaError::NoDevice {
            detail: "the driver sees no GPU".into(),
        }));
        assert!(none.ends_with("CUDA_VISIBLE_DEVICES, or pass --device cpu"), "{none}");
        let not_built = printed(BackendError::Cuda(CudaError::NotBuilt));
        assert!(
            not_built.ends_with("to train on a GPU, or pass --device cpu"),
            "{not_built}"
        );
        let broken = printed(BackendError::Cuda(CudaError::Compile { log: "error".into() }));
        assert!(!broken.contains("--device"), "{broken}");
    }

    #[test]
    fn a_process_group_on_the_cpu_asks_for_the_gpu() {
        let text = printed(BackendError::ProcessGroupOnCpu);
        assert!(text.ends_with("this device is the CPU; pass --device cuda"), "{text}");
    }

    #[test]
    fn data_errors_point_at_the_data_flag() {
        let path = PathBuf::from("data/mnist/train-images-idx3-ubyte");
        let cases = [
            (
                DataError::Io {
                    path: path.clone(),
                    source: io(),
                },
                "denied — check the path given with --data and the file's permissions",
            ),
            (
                DataError::BadMagic {
                    path: path.clone(),
                    found: 0x801,
                    expected: 0x803,
                },
                "(images and labels swapped?); check the file names in --data",
            ),
            (
                DataError::MissingFile { path: path.clone() },
                "download MNIST there or point --data at it",
            ),
            (
                DataError::ImageSize {
                    path,
                    rows: 32,
                    cols: 32,
                    expected_rows: 28,
                    expected_cols: 28,
                },
                "expects 28×28 — point --data at MNIST (not another IDX data set)",
            ),
            (
                DataError::TrainLimit {
                    requested: 70_000,
                    available: 60_000,
                },
                "has 60000 — pass --train-limit from 1 to 60000, or omit the flag",
            ),
            (
                DataError::TestLimit {
                    requested: 20_000,
                    available: 10_000,
                },
                "has 10000 — pass --test-limit from 1 to 10000, or omit the flag",
            ),
        ];
        for (err, end) in cases {
            let text = printed(err);
            assert!(text.ends_with(end), "{text}\nshould end with: {end}");
        }
    }

    #[test]
    fn checkpoint_directories_name_their_flags() {
        let dir = PathBuf::from("/proc/ckpts");
        let write = printed(CheckpointError::NotWritable {
            dir: dir.clone(),
            source: io(),
        });
        assert!(
            write.ends_with("; pass --checkpoint-dir a directory you can write to"),
            "{write}"
        );
        let create = printed(CheckpointError::CreateDir {
            dir: dir.clone(),
            source: io(),
        });
        assert!(
            create.ends_with("; pass --checkpoint-dir a directory you can write to"),
            "{create}"
        );
        let missing = printed(CheckpointError::MissingDir { dir: dir.clone() });
        assert!(
            missing.ends_with("; it is the directory given with --resume"),
            "{missing}"
        );
        let list = printed(CheckpointError::ListDir { dir, source: io() });
        assert!(list.ends_with("; it is the directory given with --resume"), "{list}");
    }

    #[test]
    fn a_stopped_run_says_how_to_continue() {
        let written = printed(Error::Interrupted {
            epoch: 1,
            step: 8,
            checkpoint: Some(PathBuf::from("/runs/a/ckpt-000000000008.safetensors")),
        });
        assert!(
            written.ends_with("written to /runs/a/ckpt-000000000008.safetensors; continue with --resume /runs/a"),
            "{written}"
        );
        let lost = printed(Error::Interrupted {
            epoch: 1,
            step: 8,
            checkpoint: None,
        });
        assert!(
            lost.ends_with("no checkpoint was written (no checkpoint directory was set); pass --checkpoint-dir to have a stopped run write one"),
            "{lost}"
        );
    }

    #[test]
    fn a_diverged_run_names_the_learning_rate() {
        let text = printed(Error::Diverged {
            epoch: 2,
            step: 31,
            loss: f32::NAN,
        });
        assert!(text.ends_with("is from before it); lower --lr"), "{text}");
    }

    #[test]
    fn a_rendezvous_timeout_names_the_flag_that_waits_longer() {
        let err = anyhow::Error::new(DistError::RendezvousTimeout {
            addr: "10.0.0.1:29500".into(),
            waited_s: 120.0,
            joined: 1,
            world_size: 2,
        })
        .context("rank 1 of 2 joining the others at 10.0.0.1:29500");
        let text = line(&err);
        assert!(
            text.ends_with("rank 0 is reachable from the others, or wait longer with --rendezvous-timeout"),
            "{text}"
        );
    }

    #[test]
    fn a_setting_names_its_flag_and_a_value_that_works() {
        let batch = Error::Setting {
            setting: bumpgrad::Setting::Batch,
            problem: "a batch of 500 is larger than the 300 training images".into(),
            fix: Some("300 or less".into()),
        };
        assert!(printed(batch).ends_with("300 training images; pass --batch 300 or less"));
        let seed = Error::Setting {
            setting: bumpgrad::Setting::Seed,
            problem: "cannot resume from this checkpoint: it was made with seed 7, this run has seed 42".into(),
            fix: Some("7".into()),
        };
        assert!(printed(seed).ends_with("this run has seed 42; pass --seed 7"));
        let optimizer = Error::Setting {
            setting: bumpgrad::Setting::Optimizer,
            problem: "cannot resume from this checkpoint: it was made with optimizer sgd".into(),
            fix: None,
        };
        assert!(printed(optimizer).ends_with("; check --optimizer and its settings"));
        let graph = Error::Setting {
            setting: bumpgrad::Setting::Graph,
            problem: "whole-step graphs need the GPU (CUDA graphs)".into(),
            fix: None,
        };
        assert!(printed(graph).ends_with("(CUDA graphs); pass --graph off or --device cuda"));
    }

    #[test]
    fn errors_no_flag_fixes_get_no_hint() {
        for err in [
            Error::Config("whole-step graphs need the CUDA backend".into()),
            Error::NoGradient,
            Error::Backend(BackendError::TooManyViews),
        ] {
            let text = printed(err);
            assert!(!text.contains("--"), "{text}");
        }
    }
}
