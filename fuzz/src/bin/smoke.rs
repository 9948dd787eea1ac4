//! Bounded, seeded fuzzing on stable Rust, for where libFuzzer (nightly)
//! cannot run: mutations of real inputs through the same harnesses as the
//! libFuzzer targets, for a fixed time per target.
//!
//! ```sh
//! cd fuzz && cargo run --release --bin smoke -- --seconds 60 [--seed N] [--target idx|cifar|checkpoint|all]
//! cargo run --release --bin smoke -- --write-corpus corpus   # seeds for `cargo fuzz run`
//! ```
//!
//! Seeds: the real MNIST files (`data/mnist/*.gz`, decompressed) and
//! shortened copies with their count fields edited to match; CIFAR-10
//! records made from those MNIST pixels (whole runs of records, and ones
//! cut mid-record); valid
//! checkpoints, from an MNIST-CNN-sized one to empty ones. Mutations: bit
//! flips, interesting bytes, truncations, appends, inserted and deleted
//! ranges, splices of other seeds, edits of IDX dimension fields and of the
//! safetensors length field, and edits inside the header JSON (numbers,
//! strings) with the length field re-framed or not. Besides mutations, the
//! checkpoint target round-trips randomly generated checkpoints (names with
//! quotes, escapes, control characters; NaN payloads; zero dimensions)
//! through the encoder, since mutated files almost never pass the checksum.
//!
//! A panic is caught, reported with its message, and the input saved under
//! `--regressions` (default `fuzz/regressions/`); the run exits non-zero.
//! The report gives inputs run, outcomes by label, the slowest input and
//! the process's peak resident memory.

use std::collections::BTreeMap;
use std::io::Read;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bumpgrad::checkpoint::{self, momentum_buffer_name, Checkpoint, CheckpointError, NamedTensor, RESERVED_KEYS};
use bumpgrad::data::cifar;
use bumpgrad::rng::SplitMix64;
use bumpgrad_fuzz::{checkpoint_one, cifar_one, idx_one, round_trip, sst_one};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Idx,
    Cifar,
    Checkpoint,
    Sst,
}

impl Target {
    const ALL: [Target; 4] = [Target::Idx, Target::Cifar, Target::Checkpoint, Target::Sst];

    fn name(self) -> &'static str {
        match self {
            Target::Idx => "idx",
            Target::Cifar => "cifar",
            Target::Checkpoint => "checkpoint",
            Target::Sst => "sst",
        }
    }

    fn harness(self) -> fn(&[u8]) -> String {
        match self {
            Target::Idx => idx_one,
            Target::Cifar => cifar_one,
            Target::Checkpoint => checkpoint_one,
            Target::Sst => sst_one,
        }
    }
}

struct Args {
    seconds: f64,
    seed: u64,
    targets: Vec<Target>,
    data: PathBuf,
    regressions: PathBuf,
    write_corpus: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut args = Args {
        seconds: 60.0,
        seed: 1,
        targets: Target::ALL.to_vec(),
        data: manifest.join("../data/mnist"),
        regressions: manifest.join("regressions"),
        write_corpus: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => args.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--target" => {
                args.targets = match value()?.as_str() {
                    "idx" => vec![Target::Idx],
                    "cifar" => vec![Target::Cifar],
                    "checkpoint" => vec![Target::Checkpoint],
                    "sst" => vec![Target::Sst],
                    "all" => Target::ALL.to_vec(),
                    other => return Err(format!("--target {other}: expected idx, cifar, checkpoint or all")),
                }
            }
            "--data" => args.data = value()?.into(),
            "--regressions" => args.regressions = value()?.into(),
            "--write-corpus" => args.write_corpus = Some(value()?.into()),
            other => return Err(format!(
                "unknown flag {other}; flags: --seconds S --seed N --target idx|cifar|checkpoint|sst|all --data DIR \
                     --regressions DIR --write-corpus DIR"
            )),
        }
    }
    Ok(args)
}

