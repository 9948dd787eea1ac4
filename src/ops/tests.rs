//! The registry and the step over its node set: every kernel registered as
//! its source defines it; gradients of a tensor used more than once add up
//! (`Step::accumulate`: the first contribution is kept, later ones are
//! added into it); and the step scope on the arena (a planned step with
//! tensors follows its plan); and the launch helper's declarations, which
//! the CPU holds every kernel to.

use super::gradcheck::{check, values, EPS};
use super::KERNELS;
use crate::backend::cuda::kernels::kernels_not_waiting;
use crate::backend::cuda::kernels::tests::registration_errors;
use crate::backend::cuda::kernels::KernelTable;
use crate::backend::{Backend, BackendError, Device};
use crate::base::Buf;
use crate::tensor::{Param, Shape};
use crate::{Engine, Error};

/// A kernel a source defines but nobody registered, or a name registered
/// that its source does not define, fails here, on a machine without a
/// GPU, rather than when a GPU first opens.
#[test]
fn every_kernel_is_registered_exactly_as_its_source_defines_it() {
    let errors: Vec<String> = KERNELS.iter().flat_map(registration_errors).collect();
    assert!(
        errors.is_empty(),
        "kernel registrations disagree with their sources:\n{}",
        errors.join("\n")
    );
    let table = KernelTable::new(KERNELS, |_| Ok(()));
    assert!(table.is_ok(), "{:?}", table.err());
}

