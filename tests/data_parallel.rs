//! Data-parallel training on the CPU: ranks are threads of this process,
//! each with its own arena, summing through an in-process group with the
//! arithmetic of a NCCL one (see `bumpgrad::distributed::local`). The NCCL
//! path itself is checked on GPUs (`tests/gpu.rs`, `scripts/gpu.sh`).
//!
//! - one rank through the data-parallel path trains exactly as a plain run;
//! - N ranks × batch B follow one device with batch N × B (float tolerance),
//!   every rank ending with the same parameters, bit for bit;
//! - each rank evaluates its share of the test set;
//! - a rank that fails, while loading or mid-training, ends the others
//!   with an error, not a hang;
//! - a stop asked of one rank stops all after the same step;
//! - strangers on the rendezvous port neither stop the group from forming
//!   nor disturb its training.

use bumpgrad::backend::{DeviceRequest, Group};
use bumpgrad::checkpoint::NamedTensor;
use bumpgrad::distributed::rendezvous::{rendezvous, RendezvousConfig, WatchOptions};
use bumpgrad::distributed::token::Token;
use bumpgrad::distributed::Join;
use bumpgrad::distributed::{local, DataParallel, DistError, World, DEFAULT_BUCKET_BYTES};
use bumpgrad::train::{
    train, CheckpointPolicy, EpochReport, Every, Hooks, Observer, Pipeline, Quiet, Reports, TrainConfig,
};
use bumpgrad::Error;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

fn config(batch: usize, train_limit: usize, epochs: usize) -> TrainConfig {
    let mut cfg = TrainConfig::default();
    cfg.device.request = DeviceRequest::Cpu;
    cfg.run.epochs = epochs;
    cfg.run.batch = batch;
    cfg.device.threads = 1;
    cfg.run.data_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into();
    cfg.run.train_limit = Some(train_limit);
    cfg.run.test_limit = Some(200);
    cfg.memory.poison_step = Some(true);
    cfg
}

/// Trains `cfg` as one rank whose device joins its group as `join` says,
/// stopping once `stop` is set; every epoch's report.
fn train_rank(cfg: &TrainConfig, join: Join, stop: &AtomicBool) -> Result<Vec<EpochReport>, Error> {
    let mut reports = Reports::default();
    train(cfg, Hooks::new(&mut reports).stop_on(stop).as_rank(join))?;
    Ok(reports.0)
}

/// Trains `cfg` on one device; every epoch's report.
fn train_alone(cfg: &TrainConfig) -> Result<Vec<EpochReport>, Error> {
    let mut reports = Reports::default();
    train(cfg, Hooks::new(&mut reports))?;
    Ok(reports.0)
}