/// A starting input; `weight` is its share of the picks.
struct Seed {
    name: String,
    bytes: Vec<u8>,
    weight: u64,
}

// ---- seeds -------------------------------------------------------------

fn idx_seeds(dir: &Path) -> Result<Vec<Seed>, String> {
    let mut seeds = Vec::new();
    for (file, record, header) in [
        ("t10k-labels-idx1-ubyte.gz", 1, 8),
        ("train-labels-idx1-ubyte.gz", 1, 8),
        ("t10k-images-idx3-ubyte.gz", 784, 16),
        ("train-images-idx3-ubyte.gz", 784, 16),
    ] {
        let path = dir.join(file);
        let stored = std::fs::read(&path).map_err(|e| format!("{}: {e} (pass --data DIR)", path.display()))?;
        let mut bytes = Vec::new();
        flate2::read::MultiGzDecoder::new(stored.as_slice())
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        // Shortened copies with the count edited to match: valid files small
        // enough to mutate thousands of times a second.
        for count in [0u32, 1, 2, 3, 10] {
            let mut short = bytes[..header + record * count as usize].to_vec();
            short[4..8].copy_from_slice(&count.to_be_bytes());
            seeds.push(Seed {
                name: format!("{}-{count}", file.trim_end_matches(".gz")),
                bytes: short,
                weight: 20,
            });
        }
        // The whole file, rarely: slow, but the real thing.
        let weight = if bytes.len() > 1 << 20 { 1 } else { 5 };
        seeds.push(Seed {
            name: file.trim_end_matches(".gz").to_string(),
            bytes,
            weight,
        });
    }
    Ok(seeds)
}

/// Treebank files from the repository's `data/sst/dev.txt`: its first 1,
/// 3 and 40 lines, a line with CRLF endings and blank lines around it, and
/// the whole split (rarely: 1,101 trees).
fn sst_seeds() -> Result<Vec<Seed>, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sst/dev.txt");
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let first = |n: usize| lines[..n.min(lines.len())].join(&b'\n');
    let mut crlf = b"\r\n \t\r\n".to_vec();
    crlf.extend_from_slice(lines[0]);
    crlf.extend_from_slice(b"\r\n\n");
    let mut seeds: Vec<Seed> = [1, 3, 40]
        .into_iter()
        .map(|n| Seed {
            name: format!("sst-dev-{n}"),
            bytes: first(n),
            weight: 20,
        })
        .collect();
    seeds.push(Seed {
        name: "sst-crlf".into(),
        bytes: crlf,
        weight: 10,
    });
    seeds.push(Seed {
        name: "sst-dev".into(),
        bytes,
        weight: 1,
    });
    Ok(seeds)
}

/// CIFAR-10 batch files built from MNIST's pixels (no CIFAR-10 download
/// is needed): 1, 2 and 40 whole records, and 2 records cut short.
fn cifar_seeds(idx: &[Seed]) -> Vec<Seed> {
    let pixels: Vec<u8> = idx
        .iter()
        .find(|s| s.name.contains("images"))
        .map(|s| s.bytes.get(16..).unwrap_or(&[]).to_vec())
        .unwrap_or_default();
    let record = |i: usize| {
        let mut r = vec![(i % 10) as u8];
        r.extend((0..cifar::RECORD_BYTES - 1).map(|k| pixels.get(i * 3072 + k).copied().unwrap_or(k as u8)));
        r
    };
    let file = |n: usize| (0..n).flat_map(record).collect::<Vec<u8>>();
    let mut cut = file(2);
    cut.truncate(cifar::RECORD_BYTES + 100);
    vec![
        Seed {
            name: "cifar-1-record".into(),
            bytes: file(1),
            weight: 4,
        },
        Seed {
            name: "cifar-2-records".into(),
            bytes: file(2),
            weight: 4,
        },
        Seed {
            name: "cifar-40-records".into(),
            bytes: file(40),
            weight: 1,
        },
        Seed {
            name: "cifar-cut".into(),
            bytes: cut,
            weight: 2,
        },
    ]
}

