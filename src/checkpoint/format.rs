//! The bytes of a checkpoint: encoding through the `safetensors` crate, and a
//! strict decoder of our own.
//!
//! Why our own decoder: it must be total over arbitrary bytes (it is
//! fuzzed), name the file and the tensor in its errors, tell a truncated
//! file from a corrupt one, and verify the checksum. The crate's reader
//! (0.6.2) names neither file nor tensor, reports short and long files
//! alike, and its final size check `buffer_end + 8 + n` is unchecked
//! arithmetic that panics, in builds with overflow checks, on a header
//! whose offsets reach near `usize::MAX` (test
//! `a_header_reaching_past_usize_max_is_an_error`). The encoder is the
//! crate's, so the layout is the reference one, and the tests check that
//! the crate's reader accepts what we write.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::Path;

use safetensors::{Dtype, View};
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use sha2::{Digest, Sha256};

use super::{
    Checkpoint, CheckpointError, NamedTensor, FORMAT, KEY_CHECKSUM, KEY_CONFIG, KEY_EPOCH, KEY_FORMAT, KEY_SEED,
    KEY_STEP, KEY_VERSION, RESERVED_KEYS, VERSION,
};

/// The safetensors header length field: a little-endian u64.
const LEN_FIELD: usize = 8;
/// The key under which safetensors keeps its string → string map.
const METADATA: &str = "__metadata__";
/// The safetensors reference implementation refuses larger headers; so do
/// we, so that everything we accept loads in PyTorch too.
const MAX_HEADER_BYTES: u64 = 100_000_000;
const CHECKSUM_PREFIX: &str = "sha256:";

/// One tensor's entry in the header, before its data is copied out.
struct Entry {
    name: String,
    dtype: String,
    shape: Vec<u64>,
    begin: u64,
    end: u64,
}

/// A file whose framing, header and tensor layout are valid; the checksum
/// and the typed metadata are not checked yet.
struct Layout<'a> {
    metadata: BTreeMap<String, String>,
    /// Sorted by name, which is also the checksum's order.
    entries: Vec<Entry>,
    /// Everything after the header; the entries tile it exactly.
    data: &'a [u8],
}

/// An F32 tensor as the crate's serializer wants it.
struct F32View<'a> {
    shape: &'a [usize],
    bytes: Vec<u8>,
}