fn ranked(cfg: &TrainConfig, rank: usize, size: usize, bucket_bytes: usize) -> TrainConfig {
    let mut cfg = cfg.clone();
    cfg.run.data_parallel = Some(DataParallel {
        world: World { rank, size },
        bucket_bytes,
    });
    cfg
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
                    train_rank(&cfg, join, stop)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

/// A rank's reports and, at the end, its parameters and momentum.
type Kept = Result<(Vec<EpochReport>, Vec<NamedTensor>), Error>;

/// [`run_group`] through the session's own epoch loop, keeping each rank's
/// final state to compare.
fn run_group_keeping_state(size: usize, per_rank: impl Fn(usize) -> TrainConfig + Sync) -> Vec<Kept> {
    let peers = local::group(size, Duration::from_secs(60));
    std::thread::scope(|s| {
        let handles: Vec<_> = peers
            .into_iter()
            .enumerate()
            .map(|(rank, peer)| {
                let cfg = per_rank(rank);
                s.spawn(move || -> Kept {
                    let join = Join {
                        group: Group::Local(peer),
                        ordinal: 0,
                    };
                    let (mut session, _) = Pipeline::open(&cfg, Some(join)).and_then(Pipeline::build)?;
                    session.sync_replicas()?;
                    let reports = session.on_workers(|s| {
                        (1..=cfg.run.epochs)
                            .map(|epoch| s.epoch(epoch, &mut Quiet))
                            .collect::<Result<Vec<_>, _>>()
                    })?;
                    Ok((reports, session.state_tensors()?))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

/// Asserts that two ranks' tensors are the same, bit for bit.
fn assert_same_bits(rank: usize, ours: &[NamedTensor], rank0: &[NamedTensor]) {
    assert_eq!(ours.len(), rank0.len(), "rank {rank}: tensor count");
    for (a, b) in ours.iter().zip(rank0) {
        assert_eq!((&a.name, &a.shape), (&b.name, &b.shape), "rank {rank}");
        if let Some(i) = (0..a.values.len()).find(|&i| a.values[i].to_bits() != b.values[i].to_bits()) {
            panic!(
                "rank {rank}: {}[{i}] is {:e}, rank 0's {:e}",
                a.name, a.values[i], b.values[i]
            );
        }
    }
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
    let plain = train_alone(&cfg).expect("plain run");
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
    let one = train_alone(&config(size * batch, train_limit, 2)).expect("one device");
    let cfg = config(batch, train_limit, 2);
    let results = run_group_keeping_state(size, |r| ranked(&cfg, r, size, bucket_bytes));
    let (ranks, states): (Vec<Vec<EpochReport>>, Vec<Vec<NamedTensor>>) =
        results.into_iter().map(|r| r.expect("rank")).unzip();
    // Every rank ends with rank 0's parameters, bit for bit: the same
    // summed gradients applied the same way.
    for (rank, state) in states.iter().enumerate() {
        assert_same_bits(rank, state, &states[0]);
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
                c.run.data_dir = PathBuf::from("/nonexistent/mnist");
            }
            c
        },
        &no_stops(2),
    );
    // Half the group's 60 s timeout, which a rank that merely timed out
    // would reach; 1.7 to 2.7 s measured on a 2-core machine under load
    // (two busy loops on both cores and four other cargo builds, load
    // average 11; 6 runs).
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    let first = results[0].as_ref().expect_err("rank 0 must fail").to_string();
    assert!(first.contains("rank 1 left the group"), "{first}");
    assert!(results[1].is_err());
}

/// Counts the training steps it is told of and the checkpoints written;
/// once it has seen `sabotage_at` steps, replaces the checkpoint directory
/// with a file, so that the next checkpoint cannot be written.
struct Sabotage {
    steps: usize,
    checkpoints: usize,
    sabotage_at: Option<(usize, PathBuf)>,
}

impl Observer for Sabotage {
    fn step(&mut self, _epoch: usize, _step: usize, _loss: f32) {
        self.steps += 1;
        if let Some((at, dir)) = &self.sabotage_at {
            if self.steps == *at {
                std::fs::remove_dir_all(dir).expect("checkpoints written so far");
                std::fs::write(dir, "not a directory").unwrap();
            }
        }
    }

    fn checkpoint_written(&mut self, _path: &Path) {
        self.checkpoints += 1;
    }
}

#[test]
fn a_rank_failing_mid_training_ends_the_others_promptly() {
    let dir = std::env::temp_dir().join(format!("bumpgrad-dp-midfail-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // 2 × 25 a step, 40 steps; a checkpoint every 5. Rank 0 (the writer)
    // loses its checkpoint directory after step 7, so the checkpoint after
    // step 10 fails: rank 0 ends with that error, mid-epoch.
    let mut cfg = config(25, 2000, 1);
    cfg.run.checkpoints = Some(CheckpointPolicy {
        dir: dir.clone(),
        every: Some(Every::Steps(5)),
        keep: 3,
    });
    let peers = local::group(2, Duration::from_secs(60));
    let started = Instant::now();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = peers
            .into_iter()
            .enumerate()
            .map(|(rank, peer)| {
                let cfg = ranked(&cfg, rank, 2, DEFAULT_BUCKET_BYTES);
                let dir = dir.clone();
                s.spawn(move || {
                    let mut observer = Sabotage {
                        steps: 0,
                        checkpoints: 0,
                        sabotage_at: (rank == 0).then_some((7, dir)),
                    };
                    let join = Join {
                        group: Group::Local(peer),
                        ordinal: 0,
                    };
                    let result = train(&cfg, Hooks::new(&mut observer).as_rank(join));
                    (result, observer.steps, observer.checkpoints)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
    });
    let _ = std::fs::remove_file(&dir);
    // Far below the group's 60 s timeout: rank 1 learnt that rank 0 left.
    // 2.3 to 2.9 s measured under the load above (6 runs).
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    let (rank0, rank1) = (&results[0], &results[1]);
    let err0 = rank0.0.as_ref().expect_err("rank 0 must fail").to_string();
    assert!(
        err0.contains(dir.to_str().unwrap()),
        "rank 0 fails on its checkpoint: {err0}"
    );
    assert_eq!(
        (rank0.1, rank0.2),
        (10, 1),
        "rank 0 trained 10 steps and wrote 1 checkpoint"
    );
    let err1 = rank1.0.as_ref().expect_err("rank 1 must fail").to_string();
    assert!(err1.contains("rank 0 left the group"), "{err1}");
    assert_eq!(rank1.1, 10, "rank 1 was training when rank 0 failed");
}

#[test]
fn each_rank_evaluates_its_share_of_the_test_set() {
    // 3 ranks × 30, 900 images: 10 steps. 200 test images: shares of 66,
    // 67 and 67, so 3 evaluation steps of at most 30 on each rank where
    // the whole set would take 7. The arena resets once per step.
    let mut cfg = config(30, 900, 1);
    cfg.run.test_limit = Some(200);
    let results = run_group(3, |r| ranked(&cfg, r, 3, DEFAULT_BUCKET_BYTES), &no_stops(3));
    let reports: Vec<EpochReport> = results.into_iter().map(|r| r.expect("rank").remove(0)).collect();
    for report in &reports {
        assert_eq!(report.steps, 10);
        assert_eq!(report.arena.resets, 10 + 3, "rank {}", report.rank);
        assert_eq!(report.test_accuracy, reports[0].test_accuracy, "the counts are summed");
    }
    // Fewer test images than ranks: rank 0's share is empty.
    cfg.run.test_limit = Some(2);
    let results = run_group(3, |r| ranked(&cfg, r, 3, DEFAULT_BUCKET_BYTES), &no_stops(3));
    let reports: Vec<EpochReport> = results.into_iter().map(|r| r.expect("rank").remove(0)).collect();
    let resets: Vec<u64> = reports.iter().map(|r| r.arena.resets).collect();
    assert_eq!(resets, [10, 11, 11]);
    for report in &reports {
        assert!(
            [0.0, 0.5, 1.0].contains(&report.test_accuracy),
            "{}",
            report.test_accuracy
        );
        assert_eq!(report.test_accuracy, reports[0].test_accuracy);
    }
}

#[test]
fn strangers_on_the_rendezvous_port_neither_stop_the_group_nor_its_training() {
    let token = Token::new("this job's secret");
    let timeout = Duration::from_secs(30);
    let (log, logged) = mpsc::channel::<String>();
    // Rank 0 first, on a port that was free a moment ago; another if that
    // one was taken before rank 0 could listen on it (see `cluster_ranks`).
    let (addr, rank0) = (0..10)
        .find_map(|_| {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let cfg = RendezvousConfig::new(0, 2, addr.clone(), timeout).with_token(token.clone());
            let log = log.clone();
            let rank0 = std::thread::spawn(move || {
                rendezvous(&cfg, || Ok([7; 128]), &mut |line| {
                    let _ = log.send(line.to_string());
                })
            });
            if rank_0_listens(port, || rank0.is_finished()) {
                return Some((addr, rank0));
            }
            match rank0.join().unwrap() {
                Err(DistError::Bind { .. }) => {
                    let _ = writeln!(
                        std::io::stderr(),
                        "port {port} was taken before rank 0 could listen on it; trying another"
                    );
                    None
                }
                other => panic!("rank 0 ended before it listened: {:?}", other.map(|_| ())),
            }
        })
        .expect("10 ports in a row were taken before rank 0 could listen on them");
    let member = |rank| RendezvousConfig::new(rank, 2, addr.clone(), timeout).with_token(token.clone());
    // Rank 0 listens until the group has formed.
    let connect = || TcpStream::connect(&addr).expect("rank 0 listens");
    let dropped = |stream: &TcpStream| {
        let from = stream.local_addr().unwrap().to_string();
        loop {
            let line = logged
                .recv_timeout(Duration::from_secs(30))
                .expect("a report of the drop");
            if line.contains(&from) {
                return line;
            }
        }
    };
    // Random bytes; a hello (tag 1, magic BGR2) claiming a 4 GiB body.
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 0x80)
        .collect();
    let huge = [&[1u8][..], b"BGR2", &u32::MAX.to_le_bytes()].concat();
    for (bytes, reason) in [
        (&noise[..], "wrong magic"),
        (&huge[..], "claims a body of 4294967295 bytes"),
    ] {
        let mut stranger = connect();
        stranger.write_all(bytes).unwrap();
        stranger.shutdown(Shutdown::Write).unwrap();
        assert!(dropped(&stranger).contains(reason));
    }
    // A silent connection, held open until the end; 200 opened and closed.
    let silent = connect();
    for _ in 0..200 {
        drop(connect());
    }
    // A bumpgrad with the wrong token, as rank 1.
    let impostor = member(1).with_token(Token::new("a guess"));
    let refused = rendezvous(&impostor, || Ok([0; 128]), &mut |_| {}).map(|_| ());
    assert!(matches!(refused, Err(DistError::NotAdmitted { .. })), "{refused:?}");

    let rank1 = rendezvous(&member(1), || Ok([0; 128]), &mut |_| {});
    let (id0, links0) = rank0.join().unwrap().expect("rank 0 formed the group");
    let (id1, links1) = rank1.expect("rank 1 joined");
    assert_eq!((id0, id1), ([7; 128], [7; 128]));
    // The silent one got its challenge (tag 7, magic, token flag, nonce),
    // perhaps a request to retry (tag 8, when newer ones crowded it out or
    // its 3 s ran out), and then its connection closed: never a place.
    let mut seen = Vec::new();
    (&silent).read_to_end(&mut seen).unwrap();
    assert_eq!((seen[0], &seen[1..5], seen[5]), (7, &b"BGR2"[..], 1), "{seen:?}");
    assert!(seen.len() == 38 || (seen.len() == 39 && seen[38] == 8), "{seen:?}");

    // The group trains, watched over its links.
    let cfg = config(25, 1000, 1);
    let peers = local::group(2, Duration::from_secs(60));
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = peers
            .into_iter()
            .zip([links0, links1])
            .enumerate()
            .map(|(rank, (peer, links))| {
                let cfg = ranked(&cfg, rank, 2, DEFAULT_BUCKET_BYTES);
                s.spawn(move || {
                    let (failed, failure) = mpsc::channel();
                    let watch = links.watch(Arc::new(AtomicU64::new(0)), WatchOptions::default(), move |why| {
                        let _ = failed.send(why);
                    });
                    let join = Join {
                        group: Group::Local(peer),
                        ordinal: 0,
                    };
                    let trained = train_rank(&cfg, join, &AtomicBool::new(false));
                    watch.finish();
                    (trained, failure.try_recv().ok())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
    });
    for (rank, (trained, failure)) in results.into_iter().enumerate() {
        assert_eq!(failure, None, "rank {rank}'s watch");
        let reports = trained.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert!(
            reports[0].train_loss.is_finite() && reports[0].train_loss < 2.3,
            "{reports:?}"
        );
    }
}

#[test]
fn a_stop_asked_of_one_rank_stops_every_rank_after_the_same_step() {
    let dir = std::env::temp_dir().join(format!("bumpgrad-dp-stop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = config(25, 2000, 1);
    cfg.run.checkpoints = Some(CheckpointPolicy {
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

/// Variables a cluster launcher or the CI's own environment might have set
/// in this process, which the ranks below must not inherit.
const PLACEMENT_VARS: [&str; 19] = [
    "BUMPGRAD_RANK",
    "BUMPGRAD_WORLD_SIZE",
    "BUMPGRAD_LOCAL_RANK",
    "BUMPGRAD_RENDEZVOUS",
    "BUMPGRAD_LAUNCHED",
    "BUMPGRAD_RENDEZVOUS_TOKEN",
    "BUMPGRAD_RENDEZVOUS_TIMEOUT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_STEP_ID",
    "SLURM_JOB_NODELIST",
];

/// A rank of `bumpgrad train` started with `env`.
fn start_rank(env: Vec<(&'static str, String)>) -> std::process::Child {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bumpgrad"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["train", "--train-limit", "100", "--test-limit", "100", "--epochs", "1"])
        .args(["--checkpoint-every", "off", "--rendezvous-timeout", "60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for var in PLACEMENT_VARS
        .iter()
        .chain(&["SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_STEPID", "NCCL_COMM_ID"])
    {
        cmd.env_remove(var);
    }
    // What is checked here is placement and the rendezvous, which need no
    // GPU; so that the same thing is checked on every machine, the ranks
    // see no GPU and NCCL no network interface (none is named so): rank 0
    // cannot make the group's id, with or without NCCL installed, and says
    // so to rank 1 over the rendezvous, which shows that both reached it.
    // With a GPU they would go on to train on GPUs 0 and 1 instead.
    cmd.env("CUDA_VISIBLE_DEVICES", "")
        .env("NCCL_SOCKET_IFNAME", "bumpgrad-no-such-if");
    cmd.envs(env);
    cmd.spawn().expect("start bumpgrad")
}

/// A rank's exit status and stderr, once it has ended.
fn finish(rank: std::process::Child) -> (Option<i32>, String) {
    let out = rank.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Waits until a rank 0 listens on `port` of 127.0.0.1 (a connection
/// there is challenged at once in bumpgrad's protocol), or `ended` says it
/// has stopped trying: true if it listens. No deadline of its own: rank 0
/// either listens or ends (failing to bind, or at its rendezvous timeout).
fn rank_0_listens(port: u16, mut ended: impl FnMut() -> bool) -> bool {
    loop {
        if let Ok(mut probe) = TcpStream::connect(("127.0.0.1", port)) {
            // Read in short waits, so that a listener that is not rank 0 and
            // never answers holds nothing up once rank 0 has ended.
            probe.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 5];
            while head.len() < buf.len() {
                match probe.read(&mut buf[head.len()..]) {
                    Ok(0) => break,
                    Ok(n) => head.extend_from_slice(&buf[head.len()..head.len() + n]),
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        if ended() {
                            return false;
                        }
                    }
                    Err(_) => break,
                }
            }
            if head == b"\x07BGR2" {
                return true;
            }
        }
        if ended() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Starts `bumpgrad train` as ranks 0 and 1 of a job with `env(port,
/// rank)`, rendezvousing on port `pick(attempt)`: rank 0 first, rank 1 once
/// rank 0 listens. A port is only free until someone takes it: one taken
/// between `pick` and rank 0's bind ends rank 0 with its bind error, and
/// another is tried. Returns the port and each rank's exit status and
/// stderr.
fn cluster_ranks(
    pick: impl Fn(u32) -> u16,
    env: impl Fn(u16, usize) -> Vec<(&'static str, String)>,
) -> (u16, Vec<(Option<i32>, String)>) {
    for attempt in 0..10 {
        let port = pick(attempt);
        let mut rank0 = start_rank(env(port, 0));
        if rank_0_listens(port, || matches!(rank0.try_wait(), Ok(Some(_)))) {
            let rank1 = start_rank(env(port, 1));
            return (port, vec![finish(rank0), finish(rank1)]);
        }
        let (_, stderr) = finish(rank0);
        assert!(
            stderr.contains(&format!("cannot listen on 127.0.0.1:{port} for the rendezvous")),
            "rank 0 ended before it listened: {stderr}"
        );
        let _ = writeln!(
            std::io::stderr(),
            "port {port} was taken before rank 0 could listen on it; trying another"
        );
    }
    panic!("10 ports in a row were taken before rank 0 could listen on them")
}

/// A port of 127.0.0.1 that was free a moment ago (see [`cluster_ranks`]).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
#[cfg_attr(
    not(feature = "cli"),
    ignore = "starts `bumpgrad train`, which needs the `cli` feature"
)]
fn ranks_started_by_srun_or_mpirun_find_each_other() {
    // Slurm: a port derived from the job id (20000 + id % 10000), picked
    // so that it is free (from a point that moves with each attempt); the
    // address is the node list's first host.
    let slurm_port = |attempt: u32| {
        let from = (std::process::id() + attempt * 1009) % 10000;
        (0..10000)
            .map(|i| 20000 + ((from + i) % 10000) as u16)
            .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
            .expect("a free port from 20000 to 29999")
    };
    let started = Instant::now();
    let (port, ranks) = cluster_ranks(slurm_port, |port, rank| {
        vec![
            ("SLURM_PROCID", rank.to_string()),
            ("SLURM_NTASKS", "2".into()),
            ("SLURM_LOCALID", rank.to_string()),
            ("SLURM_STEP_ID", "0".into()),
            ("SLURM_JOB_ID", (7_000_000 + u32::from(port) - 20000).to_string()),
            ("SLURM_JOB_NODELIST", "127.0.0.[1-2],gpu[01-04]".into()),
            ("BUMPGRAD_RENDEZVOUS_TOKEN", "a job's secret".into()),
        ]
    });
    let placed = format!(
        "rank 0 of 2 (GPU 0 of its host), placed by Slurm (srun): rank SLURM_PROCID, world size SLURM_NTASKS, \
         local rank SLURM_LOCALID, address SLURM_JOB_NODELIST (first host), port from SLURM_JOB_ID; rendezvous \
         at 127.0.0.1:{port}"
    );
    assert!(ranks[0].1.contains(&placed), "{}", ranks[0].1);
    assert!(!ranks[0].1.contains("no rendezvous token"), "{}", ranks[0].1);
    // Both reached the group: rank 0 could make no NCCL id (see
    // `start_rank`) and told rank 1 so over the rendezvous connection.
    for (rank, (code, stderr)) in ranks.iter().enumerate() {
        assert_eq!(*code, Some(1), "rank {rank}: {stderr}");
        assert!(
            stderr.contains("rank 0 could not make the group's id"),
            "rank {rank}: {stderr}"
        );
    }

    // Open MPI, with the address given; no token.
    let (port, ranks) = cluster_ranks(
        |_| free_port(),
        |port, rank| {
            vec![
                ("OMPI_COMM_WORLD_RANK", rank.to_string()),
                ("OMPI_COMM_WORLD_SIZE", "2".into()),
                ("OMPI_COMM_WORLD_LOCAL_RANK", rank.to_string()),
                ("MASTER_ADDR", "127.0.0.1".into()),
                ("MASTER_PORT", port.to_string()),
            ]
        },
    );
    let placed = "placed by Open MPI (mpirun): rank OMPI_COMM_WORLD_RANK, world size OMPI_COMM_WORLD_SIZE, local \
                  rank OMPI_COMM_WORLD_LOCAL_RANK, address MASTER_ADDR and MASTER_PORT";
    assert!(ranks[0].1.contains(placed), "{}", ranks[0].1);
    assert!(
        ranks[0].1.contains(&format!(
            "any process that can reach 127.0.0.1:{port} can join this run"
        )),
        "{}",
        ranks[0].1
    );
    for (rank, (code, stderr)) in ranks.iter().enumerate() {
        assert_eq!(*code, Some(1), "rank {rank}: {stderr}");
        assert!(
            stderr.contains("rank 0 could not make the group's id"),
            "rank {rank}: {stderr}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
}
