//! Rendezvous and watch, on 127.0.0.1 with one thread per rank.

use super::*;
use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;

const LONG: Duration = Duration::from_secs(10);

fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| vars.get(name).cloned()
}

fn env_error(vars: &[(&str, &str)]) -> (String, String) {
    match RendezvousConfig::from_lookup(lookup(vars), LONG) {
        Err(DistError::Env { var, value, reason }) => (var, format!("{value} / {reason}")),
        other => panic!("{vars:?}: expected an Env error, got {other:?}"),
    }
}

/// An address nobody listens on a moment ago.
fn free_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

fn id(seed: u8) -> [u8; PAYLOAD_LEN] {
    std::array::from_fn(|i| seed.wrapping_add(i as u8))
}

type Joined = Result<([u8; PAYLOAD_LEN], Links), DistError>;

/// Runs the rendezvous of each `(rank, world size)` in a thread of its
/// own, all on one address; results in the order given.
fn rendezvous_all(members: &[(usize, usize)], timeout: Duration) -> Vec<(Joined, Duration)> {
    let addr = free_addr();
    let threads: Vec<_> = members
        .iter()
        .map(|&(rank, world)| {
            let cfg = RendezvousConfig::new(rank, world, addr.clone(), timeout);
            thread::spawn(move || {
                let start = Instant::now();
                (rendezvous(&cfg, || Ok(id(7))), start.elapsed())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// A formed group of `world` ranks' links, by rank.
fn group(world: usize) -> Vec<Links> {
    let members: Vec<_> = (0..world).map(|rank| (rank, world)).collect();
    rendezvous_all(&members, LONG)
        .into_iter()
        .map(|(joined, _)| joined.unwrap().1)
        .collect()
}

/// Watches `links`; failures arrive on the receiver.
fn watch(links: Links, opts: WatchOptions) -> (Watch, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    let watch = links.watch(Arc::new(AtomicU64::new(0)), opts, move |m| {
        let _ = tx.send(m);
    });
    (watch, rx)
}

fn fast() -> WatchOptions {
    WatchOptions {
        heartbeat_timeout: Duration::from_secs(5),
        ..WatchOptions::default()
    }
}

/// The failure reported within `bound`, and how long it took.
fn failure_within(rx: &mpsc::Receiver<String>, bound: Duration) -> String {
    rx.recv_timeout(bound)
        .unwrap_or_else(|e| panic!("no failure reported within {bound:?} ({e})"))
}

fn assert_no_failure(rx: &mpsc::Receiver<String>) {
    if let Ok(message) = rx.try_recv() {
        panic!("unexpected failure: {message}");
    }
}

// ---- configuration from the environment --------------------------------

#[test]
fn a_plain_run_is_not_a_group() {
    assert_eq!(RendezvousConfig::from_lookup(lookup(&[]), LONG).unwrap(), None);
    let unrelated = [("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500"), ("RANK", "")];
    assert_eq!(RendezvousConfig::from_lookup(lookup(&unrelated), LONG).unwrap(), None);
}

#[test]
fn torchrun_variables_are_understood() {
    let vars = [
        ("RANK", "3"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "node7"),
        ("MASTER_PORT", "29500"),
    ];
    let cfg = RendezvousConfig::from_lookup(lookup(&vars), LONG).unwrap().unwrap();
    assert_eq!(
        cfg,
        RendezvousConfig {
            rank: 3,
            world_size: 4,
            addr: "node7:29500".into(),
            timeout: LONG,
            launched: false,
            local_rank: 1,
        }
    );
    assert_eq!(cfg.local_rank(), 1);

    let v6 = [
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "::1"),
        ("MASTER_PORT", "29500"),
    ];
    let cfg = RendezvousConfig::from_lookup(lookup(&v6), LONG).unwrap().unwrap();
    assert_eq!(cfg.addr, "[::1]:29500");
    assert_eq!(cfg.local_rank(), 0, "the rank when no local rank is given");
}

#[test]
fn bumpgrad_variables_win_over_torchrun_ones() {
    let vars = [
        ("RANK", "3"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "3"),
        ("MASTER_ADDR", "node7"),
        ("MASTER_PORT", "29500"),
        ("BUMPGRAD_RANK", "1"),
        ("BUMPGRAD_WORLD_SIZE", "2"),
        ("BUMPGRAD_LOCAL_RANK", "0"),
        ("BUMPGRAD_RENDEZVOUS", "127.0.0.1:4000"),
        ("BUMPGRAD_LAUNCHED", "1"),
        ("BUMPGRAD_RENDEZVOUS_TIMEOUT", "2.5"),
    ];
    let cfg = RendezvousConfig::from_lookup(lookup(&vars), LONG).unwrap().unwrap();
    assert_eq!(
        cfg,
        RendezvousConfig {
            rank: 1,
            world_size: 2,
            addr: "127.0.0.1:4000".into(),
            timeout: Duration::from_millis(2500),
            launched: true,
            local_rank: 0,
        }
    );
}

#[test]
fn a_group_of_one_needs_no_address() {
    let cfg = RendezvousConfig::from_lookup(lookup(&[("RANK", "0"), ("WORLD_SIZE", "1")]), LONG)
        .unwrap()
        .unwrap();
    assert_eq!((cfg.rank, cfg.world_size, cfg.addr.as_str()), (0, 1, ""));
}

#[test]
fn a_rank_beyond_the_world_size_is_refused() {
    let (var, why) = env_error(&[
        ("RANK", "4"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "h"),
        ("MASTER_PORT", "1"),
    ]);
    assert_eq!(var, "RANK");
    assert!(why.contains("from 0 to 3"), "{why}");
    let (var, _) = env_error(&[("BUMPGRAD_RANK", "2"), ("BUMPGRAD_WORLD_SIZE", "2")]);
    assert_eq!(var, "BUMPGRAD_RANK");
}

#[test]
fn malformed_or_missing_values_are_env_errors() {
    let addr = [("BUMPGRAD_RENDEZVOUS", "127.0.0.1:4000")];
    let with_addr = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        addr.iter().chain(extra).copied().collect()
    };
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (with_addr(&[("RANK", "one"), ("WORLD_SIZE", "2")]), "RANK"),
        (with_addr(&[("RANK", "0"), ("WORLD_SIZE", "-2")]), "WORLD_SIZE"),
        (with_addr(&[("RANK", "0"), ("WORLD_SIZE", "0")]), "WORLD_SIZE"),
        (with_addr(&[("RANK", "0")]), "RANK"),
        (with_addr(&[("WORLD_SIZE", "2")]), "WORLD_SIZE"),
        (
            with_addr(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "x")]),
            "LOCAL_RANK",
        ),
        (
            with_addr(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("BUMPGRAD_LAUNCHED", "yes")]),
            "BUMPGRAD_LAUNCHED",
        ),
        (
            with_addr(&[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("BUMPGRAD_RENDEZVOUS_TIMEOUT", "-1"),
            ]),
            "BUMPGRAD_RENDEZVOUS_TIMEOUT",
        ),
        (vec![("RANK", "0"), ("WORLD_SIZE", "2")], "BUMPGRAD_RENDEZVOUS"),
        (
            vec![("RANK", "0"), ("WORLD_SIZE", "2"), ("BUMPGRAD_RENDEZVOUS", "nohost")],
            "BUMPGRAD_RENDEZVOUS",
        ),
        (
            vec![("RANK", "0"), ("WORLD_SIZE", "2"), ("BUMPGRAD_RENDEZVOUS", "h:0")],
            "BUMPGRAD_RENDEZVOUS",
        ),
        (
            vec![("RANK", "0"), ("WORLD_SIZE", "2"), ("BUMPGRAD_RENDEZVOUS", ":80")],
            "BUMPGRAD_RENDEZVOUS",
        ),
        (
            vec![("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")],
            "MASTER_ADDR",
        ),
        (
            vec![
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "http"),
            ],
            "MASTER_PORT",
        ),
    ];
    for (vars, expected) in cases {
        let (var, why) = env_error(&vars);
        assert_eq!(var, expected, "{vars:?}: {why}");
    }
}

