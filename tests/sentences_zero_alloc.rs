//! A run whose step shape changes from minibatch to minibatch makes no heap
//! allocation once each shape has run once: sst-lstm on a synthetic
//! treebank of three length buckets, the batches of an epoch interleaving
//! them. The first epoch runs every bucket's training and evaluation step
//! once (the tape's and the trace's vectors grow to each); the second,
//! shuffled into another order of buckets, its training steps, its loss
//! read-backs and its evaluation, is counted whole, on the one thread that
//! runs the loop and on the CPU's workers alike.

use bumpgrad::train::{DeviceConfig, Pipeline};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
#[path = "support/sst_case.rs"]
mod sst_case;

#[test]
fn steps_of_every_bucket_allocate_nothing_after_each_buckets_first() {
    let cfg = sst_case::config(
        sst_case::synthetic_treebank("zero-alloc", 120, 40),
        3,
        &DeviceConfig::cpu(2),
        2,
    );
    let (mut session, _) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("a session");
    assert!(session.lengths().len() >= 2, "shapes change: {:?}", session.lengths());
    let steps = session.steps_per_epoch();
    let mut seen = sst_case::Seen::default();
    let (counted, accuracy, losses) = session.on_workers(|session| {
        session.epoch(1, &mut seen).expect("the first epoch");
        let before = counting_alloc::allocations();
        session.begin_epoch(2, 0).expect("the second epoch begins");
        for step in 0..steps {
            session.train_step(step).expect("a step");
        }
        let losses = session.losses(0..steps).expect("the losses").iter().sum::<f32>();
        let accuracy = session.evaluate().expect("an evaluation");
        (counting_alloc::allocations() - before, accuracy, losses)
    });
    assert!(losses.is_finite() && accuracy > 0.0, "{losses} {accuracy}");
    assert_eq!(
        counted,
        0,
        "an epoch of {steps} steps over buckets {:?} allocated {counted} times",
        session.lengths()
    );
}
