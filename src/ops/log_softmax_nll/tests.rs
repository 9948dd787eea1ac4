use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

const LABELS: [u32; 4] = [3, 0, 4, 3];

#[test]
fn log_softmax_nll_gradient_matches_finite_differences() {
    let shape = Shape::new(&[4, 5]);
    check(&[shape], &[values(20, 41, -3.0, 3.0)], &[0], &|s, x| {
        let labels = s.labels(&LABELS)?;
        x[0].log_softmax_nll(s, labels)
    });
}

#[test]
fn loss_matches_the_definition_and_survives_large_logits() {
    let logits = [1000.0, 0.0, -1000.0, 0.5, 0.5, 0.5];
    let mut arena = crate::Arena::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let loss = arena
        .step(|s| {
            let x = s.input("x", Shape::new(&[2, 3]), &logits)?;
            let labels = s.labels(&[0, 2])?;
            let loss = x.log_softmax_nll(s, labels)?;
            s.scalar(loss)
        })
        .unwrap();
    // Row 1: log-softmax at the winner is ~0; row 2: ln(3).
    let want = (0.0 + 3f32.ln()) / 2.0;
    assert!((loss - want).abs() < 1e-5, "{loss} vs {want}");
}

#[test]
fn a_label_out_of_range_is_an_error_not_a_panic() {
    let mut arena = crate::Arena::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let err = arena
        .step(|s| {
            let x = s.input("x", Shape::new(&[1, 3]), &[0.0; 3])?;
            let labels = s.labels(&[3])?;
            x.log_softmax_nll(s, labels).map(|_| ())
        })
        .unwrap_err();
    assert!(err.to_string().contains("label 3"), "{err}");
}
