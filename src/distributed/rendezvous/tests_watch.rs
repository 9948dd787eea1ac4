//! Watching the group: one failure reaches every rank; goodbyes do not.

use super::super::watcher::{parse, until_eof, Message};
use super::super::wire::{clip, fail_frame, MAX_TEXT};
use super::*;
use std::sync::atomic::Ordering;

#[test]
fn a_dead_rank_stops_the_whole_group() {
    let mut links = group(3).into_iter();
    let (l0, l1, l2) = (links.next().unwrap(), links.next().unwrap(), links.next().unwrap());
    let (w0, rx0) = watch(l0, fast());
    let (w2, rx2) = watch(l2, fast());
    let start = Instant::now();
    drop(l1); // rank 1 dies: its sockets close without a goodbye
    let at0 = failure_within(&rx0, PROMPT);
    assert!(at0.starts_with("rank 1 stopped without a goodbye"), "{at0}");
    let at2 = failure_within(&rx2, PROMPT);
    assert!(at2.starts_with("rank 0 stopped"), "{at2}");
    assert!(at2.contains("rank 1"), "rank 0 passes on why: {at2}");
    assert!(start.elapsed() < PROMPT);
    w0.finish();
    w2.finish();
    assert!(
        rx0.try_recv().is_err() && rx2.try_recv().is_err(),
        "on_failure runs once"
    );
}

#[test]
fn rank_0_dying_stops_the_others() {
    let mut links = group(3).into_iter();
    let l0 = links.next().unwrap();
    let watches: Vec<_> = links.map(|l| watch(l, fast())).collect();
    drop(l0);
    for (watch, rx) in watches {
        let message = failure_within(&rx, PROMPT);
        assert!(message.starts_with("rank 0 stopped without a goodbye"), "{message}");
        watch.finish();
    }
}

#[test]
fn dropping_a_watch_without_finishing_is_a_failure() {
    let mut links = group(2).into_iter();
    let (w0, rx0) = watch(links.next().unwrap(), fast());
    let (w1, _rx1) = watch(links.next().unwrap(), fast());
    drop(w1);
    let message = failure_within(&rx0, PROMPT);
    assert!(message.contains("rank 1"), "{message}");
    w0.finish();
}

#[test]
fn goodbyes_are_not_failures_whoever_finishes_first() {
    // After each goodbye, the ranks still watching see it and the close
    // (they stop watching that link) before they finish themselves.
    for (order, left_after) in [
        ([1, 0, 2], [[None, Some(1), Some(1)], [None, None, Some(0)]]),
        ([0, 2, 1], [[None, Some(0), Some(0)], [None, Some(0), None]]),
    ] {
        let mut watches: Vec<_> = group(3).into_iter().map(|l| Some(watch(l, fast()))).collect();
        let mut receivers = Vec::new();
        for (step, rank) in order.into_iter().enumerate() {
            let (watch, rx) = watches[rank].take().unwrap();
            watch.finish();
            receivers.push(rx);
            for (other, left) in left_after.get(step).into_iter().flatten().enumerate() {
                if let (Some(left), Some((w, _))) = (left, &watches[other]) {
                    wait_until(&format!("rank {other} sees rank {rank}'s goodbye"), PROMPT, || {
                        w.watching() == *left
                    });
                }
            }
        }
        for rx in &receivers {
            assert_no_failure(rx);
        }
    }
}

#[test]
fn a_silent_peer_misses_its_heartbeats() {
    let mut links = group(2).into_iter();
    let opts = WatchOptions {
        heartbeat_timeout: Duration::from_millis(300),
        ..WatchOptions::default()
    };
    // Before the watch starts: the timeout counts from then at the latest.
    let start = Instant::now();
    let (w0, rx0) = watch(links.next().unwrap(), opts);
    let _silent = links.next().unwrap(); // alive, connected, never watching
    let message = failure_within(&rx0, PROMPT);
    assert!(start.elapsed() >= Duration::from_millis(300), "{:?}", start.elapsed());
    assert_eq!(
        message,
        "rank 1 sent no heartbeat for 0.3 s; it is hung or its host is unreachable."
    );
    w0.finish();
}

