//! The Tree-LSTM on the CPU against PyTorch's float64 answer for one step
//! over three trees (`support/tree_step.rs`; the GPU's in
//! `tests/gpu/sequences.rs`), one node at a time and level by level.

#[path = "support/lstm_step.rs"]
mod lstm_step;
#[path = "support/tree_step.rs"]
mod tree_step;

use bumpgrad::Device;

#[test]
fn a_tree_lstm_step_matches_pytorchs_float64_answer_both_ways() {
    for (levels, what) in [(false, "cpu, post-order"), (true, "cpu, by level")] {
        let Some(ours) = tree_step::bumpgrad_step(Device::cpu(2).unwrap(), levels) else {
            return;
        };
        tree_step::assert_matches_pytorch(what, &ours);
    }
}