/// The GPU may start a kernel of ours before the one before it completes
/// (see `PDL_WAIT` in common.cu): each must wait first.
#[test]
fn every_kernel_first_waits_for_the_one_before_it() {
    let errors: Vec<String> = KERNELS
        .iter()
        .flat_map(|k| {
            kernels_not_waiting(k.source)
                .into_iter()
                .map(move |name| format!("{}: `{name}` does not begin with PDL_WAIT();", k.owner))
        })
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn a_tensor_used_twice_by_one_op_gets_the_sum_of_both_gradients() {
    // y = x · xᵀ: x is the input and the weight; ∂⟨y, g⟩/∂x = g·x + gᵀ·x.
    let shape = Shape::new(&[4, 5]);
    check(&[shape], &[values(20, 61, -1.0, 1.0)], &[0], &|s, t| {
        t[0].linear(s, t[0], None)
    });
}

#[test]
fn a_tensor_used_in_two_branches_gets_the_sum_of_both_gradients() {
    // y = relu(x) · xᵀ: the weight's gradient reaches x first, the relu's
    // second. Inputs keep more than a finite-difference step off the kink.
    let shape = Shape::new(&[3, 4]);
    let x: Vec<f32> = values(12, 62, -1.0, 1.0)
        .into_iter()
        .map(|v| v + v.signum() * 3.0 * EPS)
        .collect();
    check(&[shape], &[x], &[0], &|s, t| {
        let r = t[0].relu(s)?;
        r.linear(s, t[0], None)
    });
}

#[test]
fn a_parameter_asked_for_twice_gets_the_sum_of_both_uses() {
    // z = (x · Wᵀ) · Wᵀ with both W the same parameter, asked for twice.
    let (xs, ws) = (Shape::new(&[2, 3]), Shape::new(&[3, 3]));
    let x = values(6, 63, -1.0, 1.0);
    let g = values(6, 64, -1.0, 1.0);
    let w0 = values(9, 65, -1.0, 1.0);
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
    // A parameter as a store hands it out: its values and its gradient's
    // slot in the persistent region.
    let mut p = engine.persistent();
    let (buf, grad) = (p.upload("w", ws, &w0).unwrap(), p.zeros("w grad", ws).unwrap());
    let w = Param {
        index: 0,
        buf,
        grad,
        shape: ws,
    };
    // ⟨z, g⟩ at the parameter's current values, and its gradient.
    let run = |engine: &mut Engine, values: &[f32]| {
        engine.write_persistent(w.buf(), values).unwrap();
        engine
            .step(|s| {
                let input = s.input("x", xs, &x)?;
                let first = s.param(&w);
                let y = input.linear(s, first, None)?;
                let second = s.param(&w);
                let z = y.linear(s, second, None)?;
                let upstream = s.input("g", z.shape(), &g)?;
                let grads = s.backward_from(z, upstream)?;
                let (mut zs, mut gw) = (vec![0.0; 6], vec![0.0; 9]);
                s.read(z, &mut zs)?;
                let gw_t = s.param_grad(&grads, &w).expect("a gradient for w");
                s.read(gw_t, &mut gw)?;
                let dot: f64 = zs.iter().zip(&g).map(|(&a, &b)| a as f64 * b as f64).sum();
                Ok((dot, gw))
            })
            .unwrap()
    };
    let (_, analytic) = run(&mut engine, &w0);
    for j in 0..9 {
        let (mut plus, mut minus) = (w0.clone(), w0.clone());
        plus[j] += EPS;
        minus[j] -= EPS;
        let numeric = (run(&mut engine, &plus).0 - run(&mut engine, &minus).0) / (2.0 * EPS as f64);
        let a = analytic[j] as f64;
        assert!(
            (numeric - a).abs() <= 1e-3 + 1e-3 * numeric.abs(),
            "w[{j}]: analytic {a} vs numeric {numeric}"
        );
    }
}

/// `Engine::planned_step` runs a step with tensors on the arena's memory plan.
#[test]
fn a_planned_step_reuses_dead_bytes_and_replans_a_new_sequence() {
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let run = |engine: &mut Engine, n: usize| {
        engine
            .planned_step(7, |s| {
                // a dies when b is made from it; b and c are alive together.
                let a = s.input("a", Shape::new(&[n]), &vec![1.0; n])?;
                let b = a.relu(s)?;
                let c = b.relu(s)?;
                let mut out = vec![0.0; n];
                s.read(c, &mut out)?;
                Ok((a.buf().offset(), c.buf().offset(), out))
            })
            .unwrap()
    };
    let first = run(&mut engine, 256);
    assert_eq!(engine.arena().plans().len(), 1);
    let plan = engine.arena().plans()[0].clone();
    assert_eq!(plan.bump_bytes, 3 * 1024);
    assert_eq!(plan.peak, 2 * 1024, "a's bytes go to c");
    assert_eq!(plan.lower_bound, 2 * 1024);
    let planned = run(&mut engine, 256);
    assert_eq!(planned.0, planned.1, "c takes a's bytes under the plan");
    assert_eq!(planned.2, first.2);
    assert_eq!(engine.arena().stats().last_step_bytes, 2 * 1024);
    assert!(engine.arena_mut().take_replanned().is_empty());
    // Another sequence under the same key: finished above the plan,
    // then re-planned, never following the stale plan.
    let other = run(&mut engine, 512);
    assert!(other.2.iter().all(|&v| v == 1.0));
    assert_eq!(engine.arena_mut().take_replanned(), vec![7]);
    assert_eq!(engine.arena().plans()[0].peak, 2 * 2048);
}

/// What a traced step's ops noted they lose to slower algorithms (a GPU's
/// held workspaces) is the plan's: summed, once per op that noted it, and
/// only from the step that made the plan.
#[test]
fn a_plan_carries_the_seconds_its_step_lost_to_slower_algorithms() {
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let run = |engine: &mut Engine, n: usize| {
        engine
            .planned_step(3, |s| {
                let a = s.input("a", Shape::new(&[n]), &vec![1.0; n])?;
                s.note_slower(|| 0.25);
                let b = a.relu(s)?;
                s.note_slower(|| 0.5);
                b.relu(s).map(drop)
            })
            .unwrap()
    };
    run(&mut engine, 64);
    assert_eq!(engine.arena().plans()[0].slower_seconds, 0.75);
    run(&mut engine, 64);
    assert_eq!(
        engine.arena().plans()[0].slower_seconds,
        0.75,
        "a step on its plan adds nothing"
    );
    run(&mut engine, 128);
    assert_eq!(
        engine.arena().plans()[0].slower_seconds,
        0.75,
        "re-planned from one step's trace"
    );
}

/// Capture is a device capability: on the CPU it is refused, typed, before
/// the step runs, and the arena is left as it was.
#[test]
fn capturing_a_step_on_the_cpu_is_refused_before_it_runs() {
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let mut ran = false;
    let err = engine
        .capture_step(None, |s| {
            ran = true;
            s.input("x", Shape::new(&[4]), &[1.0; 4]).map(drop)
        })
        .err()
        .expect("no graph on the CPU");
    assert!(
        matches!(
            err,
            crate::Error::Backend(crate::backend::BackendError::NeedsCuda {
                what: "whole-step graphs",
                ..
            })
        ),
        "{err:?}"
    );
    assert!(!ran, "the step body ran although nothing could capture it");
    assert_eq!(engine.arena().stats().resets, 0);
    engine
        .step(|s| s.input("x", Shape::new(&[4]), &[1.0; 4]).map(drop))
        .unwrap();
    assert_eq!(engine.arena().stats().resets, 1);
}

/// The guard the memory plan rests on: the plan is made from what ops
/// declare (`Step::uses`), so a kernel touching anything else is refused.
#[test]
fn a_kernel_touching_what_its_op_did_not_declare_is_refused() {
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let err = engine
        .step(|s| {
            let a = s.alloc::<f32>("declared", Shape::new(&[64]))?;
            let b = s.alloc::<f32>("undeclared", Shape::new(&[64]))?;
            let Backend::Cpu(cpu) = s.uses(&[a.into()]) else {
                unreachable!()
            };
            // What the op declared, and any part of it, may be touched.
            cpu.run(|v, _| {
                v.write(a)?.fill(1.0);
                Ok(())
            })?;
            cpu.run(|v, _| v.read(a.slice(16, 16).unwrap()).map(drop))?;
            // Anything else may not: another buffer, or a range that
            // runs past the declared one's end.
            let other = cpu.run(|v, _| v.read(b).map(drop)).unwrap_err();
            assert!(
                matches!(other, BackendError::Undeclared { offset, bytes: 256 } if offset == b.offset()),
                "{other}"
            );
            let past = Buf::<f32>::new(a.offset() + 128, 64);
            let past = cpu.run(|v, _| v.write(past).map(drop)).unwrap_err();
            assert!(matches!(past, BackendError::Undeclared { .. }), "{past}");
            // The next op's declaration replaces this one's: a is now
            // out of bounds for its kernels, and the step fails, typed.
            let Backend::Cpu(cpu) = s.uses(&[b.into()]) else {
                unreachable!()
            };
            cpu.run(|v, _| v.read(a).map(drop))?;
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(err, Error::Backend(BackendError::Undeclared { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("that its op did not declare"), "{err}");
}