#[test]
fn heartbeats_keep_a_quiet_group_alive() {
    // Beats every 0.2 s against a 3 s timeout: a watch thread would have to
    // be kept off the CPU for 2.8 s to miss them (60 ms at worst under load:
    // see the top of this file). Watching 4 s, longer than
    // the timeout, is what shows that the beats (and nothing else) count.
    let opts = WatchOptions {
        heartbeat_timeout: Duration::from_secs(3),
        heartbeat_every: Duration::from_millis(200),
        ..WatchOptions::default()
    };
    let watches: Vec<_> = group(2).into_iter().map(|l| watch(l, opts.clone())).collect();
    thread::sleep(Duration::from_secs(4));
    for (watch, rx) in watches {
        assert_no_failure(&rx);
        watch.finish();
    }
}

#[test]
fn a_stall_stops_the_group() {
    let progress = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    // A 2 s stall timeout against progress every 50 ms: the progressing
    // thread would have to be kept off the CPU for 2 s to look stalled (its
    // longest gap under load was 78 ms: see the top of this file).
    let opts = WatchOptions {
        stall_timeout: Some(Duration::from_secs(2)),
        ..WatchOptions::default()
    };
    let links = group(1).pop().unwrap();
    let watch = links.watch(progress.clone(), opts, move |m| {
        let _ = tx.send(m);
    });
    // No stall, for longer than the stall timeout.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2500) {
        progress.fetch_add(1, Ordering::Relaxed);
        thread::sleep(Duration::from_millis(50));
    }
    assert_no_failure(&rx);
    let stalled = Instant::now();
    progress.fetch_add(1, Ordering::Relaxed);
    let message = failure_within(&rx, PROMPT);
    assert!(stalled.elapsed() >= Duration::from_secs(2), "{:?}", stalled.elapsed());
    assert_eq!(
        message,
        "no training progress for 2 s (a rank is stuck in a collective?); stopping the group."
    );
    watch.finish();
}

#[test]
fn a_stalled_rank_tells_the_whole_group_why() {
    let mut links = group(3).into_iter();
    let (w0, rx0) = watch(links.next().unwrap(), fast());
    let stalling = WatchOptions {
        stall_timeout: Some(Duration::from_millis(300)),
        ..fast()
    };
    let (w1, rx1) = watch(links.next().unwrap(), stalling);
    let (w2, rx2) = watch(links.next().unwrap(), fast());
    let own = failure_within(&rx1, PROMPT);
    assert!(own.starts_with("no training progress"), "{own}");
    for rx in [&rx0, &rx2] {
        let message = failure_within(rx, PROMPT);
        assert_eq!(message, format!("rank 1 stopped the group: {own}"));
    }
    for w in [w0, w1, w2] {
        w.finish();
    }
}

#[test]
fn the_launchers_end_stops_the_rank() {
    let (reader, writer) = io::pipe().unwrap();
    let gone = until_eof(reader);
    let (tx, rx) = mpsc::channel();
    let links = group(1).pop().unwrap();
    let opts = WatchOptions {
        launched: true,
        ..WatchOptions::default()
    };
    let watch = links.watch_with(Arc::new(AtomicU64::new(0)), opts, Some(gone), move |m| {
        let _ = tx.send(m);
    });
    thread::sleep(Duration::from_millis(200));
    assert_no_failure(&rx);
    drop(writer);
    // 63 ms at worst under load (see the top of this file).
    let message = failure_within(&rx, Duration::from_secs(3));
    assert!(message.starts_with("the launcher exited"), "{message}");
    watch.finish();
}

#[test]
fn messages_parse_only_when_whole() {
    let frame = fail_frame(2, "why");
    for cut in 0..frame.len() {
        assert!(parse(&frame[..cut]).is_none(), "cut at {cut}");
    }
    match parse(&frame) {
        Some((Message::Fail { origin, reason }, used)) => assert_eq!((origin, reason.as_str(), used), (2, "why", 10)),
        _ => panic!("a whole FAIL"),
    }
    let long = "é".repeat(MAX_TEXT);
    assert!(clip(&long).len() <= MAX_TEXT && clip(&long).chars().all(|c| c == 'é'));
}