fn checkpoint_seeds(rng: &mut SplitMix64) -> Vec<Seed> {
    let mnist: [(&str, &[usize]); 6] = [
        ("conv1.weight", &[10, 1, 5, 5]),
        ("conv2.weight", &[20, 10, 5, 5]),
        ("fc1.weight", &[50, 320]),
        ("fc1.bias", &[50]),
        ("fc2.weight", &[10, 50]),
        ("fc2.bias", &[10]),
    ];
    let mut random_values = |n: usize| (0..n).map(|_| rng.next_f32() - 0.5).collect::<Vec<f32>>();
    let base = Checkpoint {
        epoch: 2,
        step: 1200,
        seed: 42,
        config_json: r#"{"epochs":4,"batch":100,"lr":0.05,"momentum":0.9}"#.to_string(),
        extra: BTreeMap::from([("dropout_seed".to_string(), "987654321".to_string())]),
        tensors: Vec::new(),
    };
    let mut model = base.clone();
    let mut with_momentum = base.clone();
    for (name, shape) in mnist {
        let n = shape.iter().product();
        model.tensors.push(NamedTensor::new(name, shape, random_values(n)));
        with_momentum
            .tensors
            .push(NamedTensor::new(name, shape, random_values(n)));
        with_momentum
            .tensors
            .push(NamedTensor::new(momentum_buffer_name(name), shape, random_values(n)));
    }
    let mut small = base.clone();
    small.tensors = vec![
        NamedTensor::new("fc2.bias", &[10], random_values(10)),
        NamedTensor::new("s", &[], vec![f32::from_bits(0x7fc0_0001)]),
        NamedTensor::new("e", &[0, 3], vec![]),
    ];
    let mut odd_names = base.clone();
    odd_names.tensors = vec![
        NamedTensor::new("quote\"back\\slash", &[1], vec![1.0]),
        NamedTensor::new("ünïcødé ✓", &[2], vec![-0.0, f32::INFINITY]),
    ];
    odd_names
        .extra
        .insert("newline\nkey".to_string(), "tab\tvalue \u{0}".to_string());
    let empty = Checkpoint::default();
    [
        ("mnist", model, 10),
        ("mnist-momentum", with_momentum, 3),
        ("small", small, 40),
        ("odd-names", odd_names, 30),
        ("empty", empty, 20),
    ]
    .into_iter()
    .map(|(name, ckpt, weight)| Seed {
        name: name.to_string(),
        bytes: checkpoint::encode(&ckpt).expect("seed checkpoints are valid"),
        weight,
    })
    .collect()
}

// ---- mutations ---------------------------------------------------------

const INTERESTING_BYTES: [u8; 8] = [0x00, 0x01, 0x7f, 0x80, 0xff, b'{', b'"', b'\\'];

fn pick<'a>(rng: &mut SplitMix64, seeds: &'a [Seed]) -> &'a Seed {
    let total: u64 = seeds.iter().map(|s| s.weight).sum();
    let mut at = rng.below(total);
    for s in seeds {
        if at < s.weight {
            return s;
        }
        at -= s.weight;
    }
    &seeds[0]
}

/// A position in `0..=len`, biased towards the front, where headers are.
fn position(rng: &mut SplitMix64, len: usize) -> usize {
    let len = len as u64;
    let bound = if rng.below(2) == 0 { len.min(64) } else { len };
    rng.below(bound + 1) as usize
}

fn interesting_u64(rng: &mut SplitMix64, near: u64) -> u64 {
    match rng.below(10) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => 1 << 63,
        4 => u64::from(u32::MAX),
        5 => u64::from(u32::MAX) + 1,
        6 => near.wrapping_add(1 + rng.below(16)),
        7 => near.wrapping_sub(1 + rng.below(16)),
        8 => 1 << rng.below(64),
        _ => rng.next_u64(),
    }
}

