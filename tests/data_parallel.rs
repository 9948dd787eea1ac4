//! Data-parallel training on the CPU: ranks are threads of this process,
//! each with its own arena, summing through an in-process group with the
//! arithmetic of a NCCL one (see `bumpgrad::distributed::local`). The NCCL
//! path itself is checked on GPUs (`tests/gpu.rs`, `scripts/gpu.sh`).
//!
//! - one rank through the data-parallel path trains exactly as a plain run;
//! - N ranks × batch B follow one device with batch N × B (float tolerance);
//! - a rank that fails ends the others with an error, not a hang;
//! - a stop asked of one rank stops all after the same step.

use bumpgrad::backend::{DeviceRequest, Group};
use bumpgrad::distributed::{local, DataParallel, World, DEFAULT_BUCKET_BYTES};
use bumpgrad::train::{train_rank, CheckpointPolicy, EpochReport, Every, Join, Quiet, TrainConfig};
use bumpgrad::Error;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

fn config(batch: usize, train_limit: usize, epochs: usize) -> TrainConfig {
    TrainConfig {
        device: DeviceRequest::Cpu,
        epochs,
        batch,
        threads: 1,
        data_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into(),
        train_limit: Some(train_limit),
        test_limit: Some(200),
        poison_step: Some(true),
        ..TrainConfig::default()
    }
}

fn ranked(cfg: &TrainConfig, rank: usize, size: usize, bucket_bytes: usize) -> TrainConfig {
    TrainConfig {
        data_parallel: Some(DataParallel {
            world: World { rank, size },
            bucket_bytes,
        }),
        ..cfg.clone()
    }
}

