use crate::train::{DeviceConfig, Pipeline, Quiet, RunConfig, TrainConfig};
use crate::{Error, Setting};

fn mnist(batch: usize, train_limit: usize, test_limit: usize) -> TrainConfig {
    TrainConfig {
        run: RunConfig {
            batch,
            data_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into(),
            train_limit: Some(train_limit),
            test_limit: Some(test_limit),
            ..RunConfig::default()
        },
        device: DeviceConfig::cpu(1),
        ..TrainConfig::default()
    }
}

#[test]
fn epoch_zero_is_an_error_not_an_underflow() {
    let cfg = mnist(100, 200, 100);
    let (mut session, _) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("session");
    assert!(matches!(session.epoch(0, &mut Quiet), Err(Error::Config(_))));
    session.epoch(1, &mut Quiet).expect("epoch 1 runs");
}

#[test]
fn a_batch_larger_than_the_training_set_is_refused_before_anything_is_sized_by_it() {
    for batch in [101, 99_999_999_999, usize::MAX] {
        let cfg = mnist(batch, 100, 100);
        match Pipeline::open(&cfg, None).and_then(Pipeline::build) {
            Err(Error::Setting {
                setting: Setting::Batch,
                problem,
                fix,
            }) => {
                assert!(
                    problem.contains(&format!("a batch of {batch} is larger than the 100 training images")),
                    "{problem}"
                );
                assert_eq!(fix.as_deref(), Some("100 or less"));
            }
            Err(other) => panic!("batch {batch}: {other}"),
            Ok(_) => panic!("batch {batch} was accepted for 100 images"),
        }
    }
    let cfg = mnist(100, 100, 100);
    Pipeline::open(&cfg, None)
        .and_then(Pipeline::build)
        .expect("a batch of the whole training set is fine");
}

#[test]
fn tf32_on_the_cpu_is_a_setting_error_before_the_data_is_read() {
    let mut cfg = TrainConfig::default();
    cfg.device.request = crate::backend::DeviceRequest::Cpu;
    cfg.device.precision = crate::backend::Precision::Tf32;
    cfg.run.data_dir = "/nonexistent/mnist".into();
    match Pipeline::open(&cfg, None) {
        Err(Error::Setting {
            setting: Setting::Precision,
            problem,
            fix,
        }) => {
            assert!(problem.contains("the CPU computes in fp32 only"), "{problem}");
            assert_eq!(fix.as_deref(), Some("fp32"));
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("TF32 was accepted on the CPU"),
    }
}