fn mutate(rng: &mut SplitMix64, bytes: &mut Vec<u8>, target: Target, seeds: &[Seed]) {
    for _ in 0..1 + rng.below(4) {
        match rng.below(11) {
            0 | 1 => {
                // Flip a bit.
                if !bytes.is_empty() {
                    let at = position(rng, bytes.len() - 1);
                    bytes[at] ^= 1 << rng.below(8);
                }
            }
            2 => {
                if !bytes.is_empty() {
                    let at = position(rng, bytes.len() - 1);
                    bytes[at] = INTERESTING_BYTES[rng.below(8) as usize];
                }
            }
            3 => {
                let len = position(rng, bytes.len());
                bytes.truncate(len);
            }
            4 => {
                for _ in 0..1 + rng.below(64) {
                    bytes.push(rng.next_u64() as u8);
                }
            }
            5 => {
                // Delete a range.
                let start = position(rng, bytes.len());
                let end = (start + 1 + rng.below(256) as usize).min(bytes.len());
                bytes.drain(start..end);
            }
            6 => {
                // Insert a range copied from elsewhere in the input.
                let at = position(rng, bytes.len());
                let from = position(rng, bytes.len());
                let end = (from + 1 + rng.below(64) as usize).min(bytes.len());
                let chunk = bytes[from..end].to_vec();
                bytes.splice(at..at, chunk);
            }
            7 => {
                // Splice: our head, another seed's tail.
                let other = &pick(rng, seeds).bytes;
                let at = position(rng, bytes.len());
                let from = position(rng, other.len());
                bytes.truncate(at);
                bytes.extend_from_slice(&other[from..other.len().min(from + 4096)]);
            }
            _ => match target {
                Target::Idx => edit_idx_field(rng, bytes),
                Target::Cifar => edit_cifar_label(rng, bytes),
                Target::Checkpoint => edit_checkpoint_header(rng, bytes),
                Target::Sst => edit_tree(rng, bytes),
            },
        }
    }
}

/// A treebank edit: a bracket, label, space or escape put in, taken out or
/// swapped where the parser makes its choices.
fn edit_tree(rng: &mut SplitMix64, bytes: &mut Vec<u8>) {
    const PIECES: [&[u8]; 10] = [
        b"(",
        b")",
        b" ",
        b"\t",
        b"(5 ",
        b"(2 ",
        b")(",
        b"\\/",
        b"\n",
        b"(2 (3 a) ",
    ];
    let at = position(rng, bytes.len());
    match rng.below(3) {
        0 => {
            let piece = PIECES[rng.below(PIECES.len() as u64) as usize];
            bytes.splice(at..at, piece.iter().copied());
        }
        1 => {
            // Take out the next bracket.
            if let Some(k) = bytes[at..].iter().position(|&b| b == b'(' || b == b')') {
                bytes.remove(at + k);
            }
        }
        _ => {
            // A label to another digit or character.
            if let Some(k) = bytes[at..]
                .windows(2)
                .position(|w| w[0] == b'(' && w[1].is_ascii_digit())
            {
                bytes[at + k + 1] = b"0123456789x("[rng.below(12) as usize];
            }
        }
    }
}

/// Overwrites the magic or a dimension with a value chosen to break size
/// arithmetic.
fn edit_idx_field(rng: &mut SplitMix64, bytes: &mut [u8]) {
    let field = 4 * rng.below(4) as usize;
    if bytes.len() < field + 4 {
        return;
    }
    let old = u32::from_be_bytes(bytes[field..field + 4].try_into().unwrap());
    let new = interesting_u64(rng, u64::from(old)) as u32;
    bytes[field..field + 4].copy_from_slice(&new.to_be_bytes());
}

/// Sets a record's label byte to a value near the class count, so the
/// label check is reached on otherwise whole records.
fn edit_cifar_label(rng: &mut SplitMix64, bytes: &mut [u8]) {
    let records = bytes.len() / cifar::RECORD_BYTES;
    if records == 0 {
        return;
    }
    let at = rng.below(records as u64) as usize * cifar::RECORD_BYTES;
    bytes[at] = [9, 10, 11, 255][rng.below(4) as usize];
}

