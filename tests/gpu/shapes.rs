//! Shapes per step on the GPU: one session steps at batch 100 and batch 50,
//! each on its own plans and its own captured graph inside one arena sized
//! for the larger, and trains as two single-size sessions do, bit for bit
//! with deterministic algorithms (the body `support/shapes_case.rs` runs
//! on the CPU too, in `tests/shapes.rs`).

use super::*;
use bumpgrad::train::DeviceConfig;

#[path = "../support/shapes_case.rs"]
mod shapes_case;

#[test]
fn two_batch_sizes_in_one_session_each_replay_their_own_graph_and_train_as_two_runs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(probe) = gpu("two_batch_sizes") else { return };
    drop(probe);
    let mut device = DeviceConfig::cuda();
    (device.deterministic, device.conv_algos, device.graph) = (true, ConvAlgos::Heuristic, Some(true));
    let seen = shapes_case::two_batch_sizes(&device);
    let _ = writeln!(
        std::io::stderr(),
        "two batch sizes on the GPU: {} graphs, arena {} B ({} persistent)",
        seen.graphs,
        seen.capacity,
        seen.persistent
    );
    assert_eq!(seen.graphs, 2, "one graph per batch size");
}