// By reference, so the two serializations share one copy of the bytes.
impl View for &F32View<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// The bytes of a checkpoint file. Fails only on a checkpoint that could not
/// be read back: duplicate or empty tensor names, a shape that does not
/// match its values, an extra metadata key that shadows a reserved one.
pub fn encode(ckpt: &Checkpoint) -> Result<Vec<u8>, CheckpointError> {
    validate(ckpt)?;
    let views: Vec<(&str, F32View<'_>)> = ckpt
        .tensors
        .iter()
        .map(|t| {
            let bytes = t.values.iter().flat_map(|v| v.to_le_bytes()).collect();
            (t.name.as_str(), F32View { shape: &t.shape, bytes })
        })
        .collect();
    let mut metadata: HashMap<String, String> = ckpt.extra.clone().into_iter().collect();
    for (key, value) in [
        (KEY_FORMAT, FORMAT.to_string()),
        (KEY_VERSION, VERSION.to_string()),
        (KEY_EPOCH, ckpt.epoch.to_string()),
        (KEY_STEP, ckpt.step.to_string()),
        (KEY_SEED, ckpt.seed.to_string()),
        (KEY_CONFIG, ckpt.config_json.clone()),
    ] {
        metadata.insert(key.to_string(), value);
    }

    // The checksum covers the layout the serializer chooses (offsets and
    // all), so serialize once without it, hash what came out, and serialize
    // again with it: the data section and offsets do not depend on the
    // metadata, and the checksum entry is excluded from its own input.
    let invalid = |e: safetensors::SafeTensorError| CheckpointError::Invalid {
        reason: format!("the safetensors serializer refused it: {e}"),
    };
    let unsigned =
        safetensors::serialize(views.iter().map(|(n, v)| (*n, v)), Some(metadata.clone())).map_err(invalid)?;
    let here = Path::new("<checkpoint being written>");
    let layout = split(&unsigned, here).map_err(|e| CheckpointError::Invalid {
        reason: format!("its unsigned encoding does not read back ({e})"),
    })?;
    let checksum = checksum(&layout);
    metadata.insert(KEY_CHECKSUM.to_string(), checksum);
    let bytes = safetensors::serialize(views.iter().map(|(n, v)| (*n, v)), Some(metadata)).map_err(invalid)?;

    // Never put a file on disk that would not read back.
    parse(&bytes, here).map_err(|e| CheckpointError::Invalid {
        reason: format!("it does not read back ({e})"),
    })?;
    Ok(bytes)
}

fn validate(ckpt: &Checkpoint) -> Result<(), CheckpointError> {
    let invalid = |reason: String| Err(CheckpointError::Invalid { reason });
    let mut names = BTreeSet::new();
    for t in &ckpt.tensors {
        if t.name.is_empty() || t.name == METADATA {
            return invalid(format!("tensor name {:?} is reserved", t.name));
        }
        if !names.insert(t.name.as_str()) {
            return invalid(format!("tensor name {:?} appears twice", t.name));
        }
        let numel = t.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if numel != Some(t.values.len()) {
            return invalid(format!(
                "tensor {:?} has shape {:?} but {} values",
                t.name,
                t.shape,
                t.values.len()
            ));
        }
    }
    if let Some(key) = ckpt.extra.keys().find(|k| RESERVED_KEYS.contains(&k.as_str())) {
        return invalid(format!("extra metadata key {key:?} is reserved"));
    }
    Ok(())
}

/// Decodes and verifies a checkpoint file's bytes; `path` is only for error
/// messages. Total: any input gives a checkpoint or a typed error, and
/// nothing is allocated beyond a small multiple of `bytes.len()`.
///
/// Checks run from the outside in, so each error names the first thing
/// wrong: framing (length field, truncation), header JSON, format tag and
/// version, tensor dtypes, shapes and offsets, the typed metadata, and last
/// the checksum over everything, before any value is copied out.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Checkpoint, CheckpointError> {
    let layout = split(bytes, path)?;
    let meta = &layout.metadata;
    let number = |key: &'static str| -> Result<u64, CheckpointError> {
        let value = meta.get(key).ok_or_else(|| CheckpointError::MissingMetadata {
            path: path.to_path_buf(),
            key,
        })?;
        // Canonical decimal only: `u64::from_str` would also take "+7".
        match value.parse::<u64>() {
            Ok(n) if n.to_string() == *value => Ok(n),
            _ => Err(CheckpointError::BadMetadata {
                path: path.to_path_buf(),
                key,
                value: value.clone(),
                expected: "an unsigned decimal integer",
            }),
        }
    };
    let (epoch, step, seed) = (number(KEY_EPOCH)?, number(KEY_STEP)?, number(KEY_SEED)?);
    let config_json = meta
        .get(KEY_CONFIG)
        .ok_or_else(|| CheckpointError::MissingMetadata {
            path: path.to_path_buf(),
            key: KEY_CONFIG,
        })?
        .clone();
    let recorded = meta.get(KEY_CHECKSUM).ok_or_else(|| CheckpointError::MissingMetadata {
        path: path.to_path_buf(),
        key: KEY_CHECKSUM,
    })?;
    let well_formed = recorded
        .strip_prefix(CHECKSUM_PREFIX)
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    if !well_formed {
        return Err(CheckpointError::BadMetadata {
            path: path.to_path_buf(),
            key: KEY_CHECKSUM,
            value: recorded.clone(),
            expected: "\"sha256:\" and 64 lowercase hex digits",
        });
    }
    let computed = checksum(&layout);
    if computed != *recorded {
        return Err(CheckpointError::Checksum {
            path: path.to_path_buf(),
            expected: recorded.clone(),
            found: computed,
        });
    }

    let extra = meta
        .iter()
        .filter(|(k, _)| !RESERVED_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut tensors = Vec::with_capacity(layout.entries.len());
    for entry in &layout.entries {
        // In range: `split` checked that the offsets tile `data`.
        let raw = &layout.data[entry.begin as usize..entry.end as usize];
        // Only a platform with a 32-bit usize can fail here (a zero
        // dimension lets the others be anything).
        let shape = entry
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<_>, _>>();
        let shape = shape.map_err(|_| CheckpointError::Header {
            path: path.to_path_buf(),
            reason: format!(
                "tensor {:?}: a dimension does not fit this platform's usize",
                entry.name
            ),
        })?;
        tensors.push(NamedTensor {
            name: entry.name.clone(),
            shape,
            values: raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        });
    }
    Ok(Checkpoint {
        epoch,
        step,
        seed,
        config_json,
        extra,
        tensors,
    })
}

