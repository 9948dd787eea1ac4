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

#[test]
fn fill_rows_gradient_matches_finite_differences_when_blocks_read_the_rows_before() {
    // Three blocks of 2, 1 and 2 rows in two tables; each block after the
    // first gathers rows already written (some twice, from both tables),
    // so a row's gradient sums what every later block read of it.
    let (x, w) = (Shape::new(&[2, 3]), Shape::new(&[3, 3]));
    check(
        &[x, w],
        &[values(6, 31, -1.0, 1.0), values(9, 32, -1.0, 1.0)],
        &[0, 1],
        &|s, xs| {
            let (x, w) = (xs[0], xs[1]);
            let first = [x.tanh(s)?, x.sigmoid(s)?];
            let reads: [&[u32]; 3] = [&[], &[1], &[2, 0]];
            let [a, b] = Tensor::fill_rows(s, 5, first, 3, |s, k, [a, b]| {
                let ids = s.labels(reads[k])?;
                let from_a = a.embedding(s, ids)?.linear(s, w, None)?;
                let from_b = b.embedding(s, ids)?;
                Ok([from_a.add(s, from_b)?.tanh(s)?, from_a.sigmoid(s)?])
            })?;
            let both = a.add(s, b)?;
            both.tanh(s)
        },
    );
}

#[test]
fn fill_rows_appends_each_block_below_the_rows_before() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let (seen, out) = engine
        .step(|s| {
            let first = [s.input("block 0", Shape::new(&[1, 2]), &[1.0, 2.0])?];
            let mut seen = [0.0; 6];
            let [t] = Tensor::fill_rows(s, 3, first, 2, |s, _, [t]| {
                // The table as block 1 finds it: row 0 written, the rest zero.
                s.read(t, &mut seen)?;
                Ok([s.input("block 1", Shape::new(&[2, 2]), &[3.0, 4.0, 5.0, 6.0])?])
            })?;
            let mut out = [0.0; 6];
            s.read(t, &mut out)?;
            Ok((seen, out))
        })
        .unwrap();
    assert_eq!(seen, [1.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(out, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn fill_rows_refuses_blocks_that_overflow_or_leave_rows_empty() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    for (rows, block_rows, says) in [
        (3, 1, "fill 2"),
        (3, 3, "block 1 is [3, 2] below 1 rows"),
        (3, 0, "[n, 2]"),
    ] {
        let err = engine
            .step(|s| {
                let first = [s.input("block 0", Shape::new(&[1, 2]), &[1.0, 2.0])?];
                let shape = match block_rows {
                    0 => Shape::new(&[2]),
                    n => Shape::new(&[n, 2]),
                };
                Tensor::fill_rows(s, rows, first, 2, |s, _, _| {
                    Ok([s.input("block 1", shape, &vec![0.5; shape.numel()])?])
                })
                .map(drop)
            })
            .unwrap_err();
        assert!(matches!(err, Error::Shape { .. }), "{err}");
        assert!(err.to_string().contains(says), "{err}");
    }
}
