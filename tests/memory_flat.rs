//! Memory is flat: after the first epoch, nothing grows. Alone in its test
//! binary, so that the process's resident memory is this run's alone.

use bumpgrad::backend::DeviceRequest;
use bumpgrad::train::{prepare, EpochReport, Quiet, TrainConfig};

#[test]
fn memory_is_flat_from_epoch_2_to_epoch_10() {
    let cfg = TrainConfig {
        device: DeviceRequest::Cpu,
        epochs: 10,
        threads: 2,
        data_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into(),
        train_limit: Some(2000),
        test_limit: Some(1000),
        ..TrainConfig::default()
    };
    let (mut session, info) = prepare(&cfg).expect("session");
    let capacity = info.arena.capacity_bytes;
    let reports: Vec<EpochReport> =
        session.on_workers(|session| (1..=10).map(|e| session.epoch(e, &mut Quiet).expect("epoch")).collect());
    let (second, tenth) = (&reports[1], &reports[9]);
    assert_eq!(second.arena.step_high_water_bytes, tenth.arena.step_high_water_bytes);
    assert_eq!(second.arena.persistent_bytes, tenth.arena.persistent_bytes);
    assert_eq!(tenth.arena.capacity_bytes, capacity, "the arena never grows");
    assert!(tenth.arena.resets > second.arena.resets);
    let (rss2, rss10) = (second.resident_bytes.expect("rss"), tenth.resident_bytes.expect("rss"));
    assert_eq!(rss2, rss10, "resident memory after epoch 2 and epoch 10");
}
