use super::keep;
use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

#[test]
fn dropout_gradient_matches_finite_differences() {
    let shape = Shape::new(&[6, 10]);
    check(&[shape], &[values(60, 31, -1.0, 1.0)], &[0], &|s, x| {
        x[0].dropout(s, 0.5, 1234)
    });
}

#[test]
fn dropout_keeps_about_half_and_scales_by_two() {
    let n = 20_000;
    let kept = (0..n).filter(|&i| keep(7, i, 0.5)).count();
    assert!((kept as f64 / n as f64 - 0.5).abs() < 0.02, "kept {kept} of {n}");
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let out = engine
        .step(|s| {
            let x = s.input("x", Shape::new(&[1000]), &[1.0; 1000])?;
            let y = x.dropout(s, 0.5, 7)?;
            let mut out = vec![0.0; 1000];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .unwrap();
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, if keep(7, i as u64, 0.5) { 2.0 } else { 0.0 });
    }
}

#[test]
fn different_seeds_draw_different_masks() {
    let a: Vec<bool> = (0..256).map(|i| keep(1, i, 0.5)).collect();
    let b: Vec<bool> = (0..256).map(|i| keep(2, i, 0.5)).collect();
    assert_ne!(a, b);
}

#[test]
fn a_per_step_seed_is_the_fixed_seed_of_that_step() {
    use super::DropoutSeed;
    use crate::ops::cursor::{step_seed, StepCursor};
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let cursor = StepCursor::new(&mut engine.persistent()).unwrap();
    let x = values(500, 3, 0.5, 1.5);
    let run = |engine: &mut crate::Engine, seed: DropoutSeed| {
        engine
            .step(|s| {
                let t = s.input("x", Shape::new(&[500]), &x)?;
                let y = t.dropout_seeded(s, 0.5, seed)?;
                let mut out = vec![0.0; 500];
                s.read(y, &mut out)?;
                Ok(out)
            })
            .unwrap()
    };
    cursor.set(&mut engine, 0, 17).unwrap();
    let per_step = run(
        &mut engine,
        DropoutSeed::PerStep {
            base: 9,
            cursor,
            first: 0,
        },
    );
    let fixed = run(&mut engine, DropoutSeed::Fixed(step_seed(9, 17)));
    assert_eq!(per_step, fixed);
    cursor.set(&mut engine, 0, 18).unwrap();
    assert_ne!(
        run(
            &mut engine,
            DropoutSeed::PerStep {
                base: 9,
                cursor,
                first: 0
            }
        ),
        fixed
    );
}

/// A channels-last tensor keeps its layout, and is masked by memory index.
#[test]
fn channels_last_dropout_keeps_the_layout() {
    use crate::tensor::Layout;
    let shape = Shape::new(&[2, 3, 4, 5]);
    check(&[shape], &[values(120, 32, -1.0, 1.0)], &[0], &|s, x| {
        let x = x[0].to_layout(s, Layout::Nhwc)?;
        let y = x.dropout(s, 0.5, 1234)?;
        assert_eq!(y.layout(), Layout::Nhwc);
        y.to_layout(s, Layout::Nchw)
    });
}
