//! char-lstm on the GPU: two epochs of a small model on a slice of
//! tiny-shakespeare, every full step a replay of one captured graph (each
//! replay gathers its window at the cursor and carries the streams' state
//! through the persistent region), follow the CPU's run of the same
//! settings: every step's loss within 2e-3 of the CPU's (relative, the
//! drift of float sums in another order over 84 steps of AdamW), and each
//! epoch's validation loss within 1e-2 (the shared body,
//! `support/char_lm_case.rs`, runs on the CPU in `tests/language_model.rs`).

use super::*;
use bumpgrad::train::DeviceConfig;

#[path = "../support/char_lm_case.rs"]
mod char_lm_case;

#[test]
fn char_lstm_trains_on_one_captured_graph_and_follows_the_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(probe) = gpu("char_lstm_graph") else { return };
    drop(probe);
    let corpus = char_lm_case::shakespeare_slice(12_000, "lm-gpu");
    let run = |device: &DeviceConfig| {
        char_lm_case::train(&char_lm_case::config(
            corpus.clone(),
            char_lm_case::small_lstm(),
            device,
            2,
        ))
    };
    let cpu = run(&DeviceConfig::cpu(2));
    let cuda = run(&{
        let mut graphs = DeviceConfig::cuda();
        graphs.graph = Some(true);
        graphs
    });
    assert_eq!(cuda.graphs, 1, "one window shape, one captured graph");
    assert_eq!(cuda.losses.len(), cpu.losses.len());
    for (step, (g, c)) in cuda.losses.iter().zip(&cpu.losses).enumerate() {
        assert!(
            (g - c).abs() <= 2e-3 * c.abs().max(1.0),
            "step {step}: GPU {g}, CPU {c}"
        );
    }
    for (g, c) in cuda.reports.iter().zip(&cpu.reports) {
        let (g, c) = (g.valid_loss.unwrap(), c.valid_loss.unwrap());
        assert!((g - c).abs() <= 1e-2, "epoch validation loss: GPU {g}, CPU {c}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "char-lstm on the GPU: final loss {} (CPU {}), validation perplexity {:.3}",
        cuda.losses.last().unwrap(),
        cpu.losses.last().unwrap(),
        cuda.reports[1].perplexity.unwrap()
    );
}
