use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;
use crate::data::testutil::TempDir;
use crate::models::MnistCnn;
use crate::nn::{Input, ParamStore};
use crate::{Device, Engine};

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

/// Where the data section starts in a well-formed file.
fn data_start(bytes: &[u8]) -> usize {
    8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize
}

/// A safetensors file with exactly this header and data.
fn raw(header: serde_json::Value, data: &[u8]) -> Vec<u8> {
    let header = header.to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn ours() -> serde_json::Value {
    json!({"format": FORMAT, "version": "1"})
}

/// The MNIST CNN's parameters, declared in a store in `arena`.
fn mnist_store(engine: &mut Engine, seed: u64) -> ParamStore {
    let input = Input {
        example: MnistCnn::INPUT,
        classes: 10,
    };
    let choice = MnistCnn::choice();
    ParamStore::build(&mut engine.persistent(), seed, |pb| choice.build(input, pb))
        .unwrap()
        .0
}

/// The MNIST CNN's parameters as the model initialises them, read out of an
/// arena, with a momentum buffer for each.
fn mnist_checkpoint() -> Checkpoint {
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let store = mnist_store(&mut engine, 42);
    let mut tensors = Vec::new();
    for p in store.params() {
        let mut values = vec![0.0; p.shape().numel()];
        engine.read_persistent(p.buf(), &mut values).unwrap();
        let momentum = values.iter().map(|v| v * 0.1).collect();
        tensors.push(NamedTensor::new(store.name(&p), p.shape().dims(), values));
        tensors.push(NamedTensor::new(
            momentum_buffer_name(store.name(&p)),
            p.shape().dims(),
            momentum,
        ));
    }
    Checkpoint {
        epoch: 1,
        step: 600,
        seed: 42,
        config_json: r#"{"epochs":4,"batch":100,"lr":0.05,"momentum":0.9,"seed":42}"#.to_string(),
        extra: BTreeMap::from([("dropout_seed".to_string(), "12345".to_string())]),
        tensors,
    }
}

/// `model.state_dict()` of bench/pytorch_mnist.py's `Net`, in order.
const PYTORCH_STATE_DICT: [(&str, &[usize]); 6] = [
    ("conv1.weight", &[10, 1, 5, 5]),
    ("conv2.weight", &[20, 10, 5, 5]),
    ("fc1.weight", &[50, 320]),
    ("fc1.bias", &[50]),
    ("fc2.weight", &[10, 50]),
    ("fc2.bias", &[10]),
];

// ---- the format ---------------------------------------------------------

#[test]
fn round_trip_is_bit_identical() {
    let ckpt = sample(17);
    let bytes = encode(&ckpt).unwrap();
    let read = parse(&bytes, here()).unwrap();
    assert_same(&read, &ckpt);
    // Sorted by name, whatever the order written.
    let names: Vec<&str> = read.tensors.iter().map(|t| t.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

#[test]
fn the_checksum_is_canonical() {
    // The crate keeps metadata in a HashMap, so two encodings may order the
    // header differently; the checksum must not care.
    let checksum = |bytes: &[u8]| {
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..data_start(bytes)]).unwrap();
        header["__metadata__"]["checksum"].as_str().unwrap().to_string()
    };
    let ckpt = sample(5);
    let first = checksum(&encode(&ckpt).unwrap());
    assert!(first.starts_with("sha256:") && first.len() == 7 + 64, "{first}");
    assert_eq!(checksum(&encode(&ckpt).unwrap()), first);
    let mut other = ckpt.clone();
    other.epoch += 1;
    assert_ne!(checksum(&encode(&other).unwrap()), first);
}

#[test]
fn the_safetensors_crate_reads_what_we_write() {
    let ckpt = sample(9);
    let bytes = encode(&ckpt).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let view = st.tensor("fc.weight").unwrap();
    assert_eq!(view.dtype(), safetensors::Dtype::F32);
    assert_eq!(view.shape(), &[3, 4]);
    let values: Vec<u32> = view
        .data()
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(values, bits(&awkward_values()));
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().as_ref().unwrap();
    assert_eq!(meta["format"], FORMAT);
    assert_eq!(meta["version"], "1");
    assert_eq!(meta["step"], "9");
    assert_eq!(meta["seed"], u64::MAX.to_string());
    assert_eq!(meta["config"], ckpt.config_json);
    assert_eq!(meta["rng_state"], ckpt.extra["rng_state"]);
}

#[test]
fn mnist_names_and_shapes_match_a_pytorch_state_dict() {
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let store = mnist_store(&mut engine, 1);
    let params: Vec<(&str, Vec<usize>)> = store
        .params()
        .map(|p| (store.name(&p), p.shape().dims().to_vec()))
        .collect();
    let expected: Vec<(&str, Vec<usize>)> = PYTORCH_STATE_DICT.iter().map(|(n, s)| (*n, s.to_vec())).collect();
    assert_eq!(params, expected);

    let ckpt = mnist_checkpoint();
    let bytes = encode(&ckpt).unwrap();
    let read = parse(&bytes, here()).unwrap();
    assert_same(&read, &ckpt);
    for (name, shape) in PYTORCH_STATE_DICT {
        assert_eq!(read.tensor(name).unwrap().shape, shape);
        let momentum = read.tensor(&format!("optimizer.{name}.momentum_buffer")).unwrap();
        assert_eq!(momentum.shape, shape);
    }
    assert_eq!(read.tensors.len(), 12);

    // For scripts/check_checkpoint_torch.py: a real file to load in PyTorch.
    if let Some(dir) = std::env::var_os("BUMPGRAD_CHECKPOINT_SAMPLE_DIR") {
        let path = write_atomic(Path::new(&dir), &ckpt, 1).unwrap();
        eprintln!("wrote {}", path.display());
    }
}

/// A change to a valid checkpoint.
type Edit<'a> = &'a dyn Fn(&mut Checkpoint);

#[test]
fn encode_refuses_what_would_not_read_back() {
    let with = |f: &dyn Fn(&mut Checkpoint)| {
        let mut c = sample(1);
        f(&mut c);
        encode(&c)
    };
    let cases: [(&str, Edit<'_>); 6] = [
        ("twice", &|c| {
            c.tensors.push(NamedTensor::new("fc.bias", &[1], vec![0.0]))
        }),
        ("values", &|c| c.tensors[0].values.pop().map(drop).unwrap()),
        ("values", &|c| {
            c.tensors.push(NamedTensor::new("huge", &[usize::MAX, 2], vec![]))
        }),
        ("reserved", &|c| c.tensors.push(NamedTensor::new("", &[0], vec![]))),
        ("reserved", &|c| {
            c.tensors.push(NamedTensor::new("__metadata__", &[0], vec![]))
        }),
        ("reserved", &|c| {
            c.extra.insert("step".into(), "1".into());
        }),
    ];
    for (word, f) in cases {
        match with(f) {
            Err(e @ CheckpointError::Invalid { .. }) => assert!(e.to_string().contains(word), "{e}"),
            other => panic!("expected Invalid ({word}), got {other:?}"),
        }
    }
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = encode(&sample(2)).unwrap();
    for len in 0..bytes.len() {
        let err = parse(&bytes[..len], here()).unwrap_err();
        assert_eq!(err.path(), Some(here()), "{err}");
        if len >= data_start(&bytes) || len < 8 {
            assert!(matches!(err, CheckpointError::Truncated { .. }), "cut at {len}: {err}");
        }
    }
    // The real model, at a prime stride through the data and at every byte
    // of its header.
    let bytes = encode(&mnist_checkpoint()).unwrap();
    let cuts = (0..data_start(&bytes)).chain((data_start(&bytes)..bytes.len()).step_by(97));
    for len in cuts {
        assert!(parse(&bytes[..len], here()).is_err(), "cut at {len}");
    }
}

#[test]
fn a_flipped_data_bit_fails_the_checksum() {
    let bytes = encode(&sample(3)).unwrap();
    for at in data_start(&bytes)..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 1 << (at % 8);
        match parse(&bad, here()) {
            Err(CheckpointError::Checksum { path, expected, found }) => {
                assert_eq!(path, here());
                assert_ne!(expected, found);
            }
            other => panic!("flip at {at}: expected Checksum, got {other:?}"),
        }
    }
}

#[test]
fn every_flipped_header_bit_is_an_error() {
    let bytes = encode(&sample(4)).unwrap();
    for at in 0..data_start(&bytes) {
        for bit in 0..8 {
            let mut bad = bytes.clone();
            bad[at] ^= 1 << bit;
            let result = parse(&bad, here());
            assert!(result.is_err(), "flip bit {bit} at {at} went unnoticed");
        }
    }
}

#[test]
fn appended_bytes_are_an_error() {
    let mut bytes = encode(&sample(4)).unwrap();
    bytes.extend_from_slice(b"junk");
    assert!(matches!(
        parse(&bytes, here()),
        Err(CheckpointError::TrailingBytes { expected_bytes, found_bytes, .. }) if found_bytes == expected_bytes + 4
    ));
}

/// What is wrong, the file, and whether an error is the expected one.
type Malformed = (&'static str, Vec<u8>, fn(&CheckpointError) -> bool);

#[test]
fn malformed_files_get_the_error_that_names_the_problem() {
    use CheckpointError as E;
    let f32s = |n: usize| vec![0u8; 4 * n];
    let t = |dtype: &str, shape: serde_json::Value, begin: u64, end: u64| json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, end]});
    let full = json!({"format": FORMAT, "version": "1", "epoch": "1", "step": "2", "seed": "3", "config": "{}"});
    let with_meta = |extra: serde_json::Value| {
        let mut m = full.clone();
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        m
    };
    let cases: Vec<Malformed> = vec![
        ("zip", b"PK\x03\x04\x14\x00\x00\x00\x08\x00".to_vec(), |e| {
            matches!(e, E::NotSafetensors { .. })
        }),
        ("short", b"\x10\x00\x00".to_vec(), |e| {
            matches!(
                e,
                E::Truncated {
                    expected_bytes: 8,
                    found_bytes: 3,
                    ..
                }
            )
        }),
        ("empty header", 0u64.to_le_bytes().to_vec(), |e| {
            matches!(e, E::Header { .. })
        }),
        ("huge length", [&u64::MAX.to_le_bytes()[..], b"{}"].concat(), |e| {
            matches!(
                e,
                E::Truncated {
                    expected_bytes: u64::MAX,
                    found_bytes: 10,
                    ..
                }
            )
        }),
        ("not json", [&5u64.to_le_bytes()[..], b"{oops"].concat(), |e| {
            matches!(e, E::Header { .. })
        }),
        ("json array", raw(json!([1, 2]), &[]), |e| {
            matches!(e, E::NotSafetensors { .. })
        }),
        (
            "no metadata",
            raw(json!({"w": t("F32", json!([1]), 0, 4)}), &f32s(1)),
            |e| matches!(e, E::WrongFormat { found: None, .. }),
        ),
        (
            "other format",
            raw(json!({"__metadata__": {"format": "pt"}}), &[]),
            |e| matches!(e, E::WrongFormat { found: Some(f), .. } if f == "pt"),
        ),
        (
            "metadata not strings",
            raw(json!({"__metadata__": {"format": 1}}), &[]),
            |e| matches!(e, E::Header { .. }),
        ),
        (
            "version 2",
            raw(json!({"__metadata__": {"format": FORMAT, "version": "2"}}), &[]),
            |e| matches!(e, E::UnsupportedVersion { found, .. } if found == "2"),
        ),
        (
            "no version",
            raw(json!({"__metadata__": {"format": FORMAT}}), &[]),
            |e| matches!(e, E::MissingMetadata { key: "version", .. }),
        ),
        (
            "f16",
            raw(
                json!({"__metadata__": ours(), "w": t("F16", json!([2]), 0, 4)}),
                &f32s(1),
            ),
            |e| matches!(e, E::NotF32 { name, dtype, .. } if name == "w" && dtype == "F16"),
        ),
        (
            "unknown dtype",
            raw(
                json!({"__metadata__": ours(), "w": t("Q4", json!([1]), 0, 4)}),
                &f32s(1),
            ),
            |e| matches!(e, E::NotF32 { .. }),
        ),
        (
            "shape",
            raw(
                json!({"__metadata__": ours(), "w": t("F32", json!([2]), 0, 4)}),
                &f32s(1),
            ),
            |e| matches!(e, E::ShapeMismatch { name, expected_bytes: Some(8), found_bytes: 4, .. } if name == "w"),
        ),
        (
            "shape overflow",
            raw(
                json!({"__metadata__": ours(), "w": t("F32", json!([u64::MAX, 2]), 0, 4)}),
                &f32s(1),
            ),
            |e| {
                matches!(
                    e,
                    E::ShapeMismatch {
                        expected_bytes: None,
                        ..
                    }
                )
            },
        ),
        (
            "end before begin",
            raw(
                json!({"__metadata__": ours(), "w": t("F32", json!([0]), 4, 0)}),
                &f32s(1),
            ),
            |e| matches!(e, E::ShapeMismatch { .. }),
        ),
        (
            "gap",
            raw(
                json!({"__metadata__": ours(), "a": t("F32", json!([1]), 0, 4), "b": t("F32", json!([1]), 8, 12)}),
                &f32s(3),
            ),
            |e| matches!(e, E::Layout { reason, .. } if reason.contains("gap")),
        ),
        (
            "overlap",
            raw(
                json!({"__metadata__": ours(), "a": t("F32", json!([2]), 0, 8), "b": t("F32", json!([2]), 4, 12)}),
                &f32s(3),
            ),
            |e| matches!(e, E::Layout { reason, .. } if reason.contains("overlaps")),
        ),
        (
            "unknown field",
            raw(
                json!({"__metadata__": ours(), "w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0], "x": 1}}),
                &[],
            ),
            |e| matches!(e, E::Header { .. }),
        ),
        (
            "data too short",
            raw(
                json!({"__metadata__": ours(), "w": t("F32", json!([2]), 0, 8)}),
                &f32s(1),
            ),
            |e| matches!(e, E::Truncated { .. }),
        ),
        ("no epoch", raw(json!({"__metadata__": ours()}), &[]), |e| {
            matches!(e, E::MissingMetadata { key: "epoch", .. })
        }),
        (
            "signed epoch",
            raw(json!({"__metadata__": with_meta(json!({"epoch": "+1"}))}), &[]),
            |e| matches!(e, E::BadMetadata { key: "epoch", .. }),
        ),
        (
            "epoch overflow",
            raw(
                json!({"__metadata__": with_meta(json!({"step": "18446744073709551616"}))}),
                &[],
            ),
            |e| matches!(e, E::BadMetadata { key: "step", .. }),
        ),
        ("no checksum", raw(json!({"__metadata__": full.clone()}), &[]), |e| {
            matches!(e, E::MissingMetadata { key: "checksum", .. })
        }),
        (
            "checksum form",
            raw(json!({"__metadata__": with_meta(json!({"checksum": "md5:00"}))}), &[]),
            |e| matches!(e, E::BadMetadata { key: "checksum", .. }),
        ),
        (
            "checksum value",
            raw(
                json!({"__metadata__": with_meta(json!({"checksum": format!("sha256:{}", "0".repeat(64))}))}),
                &[],
            ),
            |e| matches!(e, E::Checksum { .. }),
        ),
    ];
    let dir = TempDir::new("ckpt-malformed");
    for (what, bytes, expected) in cases {
        // Through the file API too: every error names the file.
        let path = dir.write("bad.safetensors", &bytes);
        for err in [parse(&bytes, &path).unwrap_err(), read(&path).unwrap_err()] {
            assert!(expected(&err), "{what}: got {err:?}");
            assert_eq!(err.path(), Some(path.as_path()), "{what}");
            assert!(err.to_string().contains(&*path.to_string_lossy()), "{what}: {err}");
        }
    }
}

#[test]
fn a_key_twice_in_the_header_is_an_error() {
    // JSON maps would keep one of the two silently; a header with a key
    // twice is corrupt.
    let frame = |header: &str, data: &[u8]| {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    };
    let meta = r#""__metadata__":{"format":"bumpgrad-checkpoint","version":"1"}"#;
    let w = r#""w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}"#;
    for header in [
        format!("{{{meta},{w},{w}}}"),
        format!("{{{meta},{meta}}}"),
        r#"{"__metadata__":{"format":"bumpgrad-checkpoint","format":"bumpgrad-checkpoint","version":"1"}}"#.to_string(),
    ] {
        match parse(&frame(&header, &[0; 4]), here()) {
            Err(CheckpointError::Header { reason, .. }) => assert!(reason.contains("appears twice"), "{reason}"),
            other => panic!("{header}: expected Header, got {other:?}"),
        }
    }
}

#[test]
fn a_header_reaching_past_usize_max_is_an_error() {
    // Regression: eight tensors of 2^61 - 4 bytes each, back to back, make
    // the safetensors crate's reader compute `end + 8 + n` past usize::MAX
    // (a panic with overflow checks); ours must just say "truncated".
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), ours());
    let size = (1u64 << 61) - 4;
    for i in 0..8u64 {
        let t = json!({"dtype": "F32", "shape": [size / 4], "data_offsets": [i * size, (i + 1) * size]});
        header.insert(format!("t{i}"), t);
    }
    let bytes = raw(serde_json::Value::Object(header), &[0; 16]);
    assert!(matches!(parse(&bytes, here()), Err(CheckpointError::Truncated { .. })));
}

