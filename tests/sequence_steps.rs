//! A recurrent language model's step keeps the engine's rules: on its
//! memory plan (every buffer at its planned offset, dead bytes reused, the
//! step region poisoned after each step) it computes what its first,
//! bump-allocated step computed, and after that first step it makes no
//! heap allocation, `T` time steps of views, cells and a stack included.
//! The counter is the whole process's: this file holds one test.

use bumpgrad::nn::{Embedding, Linear, Lstm, ParamStore, Rnn};
use bumpgrad::ops::cross_entropy::CrossEntropyArgs;
use bumpgrad::{Device, Engine, Shape};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

const STEPS: usize = 12;
const BATCH: usize = 5;
const VOCAB: usize = 17;
const EMBED: usize = 8;
const HIDDEN: usize = 10;

enum Recurrent {
    Lstm(Lstm),
    Rnn(Rnn),
}

/// Five planned steps of embedding → two recurrent layers (carrying the
/// state from one window to the next) → linear → cross-entropy →
/// backward: each step's loss and the sum of the embedding's gradient, and
/// the allocations made by steps 2 to 5.
fn five_steps(lstm: bool) -> ([(f32, f32); 5], usize) {
    let mut engine = Engine::new(Device::cpu(2).expect("cpu"), 32 << 20).expect("arena");
    engine.arena_mut().set_poison_step(true);
    let (store, (embed, rnn, fc)) = ParamStore::build(&mut engine.persistent(), 3, |pb| {
        let embed = Embedding::new(&pb.pp("embed"), VOCAB, EMBED)?;
        let rnn = match lstm {
            true => Recurrent::Lstm(Lstm::new(&pb.pp("rnn"), EMBED, HIDDEN, 2)?),
            false => Recurrent::Rnn(Rnn::new(&pb.pp("rnn"), EMBED, HIDDEN, 2)?),
        };
        Ok((embed, rnn, Linear::new(&pb.pp("fc"), HIDDEN, VOCAB)?))
    })
    .expect("builds");
    let table = store.params().next().expect("the embedding's table");
    let tokens: Vec<u32> = (0..(STEPS + 1) * BATCH).map(|n| (n * 5 % VOCAB) as u32).collect();
    // On the device's workers, as a training loop runs (`Workers`): from
    // outside the pool every kernel would be injected into its shared
    // queue, whose blocks are heap-allocated as it fills.
    let workers = engine.runtime().workers();
    let (out, allocations) = workers.run(|| {
        let mut out = [(0.0, 0.0); 5];
        let mut allocations = 0;
        for (i, slot) in out.iter_mut().enumerate() {
            let before = counting_alloc::allocations();
            *slot = engine
                .planned_step(1, |s| {
                    let inputs = s.labels(&tokens[..STEPS * BATCH])?;
                    let targets = s.labels(&tokens[BATCH..])?;
                    let x = embed
                        .forward(s, inputs)?
                        .reshape(s, Shape::new(&[STEPS, BATCH, EMBED]))?;
                    let y = match &rnn {
                        Recurrent::Lstm(l) => {
                            let mut state = [None, None];
                            let first = l.forward(s, x, &mut state)?;
                            // A second window from the first's final state.
                            let again = l.forward(s, x, &mut state)?;
                            first.add(s, again)?
                        }
                        Recurrent::Rnn(r) => {
                            let mut state = [None, None];
                            let first = r.forward(s, x, &mut state)?;
                            let again = r.forward(s, x, &mut state)?;
                            first.add(s, again)?
                        }
                    };
                    let flat = y.reshape(s, Shape::new(&[STEPS * BATCH, HIDDEN]))?;
                    let loss = fc
                        .forward(s, flat)?
                        .cross_entropy(s, targets, CrossEntropyArgs::default())?;
                    let grads = s.backward(loss)?;
                    let g = s.param_grad(&grads, &table).expect("the table's gradient");
                    let mut host = [0.0f32; VOCAB * EMBED];
                    s.read(g, &mut host)?;
                    Ok((s.scalar(loss)?, host.iter().sum()))
                })
                .expect("the step runs");
            if i > 0 {
                allocations += counting_alloc::allocations() - before;
            }
        }
        (out, allocations)
    });
    (out, allocations)
}

#[test]
fn recurrent_steps_on_their_plan_compute_the_first_steps_answer_and_allocate_nothing() {
    for (name, lstm) in [("lstm", true), ("rnn", false)] {
        let (steps, allocations) = five_steps(lstm);
        let (loss, grad) = steps[0];
        assert!(loss.is_finite() && loss > 2.0 && grad.abs() > 0.0, "{name}: {steps:?}");
        for (i, &(l, g)) in steps.iter().enumerate().skip(1) {
            assert_eq!(
                (l.to_bits(), g.to_bits()),
                (loss.to_bits(), grad.to_bits()),
                "{name}: step {i} on the plan {l} {g}, the first step {loss} {grad}"
            );
        }
        assert_eq!(allocations, 0, "{name}: heap allocations in steps 2 to 5");
    }
}
