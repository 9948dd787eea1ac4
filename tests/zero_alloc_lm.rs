//! A character language model's training allocates nothing on the heap
//! after its first steps: every window gathers its ids at the cursor,
//! carries its state through the persistent region and is planned like the
//! first, and evaluation walks the validation windows likewise (the counter
//! is the whole process's, so this binary holds one test).

use bumpgrad::train::{DeviceConfig, EpochReport, Observer, Pipeline};

#[path = "support/char_lm_case.rs"]
mod char_lm_case;
#[path = "support/counting_alloc.rs"]
mod counting_alloc;

/// Counts from the first read-back of losses (after [`READBACK`] steps,
/// the warm-up) to the end; keeps nothing that allocates.
///
/// [`READBACK`]: bumpgrad::train::READBACK
#[derive(Default)]
struct Count {
    since: Option<usize>,
    steps: usize,
    perplexities: [f64; 2],
    epochs: usize,
}

impl Observer for Count {
    fn step(&mut self, _epoch: usize, _step: usize, loss: f32) {
        assert!(loss.is_finite());
        self.since.get_or_insert_with(counting_alloc::allocations);
        self.steps += 1;
    }
    fn epoch(&mut self, r: &EpochReport) {
        self.perplexities[self.epochs] = r.perplexity.unwrap_or(f64::NAN);
        self.epochs += 1;
    }
}

#[test]
fn two_epochs_of_a_char_lstm_allocate_nothing_after_the_warm_up() {
    let corpus = char_lm_case::shakespeare_slice(12_000, "lm-zero-alloc");
    let mut cfg = char_lm_case::config(corpus, char_lm_case::small_lstm(), &DeviceConfig::cpu(2), 2);
    cfg.memory.poison_step = Some(true);
    let (mut session, info) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("session");
    assert_eq!(info.steps_per_epoch, 42);
    let mut count = Count::default();
    let end = session.on_workers(|session| {
        for epoch in 1..=2 {
            session.epoch(epoch, &mut count).expect("epoch");
        }
        counting_alloc::allocations()
    });
    assert_eq!((count.steps, count.epochs), (84, 2));
    assert!(
        count.perplexities.iter().all(|p| p.is_finite()),
        "{:?}",
        count.perplexities
    );
    let counted = end - count.since.expect("losses were read back");
    assert_eq!(
        counted, 0,
        "64 training steps, 2 evaluations and 2 epoch reports made {counted} heap allocations"
    );
}
