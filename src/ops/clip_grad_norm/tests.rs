use super::*;
use crate::backend::Device;
use crate::Engine;

struct Setup {
    engine: Engine,
    grads: [Buf<f32>; 2],
    bufs: ClipBufs,
}

fn setup(a: &[f32], b: &[f32]) -> Setup {
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let mut p = engine.persistent();
    let grads = [
        p.upload("a", Shape::new(&[a.len()]), a).unwrap(),
        p.upload("b", Shape::new(&[b.len()]), b).unwrap(),
    ];
    let bufs = ClipBufs::new(&mut p).unwrap();
    Setup { engine, grads, bufs }
}

impl Setup {
    /// One step's clip over both runs.
    fn clip(&mut self, max_norm: f32) -> Result<()> {
        let (grads, bufs) = (self.grads, self.bufs);
        self.engine.step(|s| {
            for (k, g) in grads.iter().enumerate() {
                s.clip_sum_squares(*g, bufs, k == 0)?;
            }
            s.clip_coefficient(bufs, max_norm)?;
            grads.iter().try_for_each(|g| s.clip_scale(*g, bufs))
        })
    }

    fn read(&mut self, buf: Buf<f32>) -> Vec<f32> {
        let mut out = vec![0.0; buf.len()];
        self.engine.read_persistent(buf, &mut out).unwrap();
        out
    }
}

#[test]
fn every_element_is_in_exactly_one_piece() {
    for n in [0, 1, 5, PIECES - 1, PIECES, PIECES + 1, 3 * PIECES + 7] {
        let mut next = 0;
        for k in 0..PIECES {
            let r = piece(n, k);
            assert_eq!(r.start, next, "n {n}, piece {k}");
            next = r.end;
        }
        assert_eq!(next, n);
    }
}

/// A norm of 13 over both runs (3² + 4² + 12²), clipped to 6.5: the
/// coefficient is PyTorch's f32 `6.5 · 1/(13 + 1e-6)`, every gradient
/// multiplied by it.
#[test]
fn the_norm_spans_every_run_and_the_gradients_are_scaled_to_the_largest_norm() {
    let (a, b) = (vec![3.0, 0.0, -4.0], vec![0.0; 2500]);
    let mut b = b;
    b[1777] = 12.0;
    let mut t = setup(&a, &b);
    t.clip(6.5).unwrap();
    let c = (1.0f32 / (13.0f32 + 1e-6)) * 6.5;
    assert!(c < 0.5 && c > 0.4999999, "{c}");
    assert_eq!(t.read(t.bufs.figures), [13.0, c, 13.0, 1.0]);
    assert_eq!(t.read(t.grads[0]), [3.0 * c, 0.0, -4.0 * c]);
    let scaled = t.read(t.grads[1]);
    assert_eq!(scaled[1777], 12.0 * c);
    assert_eq!(scaled.iter().filter(|&&x| x != 0.0).count(), 1);
    // A second step: the partial sums start over, the figures' sum and
    // count go on.
    t.clip(100.0).unwrap();
    let figures = t.read(t.bufs.figures);
    assert_eq!(figures[1], 1.0, "13c is below 100: no clipping");
    assert!((figures[0] - 13.0 * c).abs() <= 1e-6 * 13.0 * c, "{figures:?}");
    assert_eq!(figures[2], 13.0 + figures[0]);
    assert_eq!(figures[3], 2.0);
    assert_eq!(
        t.read(t.grads[0]),
        [3.0 * c, 0.0, -4.0 * c],
        "a coefficient of 1 changes nothing"
    );
}

/// Many small values: the f64 sums keep the norm to f32's rounding.
#[test]
fn a_long_run_sums_to_its_norm() {
    let a: Vec<f32> = (0..100_003)
        .map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 977.0)
        .collect();
    let exact = a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let mut t = setup(&a, &[0.0]);
    t.clip(1.0).unwrap();
    let figures = t.read(t.bufs.figures);
    assert!(
        ((figures[0] as f64) - exact).abs() <= 6e-8 * exact,
        "{} vs {exact}",
        figures[0]
    );
    let c = (1.0f32 / (figures[0] + 1e-6)) * 1.0;
    assert_eq!(figures[1], c);
    let scaled = t.read(t.grads[0]);
    assert!(scaled.iter().zip(&a).all(|(s, x)| *s == *x * c));
}

#[test]
fn a_non_finite_gradient_makes_every_gradient_nan_as_pytorchs_does() {
    let mut t = setup(&[1.0, f32::NAN], &[2.0]);
    t.clip(1.0).unwrap();
    assert!(
        t.read(t.bufs.figures)[1].is_nan(),
        "the coefficient is NaN, not clamped to 1"
    );
    assert!(t.read(t.grads[1])[0].is_nan());
}

#[test]
fn a_largest_norm_not_above_zero_and_wrong_buffers_are_refused() {
    let mut t = setup(&[1.0], &[1.0]);
    for bad in [0.0, -1.0, f32::INFINITY, f32::NAN] {
        let err = t.clip(bad).unwrap_err().to_string();
        assert!(err.contains("the largest norm must be above 0"), "{err}");
    }
    let (g, bufs) = (t.grads[0], t.bufs);
    let short = ClipBufs {
        partials: g,
        figures: bufs.figures,
    };
    let err = t
        .engine
        .step(|s| s.clip_sum_squares(g, short, true))
        .unwrap_err()
        .to_string();
    assert!(err.contains("1024 partial sums and 4 figures, got 1 and 4"), "{err}");
}
