use crate::backend::BackendError;
use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;
use crate::Error;

#[test]
fn embedding_gradient_matches_finite_differences() {
    // Repeated tokens (row 1 three times) sum their gradients; rows 2 and 3
    // are named by no token and get zeros. tanh after, so the upstream
    // gradient differs between the uses of one row.
    let table = Shape::new(&[5, 3]);
    check(&[table], &[values(15, 31, -2.0, 2.0)], &[0], &|s, xs| {
        let tokens = s.labels(&[1, 4, 1, 1, 0])?;
        xs[0].embedding(s, tokens)?.tanh(s)
    });
}

#[test]
fn a_table_read_twice_in_a_step_gets_both_reads_gradients() {
    // The second read's backward adds into the gradient the first left
    // (in place on the CPU); a table that is also an op's output (a
    // Tree-LSTM's state table) and is read a third time after a product.
    let table = Shape::new(&[4, 3]);
    check(&[table], &[values(12, 32, -2.0, 2.0)], &[0], &|s, xs| {
        let t = xs[0].tanh(s)?;
        let (a, b, c) = (s.labels(&[3, 0, 3])?, s.labels(&[1, 3, 3])?, s.labels(&[2, 2, 1])?);
        let first = t.embedding(s, a)?;
        let second = t.embedding(s, b)?.tanh(s)?;
        let third = t.embedding(s, c)?;
        first.add(s, second)?.add(s, third)?.tanh(s)
    });
}

#[test]
fn embedding_picks_rows_by_token() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let (shape, out) = engine
        .step(|s| {
            let table: Vec<f32> = (0..12).map(|v| v as f32).collect();
            let table = s.input("table", Shape::new(&[4, 3]), &table)?;
            let tokens = s.labels(&[2, 0, 2, 3])?;
            let y = table.embedding(s, tokens)?;
            let mut out = [0.0; 12];
            s.read(y, &mut out)?;
            Ok((y.shape(), out))
        })
        .unwrap();
    assert_eq!(shape, Shape::new(&[4, 3]));
    assert_eq!(out, [6.0, 7.0, 8.0, 0.0, 1.0, 2.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]);
}

/// The table's gradient row of a repeated token is the sum of its rows of
/// `dy` in token order, exactly: the order the GPU adds in too.
#[test]
fn a_repeated_tokens_gradient_is_summed_in_token_order() {
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let tokens: Vec<u32> = (0..300).map(|n| [7, 3, 7, 0][n % 4]).collect();
    let gy = values(300 * 2, 32, -1.0, 1.0);
    let grad = engine
        .step(|s| {
            let table = s.variable("table", Shape::new(&[9, 2]), &[0.5; 18])?;
            let labels = s.labels(&tokens)?;
            let y = table.embedding(s, labels)?;
            let g = s.input("dy", y.shape(), &gy)?;
            let grads = s.backward_from(y, g)?;
            let gt = s.grad(&grads, table).expect("table grad");
            let mut out = vec![0.0; 18];
            s.read(gt, &mut out)?;
            Ok(out)
        })
        .unwrap();
    for v in 0..9 {
        for e in 0..2 {
            let mut sum = 0.0f32;
            for (n, _) in tokens.iter().enumerate().filter(|(_, &t)| t == v as u32) {
                sum += gy[n * 2 + e];
            }
            assert_eq!(grad[v * 2 + e].to_bits(), sum.to_bits(), "row {v} column {e}");
        }
    }
}

#[test]
fn a_token_past_the_table_is_an_error_naming_it() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let err = engine
        .step(|s| {
            let table = s.input("table", Shape::new(&[4, 3]), &[0.0; 12])?;
            let tokens = s.labels(&[1, 3, 4, 9])?;
            table.embedding(s, tokens).map(|_| ())
        })
        .unwrap_err();
    match &err {
        Error::Backend(BackendError::Token { index, token, vocab }) => {
            assert_eq!((*index, *token, *vocab), (2, 4, 4), "{err}")
        }
        other => panic!("expected a token error, got {other}"),
    }
    assert!(err.to_string().contains("token 4 at position 2"), "{err}");
}

#[test]
fn a_table_not_of_rank_two_is_a_shape_error() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let err = engine
        .step(|s| {
            let table = s.input("table", Shape::new(&[12]), &[0.0; 12])?;
            let tokens = s.labels(&[1])?;
            table.embedding(s, tokens).map(|_| ())
        })
        .unwrap_err();
    assert!(matches!(err, Error::Shape { op: "embedding", .. }), "{err}");
}
