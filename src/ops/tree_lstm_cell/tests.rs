use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;
use crate::Error;

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `(h, c)` of one unit, a node of one tree, on the CPU.
fn one_unit(gates: &[f32], children: Option<(f32, f32)>) -> (f32, f32) {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    engine
        .step(|s| {
            let g = s.input("gates", Shape::new(&[1, gates.len()]), gates)?;
            let kids = match children {
                Some((l, r)) => Some((
                    s.input("c_l", Shape::new(&[1, 1]), &[l])?,
                    s.input("c_r", Shape::new(&[1, 1]), &[r])?,
                )),
                None => None,
            };
            let (h, c) = g.tree_lstm_cell(s, kids)?;
            Ok((s.scalar(h)?, s.scalar(c)?))
        })
        .unwrap()
}

#[test]
fn an_inner_node_and_a_leaf_match_the_definition_by_hand() {
    // Inner: (i, f_l, f_r, o, u) pre-activations, children's cells 0.75, −1.5.
    let (h, c) = one_unit(&[0.5, -1.0, 2.0, 1.5, -0.25], Some((0.75, -1.5)));
    let (i, fl, fr, o, u) = (
        sigmoid(0.5),
        sigmoid(-1.0),
        sigmoid(2.0),
        sigmoid(1.5),
        (-0.25f64).tanh(),
    );
    let want_c = i * u + fl * 0.75 + fr * -1.5;
    let want_h = o * want_c.tanh();
    assert!((c as f64 - want_c).abs() < 1e-6, "inner c {c} vs {want_c}");
    assert!((h as f64 - want_h).abs() < 1e-6, "inner h {h} vs {want_h}");
    // Leaf: (i, o, u).
    let (h, c) = one_unit(&[0.5, -2.0, 0.8], None);
    let (i, o, u) = (sigmoid(0.5), sigmoid(-2.0), 0.8f64.tanh());
    assert!((c as f64 - i * u).abs() < 1e-6, "leaf c {c} vs {}", i * u);
    assert!((h as f64 - o * (i * u).tanh()).abs() < 1e-6, "leaf h {h}");
}

#[test]
fn tree_lstm_cell_gradient_matches_finite_differences() {
    // Three nodes of H 4; h and tanh(c) both read on, so every input's
    // gradient flows through both outputs.
    let (gates, state) = (Shape::new(&[3, 20]), Shape::new(&[3, 4]));
    check(
        &[gates, state, state],
        &[
            values(60, 61, -2.0, 2.0),
            values(12, 62, -1.5, 1.5),
            values(12, 63, -1.5, 1.5),
        ],
        &[0, 1, 2],
        &|s, xs| {
            let (h, c) = xs[0].tree_lstm_cell(s, Some((xs[1], xs[2])))?;
            let c = c.tanh(s)?;
            h.add(s, c)
        },
    );
    let leaves = Shape::new(&[3, 12]);
    check(&[leaves], &[values(36, 64, -2.0, 2.0)], &[0], &|s, xs| {
        let (h, c) = xs[0].tree_lstm_cell(s, None)?;
        let c = c.tanh(s)?;
        h.add(s, c)
    });
}

#[test]
fn a_root_reads_only_h_and_one_child_alone_wants_a_gradient() {
    // A root's c goes nowhere (its gradient is zero); the left child's cell
    // is a constant (an input), the right child's a variable.
    let (gates, state) = (Shape::new(&[2, 15]), Shape::new(&[2, 3]));
    check(
        &[gates, state],
        &[values(30, 65, -2.0, 2.0), values(6, 66, -1.0, 1.0)],
        &[0, 1],
        &|s, xs| {
            let left = s.input("c_l", Shape::new(&[2, 3]), &values(6, 67, -1.0, 1.0))?;
            let (h, _) = xs[0].tree_lstm_cell(s, Some((left, xs[1])))?;
            Ok(h)
        },
    );
}

#[test]
fn wrong_shapes_are_errors_that_say_what_was_wanted() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let mut err = |gates: &[usize], kids: Option<(&[usize], &[usize])>| {
        engine
            .step(|s| {
                let n = gates.iter().product();
                let g = s.input("gates", Shape::new(gates), &vec![0.0; n])?;
                let kids = match kids {
                    Some((l, r)) => Some((
                        s.input("c_l", Shape::new(l), &vec![0.0; l.iter().product()])?,
                        s.input("c_r", Shape::new(r), &vec![0.0; r.iter().product()])?,
                    )),
                    None => None,
                };
                g.tree_lstm_cell(s, kids).map(|_| ())
            })
            .expect_err("a shape error")
    };
    for (e, want) in [
        (err(&[2, 12], Some((&[2, 3], &[2, 3]))), "an inner node's gates [B, 5H]"),
        (err(&[2, 10], None), "a leaf's gates [B, 3H]"),
        (err(&[2, 10], Some((&[2, 2], &[2, 3]))), "the right child's cell [2, 2]"),
        (err(&[2, 10], Some((&[1, 2], &[2, 2]))), "the left child's cell [2, 2]"),
    ] {
        assert!(matches!(e, Error::Shape { .. }), "{e:?}");
        assert!(e.to_string().contains(want), "{e} lacks {want:?}");
    }
}
