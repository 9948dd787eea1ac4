use crate::backend::BackendError;
use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;
use crate::Error;

#[test]
fn onehot_linear_gradient_matches_finite_differences() {
    // W [3, 5], tokens naming column 1 three times and columns 2 and 3
    // never (their gradient is zero); tanh after, so the upstream gradient
    // differs between the uses of one column.
    check(
        &[Shape::new(&[3, 5]), Shape::new(&[3])],
        &[values(15, 51, -2.0, 2.0), values(3, 52, -1.0, 1.0)],
        &[0, 1],
        &|s, xs| {
            let tokens = s.labels(&[1, 4, 1, 1, 0])?;
            xs[0].onehot_linear(s, tokens, xs[1])?.tanh(s)
        },
    );
}

/// The same numbers as `linear` of the one-hot matrix, forward and
/// backward: the gather is the product it replaces.
#[test]
fn onehot_linear_is_linear_of_the_onehot_matrix() {
    let (rows, vocab, tokens) = (4, 6, [5u32, 0, 2, 5, 3, 3, 1]);
    let w = values(rows * vocab, 7, -1.0, 1.0);
    let b = values(rows, 8, -1.0, 1.0);
    let gy = values(tokens.len() * rows, 9, -1.0, 1.0);
    let mut onehot = vec![0.0f32; tokens.len() * vocab];
    for (n, &t) in tokens.iter().enumerate() {
        onehot[n * vocab + t as usize] = 1.0;
    }
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let run = |engine: &mut crate::Engine, gather: bool| {
        engine
            .step(|s| {
                let wt = s.variable("w", Shape::new(&[rows, vocab]), &w)?;
                let bt = s.variable("b", Shape::new(&[rows]), &b)?;
                let y = match gather {
                    true => {
                        let ids = s.labels(&tokens)?;
                        wt.onehot_linear(s, ids, bt)?
                    }
                    false => {
                        let x = s.input("onehot", Shape::new(&[tokens.len(), vocab]), &onehot)?;
                        x.linear(s, wt, Some(bt))?
                    }
                };
                let g = s.input("dy", y.shape(), &gy)?;
                let grads = s.backward_from(y, g)?;
                let (gw, gb) = (s.grad(&grads, wt).expect("w grad"), s.grad(&grads, bt).expect("b grad"));
                let mut out = vec![vec![0.0; tokens.len() * rows], vec![0.0; rows * vocab], vec![0.0; rows]];
                s.read(y, &mut out[0])?;
                s.read(gw, &mut out[1])?;
                s.read(gb, &mut out[2])?;
                Ok(out)
            })
            .unwrap()
    };
    let (gathered, multiplied) = (run(&mut engine, true), run(&mut engine, false));
    for (what, (a, b)) in ["y", "dW", "db"].iter().zip(gathered.iter().zip(&multiplied)) {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= 1e-6, "{what}[{i}]: {x} gathered, {y} multiplied");
        }
    }
}

#[test]
fn a_token_past_the_weights_columns_is_an_error_naming_it() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let err = engine
        .step(|s| {
            let w = s.input("w", Shape::new(&[2, 4]), &[0.0; 8])?;
            let b = s.input("b", Shape::new(&[2]), &[0.0; 2])?;
            let tokens = s.labels(&[1, 3, 4])?;
            w.onehot_linear(s, tokens, b).map(|_| ())
        })
        .unwrap_err();
    match &err {
        Error::Backend(BackendError::Token { index, token, vocab }) => {
            assert_eq!((*index, *token, *vocab), (2, 4, 4), "{err}")
        }
        other => panic!("expected a token error, got {other}"),
    }
}

#[test]
fn a_bias_not_of_the_weights_rows_is_a_shape_error() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let err = engine
        .step(|s| {
            let w = s.input("w", Shape::new(&[2, 4]), &[0.0; 8])?;
            let b = s.input("b", Shape::new(&[4]), &[0.0; 4])?;
            let tokens = s.labels(&[1])?;
            w.onehot_linear(s, tokens, b).map(|_| ())
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Shape {
                op: "onehot_linear",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("[2, 4]"), "{err}");
}
