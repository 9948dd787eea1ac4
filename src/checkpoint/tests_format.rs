//! The format: what is written reads back bit for bit, and any damage to
//! a file is an error.

use super::*;
use crate::models::MnistCnn;
use crate::nn::{Input, ParamStore};
use crate::{Device, Engine};

/// Where the data section starts in a well-formed file.
fn data_start(bytes: &[u8]) -> usize {
    8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize
}

/// The MNIST CNN's parameters, declared in a store in `engine`'s arena.
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
