//! The step memory plan on the reference model: no two buffers alive at the
//! same time share a byte, the plan is within 5% of the lower bound, and
//! training follows the same path with and without it.

use bumpgrad::backend::{Device, DeviceRequest};
use bumpgrad::data::MnistHost;
use bumpgrad::memory::StepPlan;
use bumpgrad::train::{measure, train, Quiet, TrainConfig};

fn config(batch: usize) -> TrainConfig {
    TrainConfig {
        device: DeviceRequest::Cpu,
        batch,
        epochs: 1,
        threads: 2,
        data_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into(),
        train_limit: Some(2050),
        test_limit: Some(1010),
        poison_step: Some(true),
        ..TrainConfig::default()
    }
}

fn plans(batch: usize) -> Vec<StepPlan> {
    let cfg = config(batch);
    let mut host = MnistHost::load(&cfg.data_dir).unwrap();
    host.limit_train(2050).unwrap();
    host.limit_test(1010).unwrap();
    measure(&cfg, &host, &Device::cpu(2).unwrap()).unwrap().plans
}

#[test]
fn buffers_alive_together_never_share_bytes_and_the_peak_is_near_the_bound() {
    for batch in [100, 1000] {
        let plans = plans(batch);
        // A full and a last, shorter step of training and of evaluation.
        assert_eq!(plans.len(), 4, "batch {batch}");
        for plan in &plans {
            for (i, a) in plan.bufs.iter().enumerate() {
                for b in &plan.bufs[i + 1..] {
                    if a.life.overlaps(&b.life) && a.size > 0 && b.size > 0 {
                        assert!(
                            a.end() <= b.offset || b.end() <= a.offset,
                            "batch {batch}, plan {}: {a:?} and {b:?} share bytes while both alive",
                            plan.key
                        );
                    }
                }
            }
            assert!(plan.peak >= plan.lower_bound);
            assert!(
                plan.peak as f64 <= 1.05 * plan.lower_bound as f64,
                "batch {batch}, plan {}: peak {} vs lower bound {}",
                plan.key,
                plan.peak,
                plan.lower_bound
            );
            assert!(plan.peak < plan.bump_bytes, "planning saves memory");
        }
    }
}

#[test]
fn training_is_the_same_with_and_without_the_plan() {
    let planned = train(&config(100), &mut Quiet).unwrap();
    let bumped = train(
        &TrainConfig {
            memory_plan: false,
            ..config(100)
        },
        &mut Quiet,
    )
    .unwrap();
    assert_eq!(planned[0].train_loss, bumped[0].train_loss);
    assert_eq!(planned[0].test_accuracy, bumped[0].test_accuracy);
    let (p, b) = (
        planned[0].arena.step_high_water_bytes,
        bumped[0].arena.step_high_water_bytes,
    );
    assert!(p < b, "planned step {p} bytes, bump {b}");
}
