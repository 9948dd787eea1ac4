//! sst-lstm on the GPU: an epoch of a synthetic treebank in three length
//! buckets, the first full step of each bucket captured as a CUDA graph
//! and every later one of that bucket a replay (each replay gathers its
//! batch of that bucket at the cursor from the epoch's order), follows the
//! CPU's run of the same settings: every step's loss within 2e-3 of the
//! CPU's (relative: float sums in another order, over about 40 steps of
//! AdamW, as char-lstm's test allows), and the development accuracy within
//! 2 points (a sentence whose two logits nearly tie may fall either way).
//! The shared body, `support/sst_case.rs`, runs on the CPU in
//! `tests/sentences.rs`. And one step of the fixture's sst-lstm on the GPU
//! against PyTorch's float64 answer, as on the CPU.

use super::*;
use bumpgrad::train::{DeviceConfig, Pipeline, TrainConfig};

#[path = "../support/sst_case.rs"]
mod sst_case;
#[path = "../support/sst_step.rs"]
mod sst_step;
use super::sequences::lstm_step;

/// Trains `cfg` through one session: its losses, reports and graphs.
fn train(cfg: &TrainConfig) -> (sst_case::Seen, usize, usize) {
    let (mut session, _) = Pipeline::open(cfg, None).and_then(Pipeline::build).expect("a session");
    let mut seen = sst_case::Seen::default();
    session.on_workers(|session| {
        for epoch in 1..=cfg.run.epochs {
            session.epoch(epoch, &mut seen).expect("an epoch");
        }
    });
    (seen, session.graphs_captured(), session.lengths().len())
}

#[test]
fn sst_lstm_captures_a_graph_per_bucket_and_follows_the_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(probe) = gpu("sst_lstm_graphs") else { return };
    drop(probe);
    let bank = sst_case::synthetic_treebank("gpu", 320, 64);
    let run = |device: &DeviceConfig| train(&sst_case::config(bank.clone(), 3, device, 1));
    let (cpu, _, _) = run(&DeviceConfig::cpu(2));
    let (cuda, graphs, lengths) = run(&{
        let mut graphs = DeviceConfig::cuda();
        graphs.graph = Some(true);
        graphs
    });
    assert_eq!(lengths, 3, "three buckets");
    assert_eq!(graphs, lengths, "one captured graph per bucket the training steps use");
    assert_eq!(cuda.losses.len(), cpu.losses.len());
    for (step, (g, c)) in cuda.losses.iter().zip(&cpu.losses).enumerate() {
        assert!(
            (g - c).abs() <= 2e-3 * c.abs().max(1.0),
            "step {step}: GPU {g}, CPU {c}"
        );
    }
    let (g, c) = (cuda.reports[0].test_accuracy, cpu.reports[0].test_accuracy);
    assert!((g - c).abs() <= 0.02, "development accuracy: GPU {g}, CPU {c}");
    let _ = writeln!(
        std::io::stderr(),
        "sst-lstm on the GPU: {graphs} graphs, final loss {} (CPU {}), accuracy {g:.3} (CPU {c:.3})",
        cuda.losses.last().unwrap(),
        cpu.losses.last().unwrap()
    );
}

/// The fixture's one sst-lstm step (`support/sst_step.rs`) on the GPU:
/// loss, logits and every gradient within 1e-4 of PyTorch's float64
/// answer, as on the CPU, and within 1e-4 of the CPU's.
#[test]
fn sst_lstm_one_step_on_the_gpu_matches_pytorch() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu("sst-lstm against pytorch") else {
        return;
    };
    let on_gpu = sst_step::bumpgrad_step(gpu).expect("the fixture is in the repository");
    sst_step::assert_matches_pytorch("gpu", &on_gpu);
    let on_cpu = sst_step::bumpgrad_step(Device::cpu(2).expect("cpu")).expect("the fixture");
    for (name, (_, cpu)) in &on_cpu {
        assert_close(&format!("sst-lstm: {name}"), cpu, &on_gpu[name].1);
    }
}
