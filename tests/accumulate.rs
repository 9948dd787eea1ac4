//! A tensor used twice gets the sum of both uses' gradients, on the CPU
//! (the body is shared with the GPU tests: `support/used_twice.rs`).

use bumpgrad::{Device, Engine};

#[path = "support/used_twice.rs"]
mod used_twice;
use used_twice::{COLS, ROWS};

/// `a · b` for row-major `[ROWS, ROWS]` a (transposed first when asked)
/// and `[ROWS, COLS]` b, in f64.
fn product(a: &[f32], transpose: bool, b: &[f32]) -> Vec<f64> {
    let mut out = vec![0.0; ROWS * COLS];
    for i in 0..ROWS {
        for k in 0..ROWS {
            let aik = if transpose { a[k * ROWS + i] } else { a[i * ROWS + k] } as f64;
            for j in 0..COLS {
                out[i * COLS + j] += aik * b[k * COLS + j] as f64;
            }
        }
    }
    out
}

#[test]
fn x_times_x_transposed_gets_the_sum_of_its_input_and_weight_gradients() {
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
    engine.arena_mut().set_poison_step(true);
    let read = engine
        .step(|s| {
            let mut read = Vec::new();
            for (name, t) in used_twice::body(s)? {
                let mut host = vec![0.0; t.shape().numel()];
                s.read(t, &mut host)?;
                read.push((name, host));
            }
            Ok(read)
        })
        .unwrap();
    let (x, g) = (used_twice::x_values(), used_twice::upstream());
    assert_eq!(read[1].0, "x grad");
    let got = &read[1].1;
    // As the input, x receives g · x; as the weight, gᵀ · x.
    let as_input = product(&g, false, &x);
    let as_weight = product(&g, true, &x);
    for i in 0..ROWS * COLS {
        let want = as_input[i] + as_weight[i];
        assert!(
            (got[i] as f64 - want).abs() <= 1e-5,
            "x grad[{i}]: {} vs g·x + gᵀ·x = {want}",
            got[i]
        );
    }
    // Either contribution alone is far from the sum: the check needs both.
    let off = |part: &[f64]| {
        (0..ROWS * COLS)
            .map(|i| (part[i] - got[i] as f64).abs())
            .fold(0.0, f64::max)
    };
    assert!(off(&as_input) > 0.1 && off(&as_weight) > 0.1);
}

/// `w + w` for a parameter `w`: the first gradient lands in `w`'s slot of
/// the gradient slab and the second is added to it there.
#[test]
fn a_parameter_added_to_itself_gets_twice_the_gradient_in_its_slot() {
    use bumpgrad::nn::{Init, ParamStore};
    use bumpgrad::Shape;
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let (_store, w) = ParamStore::build(&mut engine.persistent(), 1, |pb| {
        pb.param("w", Shape::new(&[3]), Init::Constant(0.5))
    })
    .unwrap();
    engine
        .step(|s| {
            let p = s.param(&w);
            let y = p.add(s, p)?;
            let gy = s.input("gy", Shape::new(&[3]), &[1.0, -2.0, 0.25])?;
            s.backward_from(y, gy)?;
            Ok(())
        })
        .unwrap();
    let mut landed = [0.0; 3];
    engine.read_persistent(w.grad(), &mut landed).unwrap();
    assert_eq!(landed, [2.0, -4.0, 0.5]);
}
