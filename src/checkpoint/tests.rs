//! The checkpoint format's tests, split by what they test; here, what they
//! share: a sample checkpoint and comparing two by bit pattern.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;
use crate::data::testutil::TempDir;

#[path = "tests_files.rs"]
mod files;
#[path = "tests_format.rs"]
mod format;
#[path = "tests_malformed.rs"]
mod malformed;

const HERE: &str = "test.safetensors";

fn here() -> &'static Path {
    Path::new(HERE)
}

/// Values that a lossy encoding would change: signed zero, infinities, a
/// subnormal, NaNs with payloads.
fn awkward_values() -> Vec<f32> {
    vec![
        0.0,
        -0.0,
        1.5,
        -2.25e-3,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(1),
        f32::from_bits(0x7fc0_0001),
        f32::from_bits(0xffa0_0000),
        f32::MAX,
        f32::MIN_POSITIVE,
        std::f32::consts::PI,
    ]
}

fn sample(step: u64) -> Checkpoint {
    let mut extra = BTreeMap::new();
    extra.insert("rng_state".to_string(), "0x9e3779b97f4a7c15".to_string());
    extra.insert("dropout".to_string(), "seed 7, «unicode» and \"quotes\"\n".to_string());
    Checkpoint {
        epoch: 3,
        step,
        seed: u64::MAX,
        config_json: r#"{"lr":0.05,"momentum":0.9,"batch":100}"#.to_string(),
        extra,
        tensors: vec![
            NamedTensor::new("fc.weight", &[3, 4], awkward_values()),
            NamedTensor::new("fc.bias", &[3], vec![1.0, -1.0, 0.5]),
            NamedTensor::new(momentum_buffer_name("fc.bias"), &[3], vec![0.0; 3]),
            NamedTensor::new("scalar", &[], vec![42.0]),
            NamedTensor::new("empty", &[0, 5], vec![]),
        ],
    }
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// Equality with NaNs compared by bit pattern, ignoring tensor order.
fn assert_same(read: &Checkpoint, written: &Checkpoint) {
    assert_eq!(
        (read.epoch, read.step, read.seed, &read.config_json, &read.extra),
        (
            written.epoch,
            written.step,
            written.seed,
            &written.config_json,
            &written.extra
        )
    );
    assert_eq!(read.tensors.len(), written.tensors.len());
    for t in &written.tensors {
        let r = read.tensor(&t.name).unwrap_or_else(|| panic!("{} missing", t.name));
        assert_eq!(r.shape, t.shape, "{}", t.name);
        assert_eq!(bits(&r.values), bits(&t.values), "{}", t.name);
    }
}

fn ours() -> serde_json::Value {
    json!({"format": FORMAT, "version": "1"})
}
