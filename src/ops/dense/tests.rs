use super::Epilogue;
use crate::ops::dropout::DropoutSeed;
use crate::ops::gradcheck::{check, values, EPS};
use crate::tensor::Shape;

fn shapes() -> [Shape; 3] {
    [Shape::new(&[7, 13]), Shape::new(&[6, 13]), Shape::new(&[6])]
}

fn inputs() -> Vec<Vec<f32>> {
    vec![
        values(91, 41, -1.0, 1.0),
        values(78, 42, -1.0, 1.0),
        values(6, 43, -0.5, 0.5),
    ]
}

/// Every pre-activation `x · Wᵀ + b` is further from the relu's kink than
/// one finite-difference step of any input can move it (every input is in
/// [-1, 1], so a step moves a pre-activation by at most `EPS`).
fn assert_clear_of_the_kink(v: &[Vec<f32>]) {
    assert!(v.iter().flatten().all(|x| x.abs() <= 1.0));
    for n in 0..7 {
        for o in 0..6 {
            let z: f32 = (0..13).map(|k| v[0][n * 13 + k] * v[1][o * 13 + k]).sum::<f32>() + v[2][o];
            assert!(
                z.abs() > 2.0 * EPS,
                "pre-activation [{n}, {o}] = {z} is within reach of the kink"
            );
        }
    }
}

#[test]
fn dense_gradient_matches_finite_differences_for_every_epilogue() {
    assert_clear_of_the_kink(&inputs());
    let epilogues = [
        Epilogue::default(),
        Epilogue {
            relu: true,
            dropout: None,
        },
        Epilogue {
            relu: true,
            dropout: Some((0.5, DropoutSeed::Fixed(77))),
        },
        Epilogue {
            relu: false,
            dropout: Some((0.3, DropoutSeed::Fixed(5))),
        },
    ];
    for e in epilogues {
        check(&shapes(), &inputs(), &[0, 1, 2], &move |s, x| {
            x[0].dense(s, x[1], Some(x[2]), e)
        });
    }
}

#[test]
fn dense_equals_linear_then_relu_then_dropout() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let [xs, ws, bs] = shapes();
    let v = inputs();
    let e = Epilogue {
        relu: true,
        dropout: Some((0.5, DropoutSeed::Fixed(9))),
    };
    let (fused, chain) = engine
        .step(|s| {
            let (x, w, b) = (
                s.input("x", xs, &v[0])?,
                s.input("w", ws, &v[1])?,
                s.input("b", bs, &v[2])?,
            );
            let fused = x.dense(s, w, Some(b), e)?;
            let chain = x.linear(s, w, Some(b))?.relu(s)?.dropout(s, 0.5, 9)?;
            let (mut a, mut c) = (vec![0.0; 42], vec![0.0; 42]);
            s.read(fused, &mut a)?;
            s.read(chain, &mut c)?;
            Ok((a, c))
        })
        .unwrap();
    assert_eq!(fused, chain);
}

#[test]
fn the_weight_gradient_splits_only_a_long_batch_over_few_tiles() {
    use super::{weight_grad_chunks, SPAN};
    // The MNIST CNN's first dense layer at batch 1000 (4 × 21 tiles) and
    // its second (1 × 4): four chunks of two spans each.
    assert_eq!(weight_grad_chunks(1000, 84), (4, 256));
    assert_eq!(weight_grad_chunks(1000, 4), (4, 256));
    // Batch 100, or tiles that fill the GPU alone: no split.
    assert_eq!(weight_grad_chunks(100, 84), (1, 128));
    assert_eq!(weight_grad_chunks(1000, 300), (1, 1024));
    for n in [1, 129, 256, 257, 600, 1000, 4097] {
        for tiles in [1, 4, 84, 200, 264] {
            let (chunks, rows) = weight_grad_chunks(n, tiles);
            assert_eq!(rows % SPAN, 0, "n {n} tiles {tiles}");
            assert!(
                chunks * rows >= n && (chunks - 1) * rows < n,
                "n {n} tiles {tiles}: {chunks} × {rows}"
            );
            assert!(
                chunks == 1 || rows >= 2 * SPAN,
                "n {n} tiles {tiles}: chunks of {rows} rows"
            );
        }
    }
}
