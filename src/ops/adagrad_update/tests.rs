use super::*;
use crate::backend::Device;
use crate::ops::cursor::StepCursor;
use crate::tensor::Shape;
use crate::Engine;

struct Setup {
    engine: Engine,
    param: Buf<f32>,
    grad: Buf<f32>,
    sum: Buf<f32>,
    lr: LrAt,
}

fn setup(param: &[f32], grad: &[f32], sum: &[f32], rate: f32) -> Setup {
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let mut p = engine.persistent();
    let param = p.upload("param", Shape::new(&[param.len()]), param).unwrap();
    let grad = p.upload("grad", Shape::new(&[grad.len()]), grad).unwrap();
    let sum = p.upload("sum", Shape::new(&[sum.len()]), sum).unwrap();
    let table = p.upload("lr", Shape::new(&[1]), &[rate]).unwrap();
    let cursor = StepCursor::new(&mut p).unwrap();
    Setup {
        engine,
        param,
        grad,
        sum,
        lr: LrAt::new(table, cursor),
    }
}

impl Setup {
    fn update(&mut self, global_step: u64, h: AdagradHyper) -> Result<()> {
        self.lr.cursor.set(&mut self.engine, 0, global_step).unwrap();
        let (param, grad, sum, lr) = (self.param, self.grad, self.sum, self.lr);
        self.engine.step(|s| s.adagrad_update(param, grad, sum, lr, h))
    }

    fn read(&mut self, buf: Buf<f32>) -> Vec<f32> {
        let mut out = vec![0.0; buf.len()];
        self.engine.read_persistent(buf, &mut out).unwrap();
        out
    }
}

/// Within 1e-6 of `scale`: an update that cancels to near zero keeps only
/// the absolute precision of its operands.
fn close(ours: f32, exact: f64, scale: f64, what: &str) {
    assert!(
        (ours as f64 - exact).abs() <= 1e-6 * scale.max(exact.abs()),
        "{what}: ours {ours:e}, exactly {exact:e}"
    );
}

/// Every figure exact in binary: `d = g + wd·p`, `sum += d²`,
/// `p −= clr · d / (√sum + ε)` with `clr = lr / (1 + (t − 1)·decay)` and
/// `t` the cursor's global step + 1.
#[test]
fn the_rate_decays_with_the_cursors_update_count_and_the_decay_feeds_the_sum() {
    let h = AdagradHyper {
        lr_decay: 0.5,
        weight_decay: 0.25,
        eps: 0.5,
    };
    let mut t = setup(&[4.0, -2.0, 0.0], &[2.0, 0.5, 0.0], &[0.25, 0.0, 0.0], 1.0);
    // Update 3 (global step 2): clr = 1 / (1 + 2·0.5) = 0.5.
    // d = [2 + 1, 0.5 − 0.5, 0] = [3, 0, 0]; sum = [9.25, 0, 0].
    t.update(2, h).unwrap();
    assert_eq!(t.read(t.sum), [9.25, 0.0, 0.0]);
    let p = t.read(t.param);
    close(p[0], 4.0 - 0.5 * 3.0 / (9.25f64.sqrt() + 0.5), 0.0, "p[0]");
    assert_eq!(p[1..], [-2.0, 0.0], "a zero d moves nothing, a zero sum included");
}

/// Several updates against the rule in f64: within 1e-6 of it.
#[test]
fn repeated_updates_follow_pytorchs_rule() {
    let n = 1000;
    let p0: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 33.0).collect();
    let g: Vec<f32> = (0..n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 71.0).collect();
    let h = AdagradHyper {
        lr_decay: 0.1,
        weight_decay: 1e-2,
        eps: 1e-3,
    };
    let mut t = setup(&p0, &g, &vec![0.1; n], 0.05);
    let (mut p, mut sum): (Vec<f64>, Vec<f64>) = (p0.iter().map(|&v| v as f64).collect(), vec![0.1; n]);
    for step in 0..4u64 {
        t.update(step, h).unwrap();
        let clr = 0.05f32 as f64 / (1.0 + step as f64 * 0.1);
        for i in 0..n {
            let d = g[i] as f64 + 1e-2 * p[i];
            sum[i] += d * d;
            p[i] -= clr * d / (sum[i].sqrt() + 1e-3);
        }
    }
    let (ours, ours_sum) = (t.read(t.param), t.read(t.sum));
    for i in 0..n {
        close(ours[i], p[i], p0[i].abs() as f64, &format!("param {i}"));
        close(ours_sum[i], sum[i], 0.0, &format!("sum {i}"));
    }
}

#[test]
fn bad_inputs_are_refused_before_anything_runs() {
    let mut t = setup(&[1.0, 2.0], &[1.0, 1.0], &[0.0], 0.5);
    let short = t.update(0, AdagradHyper::default()).unwrap_err().to_string();
    assert!(
        short.contains("sum as long as the parameters (2 elements), got 1"),
        "{short}"
    );
    let mut t = setup(&[1.0, 2.0], &[1.0, 1.0], &[0.0, 0.0], 0.5);
    let d = AdagradHyper::default();
    for (h, expected) in [
        (AdagradHyper { eps: 0.0, ..d }, "Adagrad eps must be positive"),
        (AdagradHyper { eps: 1e-40, ..d }, "got 1e-40"),
        (
            AdagradHyper { lr_decay: -0.1, ..d },
            "Adagrad lr decay must be 0 or more, got -0.1",
        ),
        (
            AdagradHyper {
                weight_decay: f64::NAN,
                ..d
            },
            "Adagrad weight decay must be 0 or more, got NaN",
        ),
    ] {
        let err = t.update(0, h).unwrap_err().to_string();
        assert!(err.contains(expected), "{err}");
    }
    let (param, sum, lr) = (t.param, t.sum, t.lr);
    let aliased = t
        .engine
        .step(|s| s.adagrad_update(param, sum, sum, lr, d))
        .unwrap_err()
        .to_string();
    assert!(aliased.contains("gradients and sum in separate buffers"), "{aliased}");
    assert_eq!(t.read(t.param), [1.0, 2.0], "a refused update changes nothing");
}