/// Edits the safetensors length field, or a number or string inside the
/// header JSON, re-framing the header afterwards half the time.
fn edit_checkpoint_header(rng: &mut SplitMix64, bytes: &mut Vec<u8>) {
    if bytes.len() < 8 {
        return;
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let framed = n <= (bytes.len() - 8) as u64;
    if rng.below(4) == 0 || !framed {
        let new = interesting_u64(rng, n);
        bytes[..8].copy_from_slice(&new.to_le_bytes());
        return;
    }
    let end = 8 + n as usize;
    let header = &bytes[8..end];
    let at = rng.below(header.len().max(1) as u64) as usize;
    let replacement: String = if rng.below(2) == 0 {
        const NUMBERS: [&str; 10] = [
            "0",
            "1",
            "-1",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "1e400",
            "2305843009213693948",
            "0.5",
            "99999999999999999999999999",
        ];
        NUMBERS[rng.below(NUMBERS.len() as u64) as usize].to_string()
    } else {
        const STRINGS: [&str; 10] = [
            "\"F16\"",
            "\"F32\"",
            "\"I64\"",
            "\"__metadata__\"",
            "\"\"",
            "\"bumpgrad-checkpoint\"",
            "\"2\"",
            "[]",
            "{}",
            "null",
        ];
        STRINGS[rng.below(STRINGS.len() as u64) as usize].to_string()
    };
    // Replace the token (a run of digits, or a quoted string) around `at`.
    let (start, stop) = token_around(header, at);
    let mut new_header = header[..start].to_vec();
    new_header.extend_from_slice(replacement.as_bytes());
    new_header.extend_from_slice(&header[stop..]);
    let mut out = if rng.below(2) == 0 {
        (new_header.len() as u64).to_le_bytes().to_vec()
    } else {
        bytes[..8].to_vec()
    };
    out.extend_from_slice(&new_header);
    out.extend_from_slice(&bytes[end..]);
    *bytes = out;
}

fn token_around(header: &[u8], at: usize) -> (usize, usize) {
    let is_digit = |b: u8| b.is_ascii_digit();
    if header.get(at).copied().is_some_and(is_digit) {
        let start = header[..at].iter().rposition(|&b| !is_digit(b)).map_or(0, |p| p + 1);
        let stop = header[at..]
            .iter()
            .position(|&b| !is_digit(b))
            .map_or(header.len(), |p| at + p);
        return (start, stop);
    }
    // The quoted string that starts at or after `at`.
    match header[at..].iter().position(|&b| b == b'"') {
        Some(open) => {
            let start = at + open;
            let stop = header[start + 1..]
                .iter()
                .position(|&b| b == b'"')
                .map_or(header.len(), |p| start + 1 + p + 1);
            (start, stop)
        }
        None => (at, at),
    }
}

/// A checkpoint with random names, shapes, values and metadata; valid or,
/// now and then, not (a duplicate name, a reserved key).
fn random_checkpoint(rng: &mut SplitMix64) -> Checkpoint {
    const PIECES: [&str; 14] = [
        "fc1",
        ".",
        "weight",
        "\"",
        "\\",
        "\n",
        "\u{0}",
        "é",
        "✓",
        "__metadata__",
        "optimizer",
        " ",
        "{",
        "step",
    ];
    let text = |rng: &mut SplitMix64, max: u64| -> String {
        (0..rng.below(max + 1))
            .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
            .collect()
    };
    let mut ckpt = Checkpoint {
        epoch: interesting_u64(rng, 3),
        step: interesting_u64(rng, 100),
        seed: rng.next_u64(),
        config_json: text(rng, 8),
        ..Checkpoint::default()
    };
    for _ in 0..rng.below(4) {
        let key = if rng.below(20) == 0 {
            RESERVED_KEYS[rng.below(RESERVED_KEYS.len() as u64) as usize].to_string()
        } else {
            text(rng, 4)
        };
        let value = text(rng, 6);
        ckpt.extra.insert(key, value);
    }
    for _ in 0..rng.below(5) {
        let name = text(rng, 5);
        let shape: Vec<usize> = (0..rng.below(4)).map(|_| rng.below(5) as usize).collect();
        let n = shape.iter().product();
        let values = (0..n).map(|_| f32::from_bits(rng.next_u64() as u32)).collect();
        ckpt.tensors.push(NamedTensor::new(name, &shape, values));
    }
    ckpt
}

/// Encodes a random checkpoint: valid ones must round-trip, invalid ones
/// must be refused with `Invalid`, never written.
fn structured_one(ckpt: &Checkpoint) -> String {
    let mut names = std::collections::BTreeSet::new();
    let valid = ckpt
        .tensors
        .iter()
        .all(|t| !t.name.is_empty() && t.name != "__metadata__" && names.insert(t.name.as_str()))
        && ckpt.extra.keys().all(|k| !RESERVED_KEYS.contains(&k.as_str()));
    if valid {
        round_trip(ckpt);
        "structured: round trip".to_string()
    } else {
        match checkpoint::encode(ckpt) {
            Err(CheckpointError::Invalid { .. }) => "structured: refused".to_string(),
            other => panic!("an invalid checkpoint was not refused: {other:?}"),
        }
    }
}

// ---- the runner --------------------------------------------------------

static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

struct Report {
    runs: u64,
    outcomes: BTreeMap<String, u64>,
    /// By message: how often, and the first input saved.
    panics: BTreeMap<String, (u64, PathBuf)>,
    slowest: (Duration, String),
}

fn run(target: Target, seeds: &[Seed], seconds: f64, seed: u64, regressions: &Path) -> Report {
    let mut rng = SplitMix64::new(seed);
    let mut report = Report {
        runs: 0,
        outcomes: BTreeMap::new(),
        panics: BTreeMap::new(),
        slowest: (Duration::ZERO, String::new()),
    };
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline {
        let roll = rng.below(100);
        let (what, input, structured) = if target == Target::Checkpoint && roll < 10 {
            (
                "random checkpoint".to_string(),
                Vec::new(),
                Some(random_checkpoint(&mut rng)),
            )
        } else if roll < 15 {
            let len = rng.below(512) as usize;
            (
                "random bytes".to_string(),
                (0..len).map(|_| rng.next_u64() as u8).collect(),
                None,
            )
        } else {
            let s = pick(&mut rng, seeds);
            let mut bytes = s.bytes.clone();
            mutate(&mut rng, &mut bytes, target, seeds);
            (format!("mutated {}", s.name), bytes, None)
        };
        let started = Instant::now();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| match (&structured, target) {
            (Some(ckpt), _) => structured_one(ckpt),
            (None, target) => target.harness()(&input),
        }));
        let took = started.elapsed();
        report.runs += 1;
        if took > report.slowest.0 {
            report.slowest = (took, format!("{what} ({} bytes)", input.len()));
        }
        match outcome {
            Ok(label) => *report.outcomes.entry(label).or_default() += 1,
            Err(_) => {
                let message = PANIC_MESSAGE.lock().unwrap().take().unwrap_or_default();
                if let Some((count, _)) = report.panics.get_mut(&message) {
                    *count += 1;
                } else {
                    let saved = save(regressions, target, &input, structured.as_ref());
                    eprintln!(
                        "PANIC in {} on {what}: {message}\n  input saved to {}",
                        target.name(),
                        saved.display()
                    );
                    report.panics.insert(message, (1, saved));
                }
            }
        }
    }
    report
}