/// Runs `size` ranks of `cfg` (each made by `per_rank`), one thread each;
/// returns every rank's result.
fn run_group(
    size: usize,
    per_rank: impl Fn(usize) -> TrainConfig + Sync,
    stops: &[AtomicBool],
) -> Vec<Result<Vec<EpochReport>, Error>> {
    let peers = local::group(size, Duration::from_secs(60));
    std::thread::scope(|s| {
        let handles: Vec<_> = peers
            .into_iter()
            .enumerate()
            .map(|(rank, peer)| {
                let cfg = per_rank(rank);
                let stop = &stops[rank];
                s.spawn(move || {
                    let join = Join {
                        group: Group::Local(peer),
                        ordinal: 0,
                    };
                    train_rank(&cfg, Some(join), &mut Quiet, stop, None)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

fn no_stops(n: usize) -> Vec<AtomicBool> {
    (0..n).map(|_| AtomicBool::new(false)).collect()
}

fn losses(reports: &[EpochReport]) -> Vec<f64> {
    reports.iter().map(|r| r.train_loss).collect()
}

#[test]
fn one_rank_through_the_data_parallel_path_is_the_plain_run_bit_for_bit() {
    let cfg = config(50, 1000, 2);
    let plain = bumpgrad::train::train(&cfg, &mut Quiet).expect("plain run");
    let ranked_run = run_group(1, |r| ranked(&cfg, r, 1, DEFAULT_BUCKET_BYTES), &no_stops(1))
        .pop()
        .unwrap()
        .expect("rank 0");
    assert_eq!(losses(&plain), losses(&ranked_run));
    let acc = |r: &[EpochReport]| r.iter().map(|e| e.test_accuracy).collect::<Vec<_>>();
    assert_eq!(acc(&plain), acc(&ranked_run));
}

/// `size` ranks × `batch` against one device with `size × batch`, over
/// `train_limit` images (a shorter last step when it does not divide).
fn matches_one_device(size: usize, batch: usize, train_limit: usize, bucket_bytes: usize) {
    let one = bumpgrad::train::train(&config(size * batch, train_limit, 2), &mut Quiet).expect("one device");
    let cfg = config(batch, train_limit, 2);
    let results = run_group(size, |r| ranked(&cfg, r, size, bucket_bytes), &no_stops(size));
    let ranks: Vec<Vec<EpochReport>> = results.into_iter().map(|r| r.expect("rank")).collect();
    for (rank, reports) in ranks.iter().enumerate() {
        // Every rank sees the summed losses and holds the same parameters.
        assert_eq!(losses(reports), losses(&ranks[0]), "rank {rank}");
        assert_eq!(reports[1].test_accuracy, ranks[0][1].test_accuracy, "rank {rank}");
    }
    for (a, b) in losses(&one).iter().zip(losses(&ranks[0])) {
        assert!(
            (a - b).abs() <= 1e-4 * a.abs().max(1.0),
            "one device {a} vs {size} ranks {b}"
        );
    }
    for (a, b) in one.iter().zip(&ranks[0]) {
        // A few of the 200 test examples may flip on rounding; not more.
        let flipped = ((a.test_accuracy - b.test_accuracy).abs() * 200.0).round();
        assert!(flipped <= 3.0, "{flipped} flipped: {a:?} vs {b:?}");
    }
    // The losses differ from the first epoch to the second: training ran.
    assert!(losses(&one)[1] < losses(&one)[0]);
}

#[test]
fn two_ranks_of_25_follow_one_device_with_50() {
    matches_one_device(2, 25, 1000, DEFAULT_BUCKET_BYTES);
}

#[test]
fn three_ranks_with_a_shorter_last_step_and_one_bucket_follow_one_device() {
    // 1010 images, 90 a step: the last step has 20, shared 6 / 7 / 7. A
    // 1 MiB bucket holds every gradient (the default gives each large
    // weight its own).
    matches_one_device(3, 30, 1010, 1 << 20);
}

#[test]
fn a_last_step_too_short_to_share_is_refused() {
    // 1001 images, 100 a step: the last step's one image cannot feed 2 ranks.
    let cfg = config(50, 1001, 1);
    let results = run_group(2, |r| ranked(&cfg, r, 2, DEFAULT_BUCKET_BYTES), &no_stops(2));
    for r in results {
        let err = r.expect_err("refused").to_string();
        assert!(err.contains("too few to give each of the 2 GPUs one"), "{err}");
    }
}

#[test]
fn a_rank_that_fails_ends_the_others_promptly() {
    let cfg = config(50, 1000, 1);
    let started = Instant::now();
    let results = run_group(
        2,
        |rank| {
            let mut c = ranked(&cfg, rank, 2, DEFAULT_BUCKET_BYTES);
            if rank == 1 {
                c.data_dir = PathBuf::from("/nonexistent/mnist");
            }
            c
        },
        &no_stops(2),
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let first = results[0].as_ref().expect_err("rank 0 must fail").to_string();
    assert!(first.contains("rank 1 left the group"), "{first}");
    assert!(results[1].is_err());
}

#[test]
fn a_stop_asked_of_one_rank_stops_every_rank_after_the_same_step() {
    let dir = std::env::temp_dir().join(format!("bumpgrad-dp-stop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = config(25, 2000, 1);
    cfg.checkpoints = Some(CheckpointPolicy {
        dir: dir.clone(),
        every: Some(Every::Epochs(1)),
        keep: 3,
    });
    let stops = no_stops(2);
    stops[1].store(true, std::sync::atomic::Ordering::SeqCst);
    let results = run_group(2, |r| ranked(&cfg, r, 2, DEFAULT_BUCKET_BYTES), &stops);
    let mut at = Vec::new();
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Err(Error::Interrupted {
                epoch,
                step,
                checkpoint,
            }) => {
                assert_eq!(checkpoint.is_some(), rank == 0, "only rank 0 writes");
                at.push((epoch, step));
            }
            other => panic!("rank {rank}: expected an interruption, got {other:?}"),
        }
    }
    // Both stop at the first read-back, after step 20 of 40.
    assert_eq!(at, vec![(1, 20), (1, 20)]);
    let written = std::fs::read_dir(&dir).expect("checkpoint dir").count();
    assert_eq!(written, 1);
    let _ = std::fs::remove_dir_all(&dir);
}