#[test]
fn env_errors_say_what_to_do() {
    let err = RendezvousConfig::from_lookup(lookup(&[("RANK", "0"), ("WORLD_SIZE", "2")]), LONG).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("BUMPGRAD_RENDEZVOUS=host:port"), "{text}");
}

// ---- forming the group ---------------------------------------------------

#[test]
fn every_rank_gets_rank_0s_payload() {
    let addr = free_addr();
    let made = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..3)
        .map(|rank| {
            let cfg = RendezvousConfig::new(rank, 3, addr.clone(), LONG);
            let made = made.clone();
            thread::spawn(move || {
                rendezvous(&cfg, || {
                    made.fetch_add(1, Ordering::SeqCst);
                    Ok(id(rank as u8 * 50 + 1))
                })
            })
        })
        .collect();
    for (rank, thread) in threads.into_iter().enumerate() {
        let (payload, links) = thread.join().unwrap().unwrap();
        assert_eq!(payload, id(1), "rank {rank} got rank 0's payload");
        assert_eq!((links.rank(), links.world_size()), (rank, 3));
        assert_eq!(links.peers.len(), if rank == 0 { 2 } else { 1 });
    }
    assert_eq!(made.load(Ordering::SeqCst), 1, "only rank 0 makes the payload, once");
}