/// Framing, header JSON, format tag and version, and the tensor layout.
fn split<'a>(bytes: &'a [u8], path: &Path) -> Result<Layout<'a>, CheckpointError> {
    let file_len = bytes.len() as u64;
    let not_safetensors = |reason: &str| CheckpointError::NotSafetensors {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let Some((len_field, rest)) = bytes.split_first_chunk::<LEN_FIELD>() else {
        return Err(CheckpointError::Truncated {
            path: path.to_path_buf(),
            expected_bytes: LEN_FIELD as u64,
            found_bytes: file_len,
        });
    };
    let header_len = u64::from_le_bytes(*len_field);
    // Content before length: a file of another kind (a PyTorch zip, text)
    // is better reported as that than as "truncated".
    if rest.first().is_some_and(|&b| b != b'{') {
        return Err(not_safetensors("the header does not start with '{'"));
    }
    if header_len > rest.len() as u64 {
        return Err(CheckpointError::Truncated {
            path: path.to_path_buf(),
            expected_bytes: header_len.saturating_add(LEN_FIELD as u64),
            found_bytes: file_len,
        });
    }
    if header_len > MAX_HEADER_BYTES {
        return Err(not_safetensors("the header is over 100 MB"));
    }
    // In range: header_len <= rest.len() was checked just above.
    let (header, data) = rest.split_at(header_len as usize);
    let header_error = |reason: String| CheckpointError::Header {
        path: path.to_path_buf(),
        reason,
    };
    let Header { metadata, tensors } =
        serde_json::from_slice(header).map_err(|e| header_error(format!("not a safetensors header: {e}")))?;
    let metadata = metadata.unwrap_or_default().0;
    let mut entries = Vec::with_capacity(tensors.len());
    for (name, raw) in tensors {
        // The encoder refuses empty names, so the decoder does too: what
        // decodes must encode again.
        if name.is_empty() {
            return Err(header_error("a tensor has an empty name".to_string()));
        }
        let [begin, end] = raw.data_offsets;
        entries.push(Entry {
            name,
            dtype: raw.dtype,
            shape: raw.shape,
            begin,
            end,
        });
    }

    match metadata.get(KEY_FORMAT) {
        Some(tag) if tag == FORMAT => {}
        found => {
            return Err(CheckpointError::WrongFormat {
                path: path.to_path_buf(),
                found: found.cloned(),
            })
        }
    }
    match metadata.get(KEY_VERSION) {
        Some(v) if *v == VERSION.to_string() => {}
        Some(v) => {
            return Err(CheckpointError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: v.clone(),
            })
        }
        None => {
            return Err(CheckpointError::MissingMetadata {
                path: path.to_path_buf(),
                key: KEY_VERSION,
            })
        }
    }

    // Sorted by name: the checksum's order and the order `parse` returns.
    // (serde_json's map is ordered only without its `preserve_order`.)
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    // Each tensor on its own, then whether the offsets tile the data.
    for e in &entries {
        if e.dtype != "F32" {
            return Err(CheckpointError::NotF32 {
                path: path.to_path_buf(),
                name: e.name.clone(),
                dtype: e.dtype.clone(),
            });
        }
        let expected_bytes = e.shape.iter().try_fold(4u64, |n, &d| n.checked_mul(d));
        let found_bytes = e.end.wrapping_sub(e.begin);
        if e.end < e.begin || expected_bytes != Some(found_bytes) {
            return Err(CheckpointError::ShapeMismatch {
                path: path.to_path_buf(),
                name: e.name.clone(),
                shape: e.shape.clone(),
                expected_bytes,
                found_bytes,
            });
        }
    }
    let mut by_offset: Vec<&Entry> = entries.iter().collect();
    by_offset.sort_by_key(|e| (e.begin, e.end));
    let mut covered = 0u64;
    for e in by_offset {
        if e.begin != covered {
            let what = if e.begin < covered {
                "overlaps"
            } else {
                "leaves a gap before"
            };
            return Err(CheckpointError::Layout {
                path: path.to_path_buf(),
                reason: format!(
                    "tensor {:?} at bytes {}..{} {what} byte {covered}",
                    e.name, e.begin, e.end
                ),
            });
        }
        covered = e.end;
    }
    let data_len = data.len() as u64;
    if covered != data_len {
        // Sizes of the whole file, as a person would compare them with `ls -l`.
        let prefix = LEN_FIELD as u64 + header_len;
        let expected_bytes = prefix.saturating_add(covered);
        let path = path.to_path_buf();
        return Err(if covered > data_len {
            CheckpointError::Truncated {
                path,
                expected_bytes,
                found_bytes: file_len,
            }
        } else {
            CheckpointError::TrailingBytes {
                path,
                expected_bytes,
                found_bytes: file_len,
            }
        });
    }
    Ok(Layout {
        metadata,
        entries,
        data,
    })
}

