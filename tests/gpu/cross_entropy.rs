//! cross_entropy on the GPU: the row kernels and the fixed-order mean give
//! the CPU's loss and gradient for few and many classes, few rows and more
//! rows than a block has threads, with and without label smoothing; a run
//! repeats bit for bit; a label past the classes makes the loss NaN.

use super::*;

/// Logits `[n, c]` spread over ±`spread`, labels spread over the classes.
fn loss_and_grad<'s>(
    s: &mut Step<'s>,
    (n, c): (usize, usize),
    spread: f32,
    label_smoothing: f32,
) -> bumpgrad::Result<Vec<(&'static str, Tensor<'s>)>> {
    let logits: Vec<f32> = values(n * c, (n * c) as u64).iter().map(|v| spread * v).collect();
    let x = s.variable("logits", Shape::new(&[n, c]), &logits)?;
    let labels: Vec<u32> = (0..n).map(|i| (i * 7919 % c) as u32).collect();
    let labels = s.labels(&labels)?;
    let loss = x.cross_entropy(
        s,
        labels,
        CrossEntropyArgs {
            label_smoothing,
            ..CrossEntropyArgs::default()
        },
    )?;
    let grads = s.backward(loss)?;
    Ok(vec![
        ("loss", loss),
        ("logits grad", s.grad(&grads, x).expect("gradient")),
    ])
}

#[test]
fn cross_entropy_matches_the_cpu_for_ten_and_a_thousand_classes() {
    for c in [10, 1000] {
        for n in [3, 513] {
            for e in [0.0, 0.1] {
                let test = format!("cross_entropy C={c} N={n} smoothing={e}");
                same_on_both(&test, &move |s| loss_and_grad(s, (n, c), 8.0, e));
            }
        }
    }
}

#[test]
fn cross_entropy_matches_the_cpu_at_logits_of_a_thousand() {
    for e in [0.0, 0.1] {
        let test = format!("cross_entropy large logits smoothing={e}");
        same_on_both(&test, &move |s| loss_and_grad(s, (65, 1000), 1000.0, e));
    }
}

#[test]
fn cross_entropy_repeats_bit_for_bit_on_the_gpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(first) = gpu("cross_entropy repeats") else {
        return;
    };
    let Some(second) = gpu("cross_entropy repeats") else {
        return;
    };
    let body: &Body = &|s| loss_and_grad(s, (2049, 1000), 8.0, 0.1);
    let (a, b) = (run(first, body), run(second, body));
    for ((name, a), (_, b)) in a.iter().zip(&b) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a), bits(b), "cross_entropy: {name} differs between two runs");
    }
}

#[test]
fn a_label_past_the_classes_makes_the_gpu_loss_nan() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(device) = gpu("cross_entropy bad label") else {
        return;
    };
    let mut engine = Engine::new(device, 1 << 20).expect("arena");
    let loss = engine
        .step(|s| {
            let x = s.input("logits", Shape::new(&[3, 10]), &values(30, 5))?;
            let labels = s.labels(&[1, 10, 2])?;
            let loss = x.cross_entropy(s, labels, CrossEntropyArgs::default())?;
            s.scalar(loss)
        })
        .expect("step");
    assert!(loss.is_nan(), "a label of 10 with 10 classes gave the loss {loss}");
}
