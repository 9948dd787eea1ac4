//! Rendezvous and watch, on 127.0.0.1 with one thread per rank.

use super::lead::lead_on;
use super::*;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

#[path = "tests_forming.rs"]
mod forming;
#[path = "tests_strangers.rs"]
mod strangers;
#[path = "tests_watch.rs"]
mod watch;

/// A timeout no healthy test comes near.
const LONG: Duration = Duration::from_secs(60);
/// What "at once" means on a loaded 2-core machine.
const PROMPT: Duration = Duration::from_secs(10);

// The bounds below 5 s in these tests are margins, each measured on a
// 2-core machine under load: two busy loops on both cores while four other
// cargo builds ran (load average 11-12), 12 runs of this module. Worst
// seen, against the bound:
// - a rank joining a group of 2: 90 ms (240 joins), against 2 s;
// - a group of 3 forming past 8 silent connections: 216 ms, against 3 s;
// - 200 connections and a group of 3: 1.23 s (of which 1 s is one connect
//   whose SYN was dropped while rank 0's accept queue of 128 was full, and
//   sent again), against 5 s;
// - a thread sleeping 200 ms waking late: 60 ms, against the 2.8 s a
//   heartbeat may be late; a 50 ms progress loop's longest gap: 78 ms,
//   against 2 s;
// - the launcher's end reported: 63 ms after its pipe closed, against 3 s.
/// The ranks' timeout in the stranger tests: shorter than what the
/// strangers would cost if each held rank 0 up (several seconds each), far
/// longer than a group needs to form.
const STRANGERS_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener on a port of 127.0.0.1 the system chose, and its address.
/// Rank 0 is handed the listener itself ([`lead_on`]): a port merely found
/// free could be taken by another test or process before rank 0 bound it.
fn bound() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// The rendezvous of `cfg`, on `listener` when it is rank 0 of a group.
fn member(
    cfg: &RendezvousConfig,
    listener: Option<TcpListener>,
    make_payload: impl FnOnce() -> Result<[u8; PAYLOAD_LEN], String>,
    log: &mut dyn FnMut(&str),
) -> Joined {
    match listener {
        Some(listener) if cfg.rank == 0 && cfg.world_size > 1 => lead_on(listener, cfg, make_payload, log),
        _ => rendezvous(cfg, make_payload, log),
    }
}

/// An address nobody listens on, nor can while the returned connection
/// lives: its port is the local end of that connection, which holds it
/// (without SO_REUSEADDR, so no listener can bind it), and a connection to
/// it finds no listener.
fn unreachable_addr() -> (String, [TcpStream; 2]) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let ours = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (theirs, _) = listener.accept().unwrap();
    (ours.local_addr().unwrap().to_string(), [ours, theirs])
}

fn id(seed: u8) -> [u8; PAYLOAD_LEN] {
    std::array::from_fn(|i| seed.wrapping_add(i as u8))
}

fn quiet(_: &str) {}

type Joined = Result<([u8; PAYLOAD_LEN], Links), DistError>;

/// Runs the rendezvous of each `(rank, world size)` in a thread of its
/// own, all on one address; results in the order given.
fn rendezvous_all(members: &[(usize, usize)], timeout: Duration) -> Vec<(Joined, Duration)> {
    let (listener, addr) = bound();
    let mut listener = Some(listener);
    let threads: Vec<_> = members
        .iter()
        .map(|&(rank, world)| {
            let cfg = RendezvousConfig::new(rank, world, addr.clone(), timeout);
            let listener = if rank == 0 { listener.take() } else { None };
            thread::spawn(move || {
                let start = Instant::now();
                (member(&cfg, listener, || Ok(id(7)), &mut quiet), start.elapsed())
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
        heartbeat_timeout: Duration::from_secs(20),
        ..WatchOptions::default()
    }
}

/// The failure reported within `bound`.
fn failure_within(rx: &mpsc::Receiver<String>, bound: Duration) -> String {
    rx.recv_timeout(bound)
        .unwrap_or_else(|e| panic!("no failure reported within {bound:?} ({e})"))
}

fn assert_no_failure(rx: &mpsc::Receiver<String>) {
    if let Ok(message) = rx.try_recv() {
        panic!("unexpected failure: {message}");
    }
}

/// Waits until `done` holds, failing the test after `bound`.
fn wait_until(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        thread::sleep(Duration::from_millis(5));
    }
}