/// The header JSON, deserialized straight into its final types: no
/// intermediate `serde_json::Value` tree, which would cost ~16 bytes of
/// memory per byte of a header full of small numbers; and a key that
/// appears twice is an error, where a map would silently keep one.
struct Header {
    metadata: Option<UniqueStrings>,
    tensors: Vec<(String, RawEntry)>,
}

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Header;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of tensor entries and __metadata__")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
                let mut seen = BTreeSet::new();
                let mut header = Header {
                    metadata: None,
                    tensors: Vec::new(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(de::Error::custom(format!("key {key:?} appears twice")));
                    }
                    if key == METADATA {
                        let metadata = map
                            .next_value()
                            .map_err(|e| de::Error::custom(format!("{METADATA}: {e}")))?;
                        header.metadata = Some(metadata);
                    } else {
                        let entry = map
                            .next_value()
                            .map_err(|e| de::Error::custom(format!("tensor {key:?}: {e}")))?;
                        header.tensors.push((key, entry));
                    }
                }
                Ok(header)
            }
        }
        d.deserialize_map(Fields)
    }
}

/// `__metadata__`: strings to strings, each key once.
#[derive(Default)]
struct UniqueStrings(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for UniqueStrings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = UniqueStrings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UniqueStrings, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((key, value)) = map.next_entry::<String, String>()? {
                    if out.contains_key(&key) {
                        return Err(de::Error::custom(format!("key {key:?} appears twice")));
                    }
                    out.insert(key, value);
                }
                Ok(UniqueStrings(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// A header entry exactly as the safetensors spec has it; anything more or
/// less is corruption.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// `sha256:<hex>` over a canonical encoding of everything in the file but
/// the checksum itself, so that a flipped bit anywhere — data, a shape, an
/// offset, a metadata value — is caught, independently of how the header
/// JSON happens to be laid out:
///
/// ```text
/// u64(#metadata entries without "checksum"), then per entry sorted by key: str(key) str(value)
/// u64(#tensors), then per tensor sorted by name:
///     str(name) str(dtype) u64(rank) u64(dim)... u64(begin) u64(end)
/// the data section, as stored
/// ```
///
/// where `u64` is 8 bytes little-endian and `str(s)` is `u64(len) bytes`.
/// `scripts/check_checkpoint_torch.py` recomputes it in Python.
fn checksum(layout: &Layout<'_>) -> String {
    let mut h = Sha256::new();
    let signed: Vec<(&String, &String)> = layout.metadata.iter().filter(|(k, _)| *k != KEY_CHECKSUM).collect();
    put_u64(&mut h, signed.len() as u64);
    for (key, value) in signed {
        put_str(&mut h, key);
        put_str(&mut h, value);
    }
    put_u64(&mut h, layout.entries.len() as u64);
    for e in &layout.entries {
        put_str(&mut h, &e.name);
        put_str(&mut h, &e.dtype);
        put_u64(&mut h, e.shape.len() as u64);
        for &d in &e.shape {
            put_u64(&mut h, d);
        }
        put_u64(&mut h, e.begin);
        put_u64(&mut h, e.end);
    }
    h.update(layout.data);
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{CHECKSUM_PREFIX}{hex}")
}

fn put_u64(h: &mut Sha256, n: u64) {
    h.update(n.to_le_bytes());
}

fn put_str(h: &mut Sha256, s: &str) {
    put_u64(h, s.len() as u64);
    h.update(s.as_bytes());
}
