//! A replayed step on the GPU is one graph launch: it makes no host
//! allocation and no CUDA call but `cuGraphLaunch` (and the check before
//! every call that the GPU's context is the thread's, `cuCtxGetCurrent`).
//! Reading the losses back is one copy and one wait, counted apart.
//!
//! The CUDA calls are the backend's own count, by kind
//! (`Arena::cuda_calls`); the allocations are this thread's, through the
//! counting global allocator `tests/gpu.rs` installs: a replay runs on the
//! thread that asks for it (a GPU has no host workers), and other tests of
//! this binary may be allocating on theirs meanwhile.

use super::counting_alloc::thread_allocations;
use super::*;
use bumpgrad::backend::cuda::CudaCalls;
use bumpgrad::train::{Pipeline, Session};

/// Replayed steps counted.
const REPLAYS: u64 = 30;

fn calls(session: &Session) -> CudaCalls {
    session
        .engine()
        .runtime()
        .cuda_calls()
        .expect("a GPU counts its CUDA calls")
}

#[test]
fn a_replayed_step_allocates_nothing_and_makes_one_cuda_call() {
    let test = "replayed_step_zero_alloc";
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(probe) = gpu(test) else { return };
    drop(probe);
    // 40 full steps of 50: the first captured, the rest replays.
    let cfg = {
        let mut cfg = gpu_config(1);
        cfg.device.graph = Some(true);
        cfg.run.batch = 50;
        cfg.run.train_limit = Some(2_000);
        cfg.run.test_limit = Some(100);
        cfg
    };
    let (mut session, _) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("prepare");
    assert!(session.uses_graph(), "{test}: the step is captured");
    let first = 1;
    assert!(session.steps_per_epoch() as u64 >= first + REPLAYS);
    session.begin_epoch(1, 0).expect("begin the epoch");
    // Step 0 is captured (its host work sizes the tape's vectors) and
    // replayed once; every later full step is a replay alone.
    session.train_step(0).expect("the captured step");

    let (before, allocated) = (calls(&session), thread_allocations());
    for step in first..first + REPLAYS {
        session.train_step(step as usize).expect("replayed step");
    }
    let allocated = thread_allocations() - allocated;
    let made = calls(&session) - before;
    assert_eq!(
        allocated, 0,
        "{test}: {REPLAYS} replayed steps made {allocated} heap allocations"
    );
    // BUMPGRAD_CUDA_SYNC=1 waits for the GPU after every call that queues
    // work: a debugging aid, counted here so a run under it fails on
    // nothing else.
    let wait_each = u64::from(std::env::var_os("BUMPGRAD_CUDA_SYNC").is_some_and(|v| v != "0"));
    assert_eq!(
        made,
        CudaCalls {
            graph_launches: REPLAYS,
            context: REPLAYS,
            synchronizations: wait_each * REPLAYS,
            ..CudaCalls::default()
        },
        "{test}: {REPLAYS} replayed steps made other CUDA calls than one launch each"
    );

    // The losses of every step so far: one copy to the host and the wait
    // for it (the copy is synchronous), into the session's own buffer.
    let (before, allocated) = (calls(&session), thread_allocations());
    let losses = session.losses(0..(first + REPLAYS) as usize).expect("losses");
    // A slot no step wrote holds 0 (the arena starts zeroed); a trained
    // step's cross-entropy is positive, and falls over 31 steps.
    let ran = losses.iter().all(|&l| l.is_finite() && l > 0.0);
    let mean = |l: &[f32]| l.iter().sum::<f32>() / l.len() as f32;
    let (start, end) = (mean(&losses[..5]), mean(&losses[losses.len() - 5..]));
    let allocated = thread_allocations() - allocated;
    let made = calls(&session) - before;
    assert!(
        ran && end < start,
        "{test}: every replay trained: mean loss of the first five steps {start}, of the last five {end}, all positive: {ran}"
    );
    assert_eq!(
        allocated, 0,
        "{test}: reading the losses made {allocated} heap allocations"
    );
    assert_eq!(
        made,
        CudaCalls {
            copies: 1,
            synchronizations: 1 + wait_each,
            context: 1,
            ..CudaCalls::default()
        },
        "{test}: reading the losses back"
    );
}