/// Saves a panicking input where a regression test can pick it up.
fn save(dir: &Path, target: Target, input: &[u8], structured: Option<&Checkpoint>) -> PathBuf {
    let (bytes, ext) = match structured {
        Some(ckpt) => (format!("{ckpt:#?}").into_bytes(), "txt"),
        None => (input.to_vec(), "bin"),
    };
    // FNV-1a: a stable name, so the same input is saved once.
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let path = dir.join(format!("{}-{hash:016x}.{ext}", target.name()));
    if let Err(e) = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &bytes)) {
        eprintln!("cannot save {}: {e}", path.display());
    }
    path
}

/// Runs every saved input (`idx-*.bin`, `checkpoint-*.bin`) through its
/// harness first: each once made a parser panic or break a promise, so each
/// is a regression test. Returns whether any still fails.
fn replay(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    paths.sort();
    let (mut replayed, mut failed) = (0, 0);
    for path in paths {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let target = Target::ALL
            .into_iter()
            .find(|t| name.starts_with(&format!("{}-", t.name())) && name.ends_with(".bin"));
        let Some(harness) = target.map(Target::harness) else {
            continue;
        };
        let Ok(bytes) = std::fs::read(&path) else { continue };
        replayed += 1;
        if panic::catch_unwind(|| harness(&bytes)).is_err() {
            failed += 1;
            let message = PANIC_MESSAGE.lock().unwrap().take().unwrap_or_default();
            println!("REGRESSION {}: {message}", path.display());
        }
    }
    println!(
        "regressions: {replayed} saved inputs replayed from {}, {failed} failing",
        dir.display()
    );
    failed > 0
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn write_corpus(dir: &Path, idx: &[Seed], cifar: &[Seed], ckpt: &[Seed], sst: &[Seed]) -> std::io::Result<()> {
    for (target, seeds) in [("idx", idx), ("cifar", cifar), ("checkpoint", ckpt), ("sst", sst)] {
        let sub = dir.join(target);
        std::fs::create_dir_all(&sub)?;
        // libFuzzer is fastest on small inputs; the whole MNIST files are
        // left to the stable runner.
        for s in seeds.iter().filter(|s| s.bytes.len() <= 256 << 10) {
            std::fs::write(sub.join(&s.name), &s.bytes)?;
        }
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let idx = match idx_seeds(&args.data) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: reading the IDX seeds: {e}");
            std::process::exit(2);
        }
    };
    let ckpt = checkpoint_seeds(&mut SplitMix64::new(args.seed));
    let cifar = cifar_seeds(&idx);
    let sst = match sst_seeds() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: reading the treebank seeds: {e}");
            std::process::exit(2);
        }
    };
    if let Some(dir) = &args.write_corpus {
        if let Err(e) = write_corpus(dir, &idx, &cifar, &ckpt, &sst) {
            eprintln!("error: writing the corpus to {}: {e}", dir.display());
            std::process::exit(2);
        }
        println!(
            "wrote seeds to {}/idx, {}/cifar, {}/checkpoint and {}/sst",
            dir.display(),
            dir.display(),
            dir.display(),
            dir.display()
        );
        return;
    }

    panic::set_hook(Box::new(|info| {
        let location = info.location().map(|l| format!(" at {l}")).unwrap_or_default();
        let payload = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        *PANIC_MESSAGE.lock().unwrap() = Some(format!("{payload}{location}"));
    }));

    let mut panicked = replay(&args.regressions);
    for target in &args.targets {
        let seeds = match target {
            Target::Idx => &idx,
            Target::Cifar => &cifar,
            Target::Checkpoint => &ckpt,
            Target::Sst => &sst,
        };
        let report = run(*target, seeds, args.seconds, args.seed, &args.regressions);
        println!(
            "{}: {} inputs in {:.0} s (seed {}), {} panics; slowest {:.1} ms: {}; peak RSS {} MiB",
            target.name(),
            report.runs,
            args.seconds,
            args.seed,
            report.panics.values().map(|(n, _)| n).sum::<u64>(),
            report.slowest.0.as_secs_f64() * 1e3,
            report.slowest.1,
            peak_rss_kib().map_or("?".to_string(), |k| (k / 1024).to_string()),
        );
        for (label, count) in &report.outcomes {
            println!("  {count:>9}  {label}");
        }
        for (message, (count, path)) in &report.panics {
            println!("  PANIC ×{count}: {message}\n        first input: {}", path.display());
        }
        panicked |= !report.panics.is_empty();
    }
    if panicked {
        std::process::exit(1);
    }
}