#[test]
fn a_group_of_one_makes_its_payload_alone() {
    let cfg = RendezvousConfig::new(0, 1, "", LONG);
    let (payload, links) = rendezvous(&cfg, || Ok(id(9))).unwrap();
    assert_eq!(payload, id(9));
    assert!(links.peers.is_empty());
}

#[test]
fn a_missing_rank_times_the_rendezvous_out_everywhere() {
    let timeout = Duration::from_millis(500);
    for (rank, (joined, took)) in rendezvous_all(&[(0, 3), (1, 3)], timeout).into_iter().enumerate() {
        assert!(took < Duration::from_secs(3), "rank {rank} took {took:?}");
        match joined {
            Err(DistError::RendezvousTimeout {
                joined,
                world_size,
                waited_s,
                ..
            }) => {
                assert_eq!((joined, world_size), (2, 3), "rank {rank}");
                assert!(waited_s >= 0.4, "rank {rank} gave up after {waited_s} s");
            }
            other => panic!("rank {rank}: expected a timeout, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_timeout_message_says_what_to_check() {
    let cfg = RendezvousConfig::new(1, 2, free_addr(), Duration::from_millis(300));
    let start = Instant::now();
    let err = rendezvous(&cfg, || Ok(id(0))).map(|_| ()).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
    assert!(matches!(err, DistError::RendezvousTimeout { joined: 1, .. }), "{err:?}");
    let text = err.to_string();
    for needed in [
        "1 of 2 ranks joined",
        "same address and world size",
        "--rendezvous-timeout",
    ] {
        assert!(text.contains(needed), "{needed:?} missing from: {text}");
    }
}

#[test]
fn a_world_size_mismatch_fails_both_sides_at_once() {
    let results = rendezvous_all(&[(0, 3), (1, 2)], LONG);
    for (rank, (joined, took)) in results.into_iter().enumerate() {
        assert!(took < Duration::from_secs(3), "rank {rank} took {took:?}");
        match joined {
            Err(DistError::Protocol(why)) => assert!(why.contains("world size of 2, rank 0 with 3"), "{why}"),
            other => panic!("rank {rank}: expected a protocol error, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_duplicate_rank_fails_everyone_at_once() {
    let results = rendezvous_all(&[(0, 3), (1, 3), (1, 3)], LONG);
    for (i, (joined, took)) in results.into_iter().enumerate() {
        assert!(took < Duration::from_secs(3), "member {i} took {took:?}");
        match joined {
            Err(DistError::Protocol(why)) => assert!(why.contains("two processes joined as rank 1"), "{why}"),
            other => panic!("member {i}: expected a protocol error, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_stranger_on_the_port_is_a_protocol_error() {
    let addr = free_addr();
    let cfg = RendezvousConfig::new(0, 2, addr.clone(), LONG);
    let rank0 = thread::spawn(move || rendezvous(&cfg, || Ok(id(0))).map(|_| ()));
    let start = Instant::now();
    let mut stranger = loop {
        match TcpStream::connect(&addr) {
            Ok(stream) => break stream,
            Err(_) if start.elapsed() < Duration::from_secs(3) => thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("rank 0 never listened: {e}"),
        }
    };
    stranger.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let err = rank0.join().unwrap().unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
    assert!(
        matches!(&err, DistError::Protocol(why) if why.contains("wrong magic")),
        "{err}"
    );
}

#[test]
fn a_failed_payload_reaches_every_rank() {
    let addr = free_addr();
    let threads: Vec<_> = (0..2)
        .map(|rank| {
            let cfg = RendezvousConfig::new(rank, 2, addr.clone(), LONG);
            thread::spawn(move || rendezvous(&cfg, || Err("ncclGetUniqueId failed".into())).map(|_| ()))
        })
        .collect();
    for thread in threads {
        let err = thread.join().unwrap().unwrap_err();
        assert!(
            matches!(&err, DistError::Payload(why) if why == "ncclGetUniqueId failed"),
            "{err}"
        );
    }
}

#[test]
fn a_port_in_use_is_a_bind_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = RendezvousConfig::new(0, 2, taken.local_addr().unwrap().to_string(), LONG);
    let err = rendezvous(&cfg, || Ok(id(0))).map(|_| ()).unwrap_err();
    assert!(matches!(err, DistError::Bind { .. }), "{err}");
}

// ---- watching it ----------------------------------------------------------

#[test]
fn a_dead_rank_stops_the_whole_group() {
    let mut links = group(3).into_iter();
    let (l0, l1, l2) = (links.next().unwrap(), links.next().unwrap(), links.next().unwrap());
    let (w0, rx0) = watch(l0, fast());
    let (w2, rx2) = watch(l2, fast());
    let start = Instant::now();
    drop(l1); // rank 1 dies: its sockets close without a goodbye
    let at0 = failure_within(&rx0, Duration::from_secs(5));
    assert!(at0.starts_with("rank 1 stopped without a goodbye"), "{at0}");
    let at2 = failure_within(&rx2, Duration::from_secs(5));
    assert!(at2.starts_with("rank 0 stopped"), "{at2}");
    assert!(at2.contains("rank 1"), "rank 0 passes on why: {at2}");
    assert!(start.elapsed() < Duration::from_secs(5));
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
        let message = failure_within(&rx, Duration::from_secs(5));
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
    let message = failure_within(&rx0, Duration::from_secs(5));
    assert!(message.contains("rank 1"), "{message}");
    w0.finish();
}

#[test]
fn goodbyes_are_not_failures_whoever_finishes_first() {
    for order in [[1, 0, 2], [0, 2, 1]] {
        let mut watches: Vec<_> = group(3).into_iter().map(|l| Some(watch(l, fast()))).collect();
        thread::sleep(Duration::from_millis(200));
        let mut receivers = Vec::new();
        for rank in order {
            let (watch, rx) = watches[rank].take().unwrap();
            watch.finish();
            // The others see this goodbye and the close before they finish.
            thread::sleep(Duration::from_millis(300));
            receivers.push(rx);
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
    let (w0, rx0) = watch(links.next().unwrap(), opts);
    let _silent = links.next().unwrap(); // alive, connected, never watching
    let start = Instant::now();
    let message = failure_within(&rx0, Duration::from_secs(3));
    assert!(start.elapsed() >= Duration::from_millis(250), "{:?}", start.elapsed());
    assert_eq!(
        message,
        "rank 1 sent no heartbeat for 0.3 s; it is hung or its host is unreachable."
    );
    w0.finish();
}

#[test]
fn heartbeats_keep_a_quiet_group_alive() {
    let opts = WatchOptions {
        heartbeat_timeout: Duration::from_millis(2500),
        ..WatchOptions::default()
    };
    let watches: Vec<_> = group(2).into_iter().map(|l| watch(l, opts.clone())).collect();
    thread::sleep(Duration::from_millis(3500));
    for (watch, rx) in watches {
        assert_no_failure(&rx);
        watch.finish();
    }
}

#[test]
fn a_stall_stops_the_group() {
    let progress = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let opts = WatchOptions {
        stall_timeout: Some(Duration::from_millis(300)),
        ..WatchOptions::default()
    };
    let links = group(1).pop().unwrap();
    let watch = links.watch(progress.clone(), opts, move |m| {
        let _ = tx.send(m);
    });
    // Progress every 50 ms: no stall, for longer than the stall timeout.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(800) {
        progress.fetch_add(1, Ordering::Relaxed);
        thread::sleep(Duration::from_millis(50));
    }
    assert_no_failure(&rx);
    let stalled = Instant::now();
    let message = failure_within(&rx, Duration::from_secs(3));
    assert!(
        stalled.elapsed() >= Duration::from_millis(250),
        "{:?}",
        stalled.elapsed()
    );
    assert_eq!(
        message,
        "no training progress for 0.3 s (a rank is stuck in a collective?); stopping the group."
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
    let own = failure_within(&rx1, Duration::from_secs(3));
    assert!(own.starts_with("no training progress"), "{own}");
    for rx in [&rx0, &rx2] {
        let message = failure_within(rx, Duration::from_secs(3));
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
