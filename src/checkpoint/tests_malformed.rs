//! Malformed files: each gets the error that names what is wrong.

use super::*;

/// A safetensors file with exactly this header and data.
fn raw(header: serde_json::Value, data: &[u8]) -> Vec<u8> {
    let header = header.to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
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
