//! After the first step, a training step makes no heap allocation: the
//! tape's vectors keep their capacity, tensors are handles, and every byte a
//! step needs comes from the arena. A counting global allocator proves it.

use bumpgrad::backend::DeviceRequest;
use bumpgrad::train::{prepare, TrainConfig};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

#[test]
fn training_steps_after_the_first_allocate_nothing() {
    let cfg = TrainConfig {
        device: DeviceRequest::Cpu,
        threads: 2,
        data_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into(),
        train_limit: Some(1000),
        test_limit: Some(200),
        ..TrainConfig::default()
    };
    let (mut session, _) = prepare(&cfg).expect("session");
    // The training loop runs on the device's workers, as `Session::epoch` does.
    let (losses, accuracy, during) = session.on_workers(|session| {
        session.begin_epoch(1, 0).expect("epoch order");
        session.train_step(0).expect("first step");
        session.losses(0..1).expect("first loss");
        session.evaluate().expect("first evaluation");

        let before = counting_alloc::allocations();
        for step in 1..10 {
            session.train_step(step).expect("step");
        }
        let mut losses = [0.0f32; 9];
        losses.copy_from_slice(session.losses(1..10).expect("losses"));
        let accuracy = session.evaluate().expect("evaluation");
        (losses, accuracy, counting_alloc::allocations() - before)
    });

    assert!(losses.iter().all(|l| l.is_finite() && *l > 0.0), "{losses:?}");
    assert!((0.0..=1.0).contains(&accuracy));
    assert_eq!(
        during, 0,
        "9 training steps and an evaluation made {during} heap allocations"
    );
}
