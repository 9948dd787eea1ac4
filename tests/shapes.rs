//! Shapes per step on the CPU: one session steps at two batch sizes, each
//! on its own plans inside one arena sized for the larger, and trains as
//! two single-size sessions do, bit for bit (`support/shapes_case.rs`).

use bumpgrad::train::DeviceConfig;

#[path = "support/shapes_case.rs"]
mod shapes_case;

#[test]
fn two_batch_sizes_in_one_session_train_as_two_single_size_runs_bit_for_bit() {
    let seen = shapes_case::two_batch_sizes(&DeviceConfig::cpu(2));
    assert_eq!(seen.graphs, 0, "the CPU captures no graph");
    assert!(seen.capacity > seen.persistent);
}
