use super::*;
use crate::backend::Device;
use crate::ops::cursor::StepCursor;
use crate::tensor::Shape;
use crate::Engine;

struct Setup {
    engine: Engine,
    param: Buf<f32>,
    grad: Buf<f32>,
    m: Buf<f32>,
    v: Buf<f32>,
    lr: LrAt,
}

fn setup(param: &[f32], grad: &[f32], rate: f32) -> Setup {
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let mut p = engine.persistent();
    let shape = Shape::new(&[param.len()]);
    let param = p.upload("param", shape, param).unwrap();
    let grad = p.upload("grad", Shape::new(&[grad.len()]), grad).unwrap();
    let m = p.zeros::<f32>("exp_avg", shape).unwrap();
    let v = p.zeros::<f32>("exp_avg_sq", shape).unwrap();
    let table = p.upload("lr", Shape::new(&[1]), &[rate]).unwrap();
    let cursor = StepCursor::new(&mut p).unwrap();
    Setup {
        engine,
        param,
        grad,
        m,
        v,
        lr: LrAt::new(table, cursor),
    }
}

impl Setup {
    fn update(&mut self, global_step: u64, h: AdamwHyper) -> Result<()> {
        self.lr.cursor.set(&mut self.engine, 0, global_step).unwrap();
        let (param, grad, m, v, lr) = (self.param, self.grad, self.m, self.v, self.lr);
        self.engine.step(|s| s.adamw_update(param, grad, m, v, lr, h))
    }

    fn read(&mut self, buf: Buf<f32>) -> Vec<f32> {
        let mut out = vec![0.0; buf.len()];
        self.engine.read_persistent(buf, &mut out).unwrap();
        out
    }
}

fn close(ours: f32, exact: f64, what: &str) {
    assert!(
        (ours as f64 - exact).abs() <= 1e-6 * exact.abs(),
        "{what}: ours {ours:e}, exactly {exact:e}"
    );
}

/// The update count comes from the cursor: from zero moments, update `t`
/// leaves `m = (1 − β₁)g`, `v = (1 − β₂)g²` and moves `p` (decayed) by
/// `lr · m/(1 − β₁ᵗ) / (√(v/(1 − β₂ᵗ)) + ε)`, computed here in f64.
#[test]
fn the_bias_corrections_count_updates_from_the_cursor() {
    let (p0, g, lr) = ([1.5f32, -0.75, 0.0], [0.5f32, -2.0, 0.25], 0.01f32);
    let h = AdamwHyper::default();
    for global_step in [0u64, 9, 999] {
        let mut s = setup(&p0, &g, lr);
        s.update(global_step, h).unwrap();
        let t = (global_step + 1) as f64;
        let (p, m, v) = (s.read(s.param), s.read(s.m), s.read(s.v));
        for i in 0..3 {
            let g = g[i] as f64;
            let (m1, v1) = ((1.0 - h.beta1) * g, (1.0 - h.beta2) * g * g);
            let m_hat = m1 / (1.0 - h.beta1.powf(t));
            let v_hat = v1 / (1.0 - h.beta2.powf(t));
            let expected =
                p0[i] as f64 * (1.0 - lr as f64 * h.weight_decay) - lr as f64 * m_hat / (v_hat.sqrt() + h.eps);
            let what = |q: &str| format!("update {t}, {q}[{i}]");
            close(m[i], m1, &what("exp_avg"));
            close(v[i], v1, &what("exp_avg_sq"));
            close(p[i], expected, &what("param"));
        }
    }
}

#[test]
fn bad_inputs_are_refused_before_anything_runs() {
    let mut s = setup(&[1.0, 2.0], &[1.0, 1.0], 0.1);
    let with = |f: fn(&mut AdamwHyper)| {
        let mut h = AdamwHyper::default();
        f(&mut h);
        h
    };
    let cases: [(AdamwHyper, &str); 4] = [
        (with(|h| h.beta1 = 1.0), "AdamW beta1 must be in [0, 1), got 1"),
        (with(|h| h.beta2 = -0.5), "AdamW beta2 must be in [0, 1), got -0.5"),
        (with(|h| h.eps = 0.0), "AdamW eps must be positive, got 0"),
        (
            with(|h| h.weight_decay = f64::INFINITY),
            "weight decay must be 0 or more, got inf",
        ),
    ];
    for (h, expected) in cases {
        let err = s.update(0, h).unwrap_err().to_string();
        assert!(err.contains(expected), "{err}");
    }
    let (param, grad, m, lr) = (s.param, s.grad, s.m, s.lr);
    let h = AdamwHyper::default();
    let shared = s
        .engine
        .step(|st| st.adamw_update(param, grad, m, m, lr, h))
        .unwrap_err()
        .to_string();
    assert!(
        shared.contains("exp_avg and exp_avg_sq in separate buffers"),
        "{shared}"
    );
    let short = s
        .engine
        .step(|st| st.adamw_update(param, grad, m, Buf::default(), lr, h))
        .unwrap_err()
        .to_string();
    assert!(
        short.contains("exp_avg_sq as long as the parameters (2 elements), got 0"),
        "{short}"
    );
    assert_eq!(s.read(s.param), [1.0, 2.0], "a refused update changes nothing");
    assert_eq!(s.read(s.m), [0.0, 0.0]);
}
