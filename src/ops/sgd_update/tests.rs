use super::*;
use crate::backend::Device;
use crate::ops::cursor::StepCursor;
use crate::tensor::Shape;
use crate::Engine;

struct Setup {
    engine: Engine,
    param: Buf<f32>,
    grad: Buf<f32>,
    velocity: Buf<f32>,
    lr: LrAt,
}

/// A parameter, its gradient and a zero velocity (`n` elements each), and
/// a rate table read at the cursor.
fn setup(param: &[f32], grad: &[f32], rates: &[f32]) -> Setup {
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let mut p = engine.persistent();
    let shape = Shape::new(&[param.len()]);
    let param = p.upload("param", shape, param).unwrap();
    let grad = p.upload("grad", Shape::new(&[grad.len()]), grad).unwrap();
    let velocity = p.zeros::<f32>("velocity", shape).unwrap();
    let table = p.upload("lr", Shape::new(&[rates.len()]), rates).unwrap();
    let cursor = StepCursor::new(&mut p).unwrap();
    Setup {
        engine,
        param,
        grad,
        velocity,
        lr: LrAt::new(table, cursor),
    }
}

impl Setup {
    fn update(&mut self, global_step: u64, velocity: Option<Buf<f32>>, h: SgdHyper) -> Result<()> {
        self.lr.cursor.set(&mut self.engine, 0, global_step).unwrap();
        let (param, grad, lr) = (self.param, self.grad, self.lr);
        self.engine.step(|s| s.sgd_update(param, grad, velocity, lr, h))
    }

    fn read(&mut self, buf: Buf<f32>) -> Vec<f32> {
        let mut out = vec![0.0; buf.len()];
        self.engine.read_persistent(buf, &mut out).unwrap();
        out
    }
}

const NESTEROV: SgdHyper = SgdHyper {
    momentum: 0.5,
    nesterov: true,
    weight_decay: 0.25,
};

// Every figure below is exact in binary, so updates compare bit for bit.

#[test]
fn nesterov_with_weight_decay_follows_pytorchs_rule_at_the_cursors_rate() {
    let mut t = setup(&[2.0, -4.0], &[1.0, 1.0], &[0.5, 0.25]);
    let v = Some(t.velocity);
    // Step 0, lr 0.5: d = g + 0.25 p = [1.5, 0]; v = d; d = d + 0.5 v = [2.25, 0].
    t.update(0, v, NESTEROV).unwrap();
    assert_eq!(t.read(t.velocity), [1.5, 0.0]);
    assert_eq!(t.read(t.param), [2.0 - 0.5 * 2.25, -4.0]);
    // Step 1, lr 0.25, p = [0.875, -4]: d = [1.21875, 0]; v = [0.75 + 1.21875, 0];
    // d = 1.21875 + 0.5 · 1.96875 = 2.203125.
    t.update(1, v, NESTEROV).unwrap();
    assert_eq!(t.read(t.velocity), [1.96875, 0.0]);
    assert_eq!(t.read(t.param), [0.875 - 0.25 * 2.203125, -4.0]);
}

#[test]
fn past_the_tables_end_the_last_rate_holds() {
    let mut t = setup(&[1.0], &[1.0], &[0.5, 0.25]);
    t.update(7, None, SgdHyper::PLAIN).unwrap();
    assert_eq!(t.read(t.param), [0.75]);
    t.update(u32::MAX as u64 + 1, None, SgdHyper::PLAIN).unwrap();
    assert_eq!(t.read(t.param), [0.5], "a global step past 32 bits");
}

#[test]
fn weight_decay_without_momentum_decays_then_steps() {
    let mut t = setup(&[2.0, -2.0], &[0.5, 0.0], &[0.5]);
    let h = SgdHyper {
        weight_decay: 0.5,
        ..SgdHyper::PLAIN
    };
    // d = g + 0.5 p = [1.5, -1]; p -= 0.5 d.
    t.update(0, None, h).unwrap();
    assert_eq!(t.read(t.param), [1.25, -1.5]);
}

/// The arithmetic the MNIST CNN's recorded losses were trained with, as
/// `optim::Sgd` computed it before this op, to the bit.
#[test]
fn without_decay_and_nesterov_the_arithmetic_is_the_old_sgds_bit_for_bit() {
    let n = 3000;
    let p0: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 33.0).collect();
    let g: Vec<f32> = (0..n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 71.0).collect();
    let (lr, mu) = (0.05f32, 0.9f32);
    for momentum in [0.0, mu] {
        let mut t = setup(&p0, &g, &[lr]);
        let (mut p, mut vel) = (p0.clone(), vec![0.0f32; n]);
        let h = SgdHyper {
            momentum,
            ..SgdHyper::PLAIN
        };
        let v = (momentum > 0.0).then_some(t.velocity);
        for step in 0..3 {
            t.update(step, v, h).unwrap();
            for ((p, g), vel) in p.iter_mut().zip(&g).zip(&mut vel) {
                if momentum > 0.0 {
                    *vel = mu * *vel + g;
                    *p -= lr * *vel;
                } else {
                    *p -= lr * g;
                }
            }
            let ours = t.read(t.param);
            let same = ours.iter().zip(&p).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "momentum {momentum}, step {step}: not the old SGD's bits");
        }
    }
}

#[test]
fn bad_inputs_are_refused_before_anything_runs() {
    let mut t = setup(&[1.0, 2.0], &[1.0], &[0.5]);
    let short = t.update(0, None, SgdHyper::PLAIN).unwrap_err().to_string();
    assert!(
        short.contains("gradients as long as the parameters (2 elements), got 1"),
        "{short}"
    );

    let mut t = setup(&[1.0, 2.0], &[1.0, 1.0], &[0.5]);
    let velocity = Some(t.velocity);
    let momentum = SgdHyper {
        momentum: 0.9,
        ..SgdHyper::PLAIN
    };
    let cases: [(Option<Buf<f32>>, SgdHyper, &str); 5] = [
        (None, momentum, "momentum 0.9 needs a velocity buffer"),
        (velocity, SgdHyper::PLAIN, "a velocity buffer without momentum"),
        (
            None,
            SgdHyper {
                nesterov: true,
                ..SgdHyper::PLAIN
            },
            "Nesterov momentum needs a momentum above 0",
        ),
        (
            None,
            SgdHyper {
                weight_decay: -1.0,
                ..SgdHyper::PLAIN
            },
            "weight decay must be 0 or more, got -1",
        ),
        (
            velocity,
            SgdHyper {
                momentum: f32::NAN,
                ..SgdHyper::PLAIN
            },
            "momentum must be 0 or more, got NaN",
        ),
    ];
    for (v, h, expected) in cases {
        let err = t.update(0, v, h).unwrap_err().to_string();
        assert!(err.contains(expected), "{err}");
    }
    // The parameter as its gradient, and an empty rate table.
    let (param, lr) = (t.param, t.lr);
    let aliased = t
        .engine
        .step(|s| s.sgd_update(param, param, None, lr, SgdHyper::PLAIN))
        .unwrap_err()
        .to_string();
    assert!(
        aliased.contains("parameters and gradients in separate buffers"),
        "{aliased}"
    );
    let grad = t.grad;
    let empty = LrAt::new(Buf::default(), lr.cursor);
    let no_rate = t
        .engine
        .step(|s| s.sgd_update(param, grad, None, empty, SgdHyper::PLAIN))
        .unwrap_err()
        .to_string();
    assert!(no_rate.contains("a learning-rate table of 1 to"), "{no_rate}");
    assert_eq!(t.read(t.param), [1.0, 2.0], "a refused update changes nothing");
}
