//! Memory is flat: after the first epoch, nothing grows. Alone in its test
//! binary, so that the process's resident memory is this run's alone.

use bumpgrad::train::{resident_bytes, DeviceConfig, EpochReport, Pipeline, Quiet, TrainConfig};

/// Pages the process may still take between epoch 2 and epoch 10. The soak
/// runs (`bench/results/soak-*-2026-11-30-*.txt`) each saw resident memory
/// take one more page once (CPU at epoch 5, GPU at epoch 7) and then stay
/// flat to the end: memory touched for the first time late, not growth per
/// epoch. Four pages leave room for that; anything kept per epoch or per
/// step that is touched (a report, a buffer) passes them within 8 epochs.
const SETTLING_PAGES: u64 = 4;

/// The size of a page as the system reports it (never assumed to be 4 KiB).
fn page_size() -> u64 {
    // SAFETY: sysconf takes no pointer and has no precondition.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).expect("sysconf(_SC_PAGESIZE)")
}

/// The kernel's own figure for the resident set, in bytes: `VmRSS` of
/// `/proc/self/status`, counted in KiB, needing no page size.
fn vm_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS kB");
    kib * 1024
}

#[test]
fn memory_is_flat_from_epoch_2_to_epoch_10() {
    let cfg = TrainConfig::builder()
        .epochs(10)
        .data_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist"))
        .train_limit(2000)
        .test_limit(1000)
        .device_config(DeviceConfig::cpu(2))
        .build();
    let (mut session, info) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("session");
    let capacity = info.arena.capacity_bytes;
    let reports: Vec<EpochReport> =
        session.on_workers(|session| (1..=10).map(|e| session.epoch(e, &mut Quiet).expect("epoch")).collect());
    let (second, tenth) = (&reports[1], &reports[9]);
    assert_eq!(second.arena.step_high_water_bytes, tenth.arena.step_high_water_bytes);
    assert_eq!(second.arena.persistent_bytes, tenth.arena.persistent_bytes);
    assert_eq!(tenth.arena.capacity_bytes, capacity, "the arena never grows");
    assert!(tenth.arena.resets > second.arena.resets);

    // The reports count resident memory in the system's pages: read now,
    // with nothing else running, it is the kernel's VmRSS give or take the
    // pages the two reads themselves touch.
    let page = page_size();
    let (reported, kernel) = (resident_bytes().expect("rss"), vm_rss());
    assert!(
        reported.abs_diff(kernel) <= SETTLING_PAGES * page,
        "resident_bytes() says {reported} B, the kernel's VmRSS {kernel} B (pages of {page} B)"
    );

    let (rss2, rss10) = (second.resident_bytes.expect("rss"), tenth.resident_bytes.expect("rss"));
    let grown = rss10.saturating_sub(rss2);
    assert!(
        grown <= SETTLING_PAGES * page,
        "resident memory grew by {grown} B ({} pages of {page} B) from epoch 2 ({rss2} B) to epoch 10 ({rss10} B); \
         at most {SETTLING_PAGES} pages may settle",
        grown / page
    );
}
