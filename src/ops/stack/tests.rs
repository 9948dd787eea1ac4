use crate::ops::gradcheck::{check, values};
use crate::tensor::{Shape, Tensor};
use crate::Error;

#[test]
fn stack_gradient_matches_finite_differences() {
    // A recurrence: each part is made from the one before with one shared
    // weight, so the weight's gradient sums every step's, and the stack's
    // gradient (the caller's, so copied, not lent) reaches every part.
    let (x, w) = (Shape::new(&[4, 2, 3]), Shape::new(&[3, 3]));
    check(
        &[x, w],
        &[values(24, 21, -1.0, 1.0), values(9, 22, -1.0, 1.0)],
        &[0, 1],
        &|s, xs| {
            let (x, w) = (xs[0], xs[1]);
            let mut h: Option<Tensor<'_>> = None;
            Tensor::stack(s, 4, |s, t| {
                let input = x.select(s, t)?;
                let pre = match h {
                    Some(h) => {
                        let from_h = h.linear(s, w, None)?;
                        input.add(s, from_h)?
                    }
                    None => input,
                };
                let next = pre.tanh(s)?;
                h = Some(next);
                Ok(next)
            })
        },
    );
}

#[test]
fn a_stack_lends_its_gradient_when_it_may_and_parts_used_again_still_sum() {
    // The stack's gradient is its consumer's (tanh's), so parts get slots
    // of it as they are; part 0 is also used after the stack.
    let x = Shape::new(&[3, 5]);
    check(&[x], &[values(15, 23, -2.0, 2.0)], &[0], &|s, xs| {
        let x = xs[0];
        let mut first = None;
        let y = Tensor::stack(s, 3, |s, t| {
            let p = x.select(s, t)?.sigmoid(s)?;
            first.get_or_insert(p);
            Ok(p)
        })?;
        let again = first.expect("part 0").reshape(s, Shape::new(&[1, 5]))?;
        let again = Tensor::stack(s, 3, |_, _| Ok(again))?.reshape(s, Shape::new(&[3, 5]))?;
        y.tanh(s)?.add(s, again)
    });
}

#[test]
fn stack_puts_parts_side_by_side_along_a_new_first_dimension() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let (shape, out) = engine
        .step(|s| {
            let y = Tensor::stack(s, 3, |s, t| {
                let v = [t as f32, 10.0 + t as f32];
                s.input("part", Shape::new(&[2]), &v)
            })?;
            let mut out = [0.0; 6];
            s.read(y, &mut out)?;
            Ok((y.shape(), out))
        })
        .unwrap();
    assert_eq!(shape, Shape::new(&[3, 2]));
    assert_eq!(out, [0.0, 10.0, 1.0, 11.0, 2.0, 12.0]);
}

#[test]
fn parts_of_other_shapes_or_none_are_shape_errors() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    for steps in [0, 2] {
        let err = engine
            .step(|s| {
                Tensor::stack(s, steps, |s, t| {
                    s.input("part", Shape::new(&[t + 1]), &vec![1.0; t + 1])
                })
                .map(|_| ())
            })
            .unwrap_err();
        assert!(matches!(err, Error::Shape { op: "stack", .. }), "{err}");
    }
}
