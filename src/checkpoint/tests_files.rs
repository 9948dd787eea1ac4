//! Files in a directory: names, atomic writes, pruning, finding the latest
//! good one, and a full or unwritable disk.

use super::*;

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
fn a_checkpoint_directory_is_checked_before_a_run_needs_it_and_not_made() {
    let dir = TempDir::new("ckpt-writable");
    // Missing: not made, and nothing left where the probe went.
    let fresh = dir.path().join("a").join("b");
    check_writable(&fresh).unwrap();
    assert!(!dir.path().join("a").exists(), "the check made the directory");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "the probe was left behind"
    );
    // Present and empty: left empty.
    let present = dir.path().join("present");
    std::fs::create_dir(&present).unwrap();
    check_writable(&present).unwrap();
    assert_eq!(
        std::fs::read_dir(&present).unwrap().count(),
        0,
        "the probe was left behind"
    );
    // Under a regular file: no directory can be made there, even by root.
    let file = dir.write("plain-file", b"");
    for under in [file.join("sub"), file.clone()] {
        match check_writable(&under) {
            Err(e @ CheckpointError::CreateDir { .. }) => {
                assert_eq!(e.path(), Some(under.as_path()));
                assert!(e.to_string().contains("choose another directory"), "{e}");
            }
            other => panic!("{}: expected CreateDir, got {other:?}", under.display()),
        }
    }
    // A directory that exists but takes no files, even from root: /proc;
    // and one that does not exist under it.
    #[cfg(target_os = "linux")]
    {
        match check_writable(Path::new("/proc")) {
            Err(e @ CheckpointError::NotWritable { .. }) => {
                assert_eq!(e.path(), Some(Path::new("/proc")));
                assert!(e.to_string().contains("choose another directory"), "{e}");
            }
            other => panic!("expected NotWritable, got {other:?}"),
        }
        assert!(matches!(
            check_writable(Path::new("/proc/no-such-bumpgrad-dir/sub")),
            Err(CheckpointError::CreateDir { .. })
        ));
    }
    // The first checkpoint makes it.
    write_atomic(&fresh, &sample(1), 2).unwrap();
    assert!(fresh.join(file_name(1)).is_file());
}