#[test]
fn reading_a_missing_file_names_it() {
    let dir = TempDir::new("ckpt-missing-file");
    let path = dir.path().join("ckpt-000000000001.safetensors");
    match read(&path) {
        Err(CheckpointError::Read { path: p, source }) => {
            assert_eq!(p, path);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Read, got {other:?}"),
    }
}

// ---- files in a directory -----------------------------------------------

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn file_names_sort_by_step_and_parse_back() {
    assert_eq!(file_name(42), "ckpt-000000000042.safetensors");
    assert_eq!(step_of("ckpt-000000000042.safetensors"), Some(42));
    assert_eq!(step_of(&file_name(u64::MAX)), Some(u64::MAX));
    for other in [
        "ckpt-42.safetensors",
        "ckpt-000000000042.safetensors.tmp",
        "ckpt-+00000000042.safetensors",
        "ckpt-00000000004x.safetensors",
        "ckpt-000000000042.pt",
        "notes.txt",
        "ckpt-99999999999999999999.safetensors",
    ] {
        assert_eq!(step_of(other), None, "{other}");
    }
}

#[test]
fn write_atomic_then_read_round_trips() {
    let dir = TempDir::new("ckpt-write");
    let target = dir.path().join("nested/run");
    let ckpt = sample(1234);
    let path = write_atomic(&target, &ckpt, 3).unwrap();
    assert_eq!(path, target.join("ckpt-000000001234.safetensors"));
    assert_same(&read(&path).unwrap(), &ckpt);
    assert_eq!(names_in(&target), ["ckpt-000000001234.safetensors"]);
    // Same step again: replaced in place, atomically.
    let mut again = ckpt.clone();
    again.epoch = 4;
    write_atomic(&target, &again, 3).unwrap();
    assert_eq!(read(&path).unwrap().epoch, 4);
}

#[test]
fn pruning_keeps_the_newest_k_and_the_one_just_written() {
    let dir = TempDir::new("ckpt-prune");
    let unrelated = ["ckpt-7.safetensors", "notes.txt", "ckpt-000000000001.pt"];
    for name in unrelated {
        dir.write(name, b"not ours");
    }
    for step in 1..=6 {
        write_atomic(dir.path(), &sample(step), 3).unwrap();
    }
    let expect = |steps: &[u64]| {
        let mut names: Vec<String> = steps.iter().map(|&s| file_name(s)).collect();
        names.extend(unrelated.iter().map(|s| s.to_string()));
        names.sort();
        names
    };
    assert_eq!(names_in(dir.path()), expect(&[4, 5, 6]));
    // An older step (after resuming from an older checkpoint) is kept
    // beside the newest three, never deleted right after being written.
    write_atomic(dir.path(), &sample(2), 3).unwrap();
    assert_eq!(names_in(dir.path()), expect(&[2, 4, 5, 6]));
    write_atomic(dir.path(), &sample(7), 1).unwrap();
    assert_eq!(names_in(dir.path()), expect(&[7]));
    write_atomic(dir.path(), &sample(8), 0).unwrap();
    assert_eq!(names_in(dir.path()), expect(&[8]));
}

#[test]
fn latest_valid_takes_the_newest_good_checkpoint() {
    let dir = TempDir::new("ckpt-latest");
    assert!(matches!(
        latest_valid(&dir.path().join("nope")),
        Err(CheckpointError::MissingDir { dir: d }) if d == dir.path().join("nope")
    ));
    assert!(latest_valid(dir.path()).unwrap().is_none());
    dir.write("notes.txt", b"unrelated");
    assert!(latest_valid(dir.path()).unwrap().is_none());

    for step in [10, 20, 30] {
        write_atomic(dir.path(), &sample(step), 5).unwrap();
    }
    let found = latest_valid(dir.path()).unwrap().unwrap();
    assert_eq!((found.checkpoint.step, found.skipped.len()), (30, 0));
    assert_same(&found.checkpoint, &sample(30));

    // Damage the newest in its data and the next in its length: both are
    // skipped, newest first, with why.
    let newest = dir.path().join(file_name(30));
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&newest, &bytes).unwrap();
    let second = dir.path().join(file_name(20));
    let bytes = std::fs::read(&second).unwrap();
    std::fs::write(&second, &bytes[..bytes.len() / 2]).unwrap();

    let found = latest_valid(dir.path()).unwrap().unwrap();
    assert_eq!(found.path, dir.path().join(file_name(10)));
    assert_eq!(found.checkpoint.step, 10);
    let skipped: Vec<&PathBuf> = found.skipped.iter().map(|(p, _)| p).collect();
    assert_eq!(skipped, [&newest, &second]);
    assert!(matches!(found.skipped[0].1, CheckpointError::Checksum { .. }));
    assert!(matches!(found.skipped[1].1, CheckpointError::Truncated { .. }));

    // A good file under another step's name is not taken for that step.
    std::fs::copy(dir.path().join(file_name(10)), dir.path().join(file_name(40))).unwrap();
    let found = latest_valid(dir.path()).unwrap().unwrap();
    assert_eq!(found.checkpoint.step, 10);
    assert!(matches!(
        found.skipped[0].1,
        CheckpointError::StepMismatch {
            named: 40,
            recorded: 10,
            ..
        }
    ));

    // Nothing readable at all: an error listing every file, not a fresh start.
    std::fs::write(dir.path().join(file_name(10)), b"").unwrap();
    match latest_valid(dir.path()) {
        Err(CheckpointError::NoValidCheckpoint { dir: d, skipped }) => {
            assert_eq!(d, dir.path());
            assert_eq!(skipped.len(), 4);
        }
        other => panic!("expected NoValidCheckpoint, got {other:?}"),
    }
}

