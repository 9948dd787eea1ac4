use crate::ops::gradcheck::{check, values};
use crate::tensor::{Shape, Tensor};
use crate::Error;

#[test]
fn select_gradient_matches_finite_differences() {
    // Only slot 1 gets a gradient; the others' must come back zero.
    let shape = Shape::new(&[3, 4, 5]);
    check(&[shape], &[values(60, 11, -2.0, 2.0)], &[0], &|s, xs| {
        xs[0].select(s, 1)?.tanh(s)
    });
}

#[test]
fn every_slot_selected_and_the_whole_tensor_used_meet_in_one_gradient() {
    // The whole tensor's own gradient arrives first (backward runs in
    // reverse), the slots are added into it, one of them twice.
    let shape = Shape::new(&[3, 2, 4]);
    check(&[shape], &[values(24, 12, -2.0, 2.0)], &[0], &|s, xs| {
        let x = xs[0];
        let stacked = Tensor::stack(s, 3, |s, t| {
            let slot = x.select(s, [2, 0, 2][t])?.sigmoid(s)?;
            let again = x.select(s, t)?;
            slot.add(s, again)
        })?;
        let whole = x.tanh(s)?;
        stacked.add(s, whole)
    });
}

#[test]
fn a_slot_is_a_view_of_the_tensors_bytes() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let (slot, same) = engine
        .step(|s| {
            let x = s.input("x", Shape::new(&[3, 2]), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
            let y = x.select(s, 2)?;
            let mut out = [0.0; 2];
            s.read(y, &mut out)?;
            Ok((out, y.buf().offset() == x.buf().offset() + 4 * 4))
        })
        .unwrap();
    assert_eq!(slot, [5.0, 6.0]);
    assert!(same, "no copy: slot 2 starts 4 floats into x");
}

#[test]
fn a_slot_past_the_first_dimension_is_a_shape_error() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    for (dims, t) in [(&[3usize, 2][..], 3usize), (&[4][..], 0)] {
        let err = engine
            .step(|s| {
                let x = s.input("x", Shape::new(dims), &vec![0.0; Shape::new(dims).numel()])?;
                x.select(s, t).map(|_| ())
            })
            .unwrap_err();
        assert!(matches!(err, Error::Shape { op: "select", .. }), "{err}");
    }
}
