//! After the first step, a training step makes no heap allocation: the
//! tape's vectors keep their capacity, tensors are handles, and every byte a
//! step needs comes from the arena. A counting global allocator proves it.

use bumpgrad::backend::DeviceRequest;
use bumpgrad::train::{prepare, TrainConfig};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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

        let before = ALLOCATIONS.load(Ordering::SeqCst);
        for step in 1..10 {
            session.train_step(step).expect("step");
        }
        let mut losses = [0.0f32; 9];
        losses.copy_from_slice(session.losses(1..10).expect("losses"));
        let accuracy = session.evaluate().expect("evaluation");
        (losses, accuracy, ALLOCATIONS.load(Ordering::SeqCst) - before)
    });

    assert!(losses.iter().all(|l| l.is_finite() && *l > 0.0), "{losses:?}");
    assert!((0.0..=1.0).contains(&accuracy));
    assert_eq!(
        during, 0,
        "9 training steps and an evaluation made {during} heap allocations"
    );
}