#[test]
fn a_crashed_write_leaves_a_tmp_that_readers_ignore_and_the_next_write_removes() {
    let dir = TempDir::new("ckpt-crash");
    write_atomic(dir.path(), &sample(1), 3).unwrap();
    // What a crash between write and rename leaves: half a file under the
    // temporary name of a newer step.
    let whole = encode(&sample(2)).unwrap();
    let tmp = dir.write("ckpt-000000000002.safetensors.tmp", &whole[..whole.len() / 2]);
    let found = latest_valid(dir.path()).unwrap().unwrap();
    assert_eq!((found.checkpoint.step, found.skipped.len()), (1, 0));

    write_atomic(dir.path(), &sample(3), 3).unwrap();
    assert!(!tmp.exists());
    assert_eq!(names_in(dir.path()), [file_name(1), file_name(3)]);
}

#[test]
fn a_failed_write_keeps_earlier_checkpoints_and_no_tmp() {
    let dir = TempDir::new("ckpt-fail");
    let good = write_atomic(dir.path(), &sample(1), 3).unwrap();

    // The temporary name cannot be created (a directory is in the way).
    std::fs::create_dir(dir.path().join("ckpt-000000000002.safetensors.tmp")).unwrap();
    match write_atomic(dir.path(), &sample(2), 3) {
        Err(CheckpointError::Write {
            path, stage: "create", ..
        }) => {
            assert_eq!(path, dir.path().join("ckpt-000000000002.safetensors.tmp"))
        }
        other => panic!("expected Write at create, got {other:?}"),
    }
    // The final name cannot be replaced (a non-empty directory is there).
    std::fs::create_dir_all(dir.path().join(file_name(3)).join("x")).unwrap();
    match write_atomic(dir.path(), &sample(3), 3) {
        Err(
            e @ CheckpointError::Write {
                stage: "rename into place",
                ..
            },
        ) => {
            assert_eq!(e.path(), Some(dir.path().join(file_name(3)).as_path()));
            assert!(e.to_string().contains("earlier checkpoints there are intact"), "{e}");
        }
        other => panic!("expected Write at rename, got {other:?}"),
    }
    assert!(!dir.path().join("ckpt-000000000003.safetensors.tmp").exists());
    assert_same(&read(&good).unwrap(), &sample(1));
    let found = latest_valid(dir.path()).unwrap().unwrap();
    assert_eq!(found.checkpoint.step, 1);

    // A directory that cannot be created: its parent is a file.
    let file = dir.write("plain-file", b"");
    match write_atomic(&file.join("sub"), &sample(4), 3) {
        Err(CheckpointError::CreateDir { dir: d, .. }) => assert_eq!(d, file.join("sub")),
        other => panic!("expected CreateDir, got {other:?}"),
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_is_disk_full_and_loses_nothing() {
    // /dev/full fails every write with ENOSPC; put it where the temporary
    // file goes.
    if !Path::new("/dev/full").exists() {
        eprintln!("SKIPPED a_full_disk_is_disk_full_and_loses_nothing: no /dev/full");
        return;
    }
    let dir = TempDir::new("ckpt-full");
    let good = write_atomic(dir.path(), &sample(1), 3).unwrap();
    let tmp = dir.path().join("ckpt-000000000002.safetensors.tmp");
    std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
    match write_atomic(dir.path(), &sample(2), 3) {
        Err(e @ CheckpointError::DiskFull { .. }) => {
            assert_eq!(e.path(), Some(tmp.as_path()));
            assert!(e.to_string().contains("free space"), "{e}");
        }
        other => panic!("expected DiskFull, got {other:?}"),
    }
    assert!(
        std::fs::symlink_metadata(&tmp).is_err(),
        "the temporary file was left behind"
    );
    assert!(!dir.path().join(file_name(2)).exists());
    assert_same(&read(&good).unwrap(), &sample(1));
}

#[test]
fn a_checkpoint_directory_is_checked_before_a_run_needs_it() {
    let dir = TempDir::new("ckpt-writable");
    // Missing: made, and left with nothing in it but what was there.
    let fresh = dir.path().join("a").join("b");
    ensure_writable(&fresh).unwrap();
    assert!(fresh.is_dir());
    assert_eq!(
        std::fs::read_dir(&fresh).unwrap().count(),
        0,
        "the probe was left behind"
    );
    // Under a regular file: no directory can be made there, even by root.
    let file = dir.write("plain-file", b"");
    match ensure_writable(&file.join("sub")) {
        Err(e @ CheckpointError::CreateDir { .. }) => {
            assert_eq!(e.path(), Some(file.join("sub").as_path()));
            assert!(e.to_string().contains("choose another directory"), "{e}");
        }
        other => panic!("expected CreateDir, got {other:?}"),
    }
    // A directory that exists but takes no files, even from root: /proc.
    #[cfg(target_os = "linux")]
    match ensure_writable(Path::new("/proc")) {
        Err(e @ CheckpointError::NotWritable { .. }) => {
            assert_eq!(e.path(), Some(Path::new("/proc")));
            assert!(e.to_string().contains("choose another directory"), "{e}");
        }
        other => panic!("expected NotWritable, got {other:?}"),
    }
}
