//! Rendezvous and watch, on 127.0.0.1 with one thread per rank.

use super::*;
use std::sync::atomic::AtomicUsize;

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

// ---- forming the group ---------------------------------------------------

#[test]
fn every_rank_gets_rank_0s_payload() {
    let (listener, addr) = bound();
    let mut listener = Some(listener);
    let made = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..3)
        .map(|rank| {
            let cfg = RendezvousConfig::new(rank, 3, addr.clone(), LONG);
            let listener = if rank == 0 { listener.take() } else { None };
            let made = made.clone();
            thread::spawn(move || {
                let make = || {
                    made.fetch_add(1, Ordering::SeqCst);
                    Ok(id(rank as u8 * 50 + 1))
                };
                member(&cfg, listener, make, &mut quiet)
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
    let (payload, links) = rendezvous(&cfg, || Ok(id(9)), &mut quiet).unwrap();
    assert_eq!(payload, id(9));
    assert!(links.peers.is_empty());
}

#[test]
fn a_missing_rank_times_the_rendezvous_out_everywhere() {
    // Long enough for rank 1 to join on a loaded machine (90 ms at worst,
    // measured: see the top of this file): both must see 2.
    let timeout = Duration::from_secs(2);
    for (rank, (joined, took)) in rendezvous_all(&[(0, 3), (1, 3)], timeout).into_iter().enumerate() {
        assert!(took < timeout + PROMPT, "rank {rank} took {took:?}");
        match joined {
            Err(DistError::RendezvousTimeout {
                joined,
                world_size,
                waited_s,
                ..
            }) => {
                assert_eq!((joined, world_size), (2, 3), "rank {rank}");
                assert!(waited_s >= 1.9, "rank {rank} gave up after {waited_s} s");
            }
            other => panic!("rank {rank}: expected a timeout, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_timeout_message_says_what_to_check() {
    let (nobody, _held) = unreachable_addr();
    let cfg = RendezvousConfig::new(1, 2, nobody, Duration::from_millis(300));
    let start = Instant::now();
    let err = rendezvous(&cfg, || Ok(id(0)), &mut quiet).map(|_| ()).unwrap_err();
    assert!(start.elapsed() < PROMPT, "{:?}", start.elapsed());
    assert!(matches!(err, DistError::RendezvousTimeout { joined: 1, .. }), "{err:?}");
    let text = err.to_string();
    for needed in [
        "1 of 2 ranks joined",
        "same address and world size",
        "timed out after 0.",
    ] {
        assert!(text.contains(needed), "{needed:?} missing from: {text}");
    }
    // The flag that waits longer is the CLI's to name (its hints).
    assert!(!text.contains("--"), "{text}");
}

#[test]
fn a_world_size_mismatch_fails_both_sides_at_once() {
    let results = rendezvous_all(&[(0, 3), (1, 2)], LONG);
    for (rank, (joined, took)) in results.into_iter().enumerate() {
        assert!(took < PROMPT, "rank {rank} took {took:?}");
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
        assert!(took < PROMPT, "member {i} took {took:?}");
        match joined {
            Err(DistError::Protocol(why)) => assert!(why.contains("two processes joined as rank 1"), "{why}"),
            other => panic!("member {i}: expected a protocol error, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_failed_payload_reaches_every_rank() {
    let (listener, addr) = bound();
    let mut listener = Some(listener);
    let threads: Vec<_> = (0..2)
        .map(|rank| {
            let cfg = RendezvousConfig::new(rank, 2, addr.clone(), LONG);
            let listener = if rank == 0 { listener.take() } else { None };
            thread::spawn(move || {
                member(&cfg, listener, || Err("ncclGetUniqueId failed".into()), &mut quiet).map(|_| ())
            })
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
    let err = rendezvous(&cfg, || Ok(id(0)), &mut quiet).map(|_| ()).unwrap_err();
    assert!(matches!(err, DistError::Bind { .. }), "{err}");
}

// ---- strangers on the port -------------------------------------------------

/// Rank 0 in a thread of its own, its log lines kept.
struct Leader {
    addr: String,
    thread: JoinHandle<Joined>,
    log: mpsc::Receiver<String>,
    seen: Vec<String>,
}

fn start_rank_0(world: usize, token: Option<Token>) -> Leader {
    let (listener, addr) = bound();
    let cfg = RendezvousConfig::new(0, world, addr.clone(), STRANGERS_TIMEOUT).with_token(token);
    let (tx, log) = mpsc::channel();
    let thread = thread::spawn(move || {
        lead_on(listener, &cfg, || Ok(id(1)), &mut |line| {
            let _ = tx.send(line.to_string());
        })
    });
    Leader {
        addr,
        thread,
        log,
        seen: Vec::new(),
    }
}

impl Leader {
    /// A connection to rank 0, which listens from the start (its listener
    /// was bound before its thread began) until the group forms.
    fn connect(&self) -> TcpStream {
        TcpStream::connect(&self.addr).expect("rank 0's listener")
    }

    /// Waits for (and returns) the first log line that has every needle.
    fn line_with(&mut self, needles: &[&str]) -> String {
        let found = |line: &String| needles.iter().all(|n| line.contains(n));
        if let Some(line) = self.seen.iter().find(|l| found(l)) {
            return line.clone();
        }
        loop {
            match self.log.recv_timeout(LONG) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if found(&line) {
                        return line;
                    }
                }
                Err(e) => panic!("no log line with {needles:?} ({e}); seen: {:#?}", self.seen),
            }
        }
    }

    /// Starts ranks 1 to `world - 1`, with `token`.
    fn joiners(&self, world: usize, token: Option<Token>) -> Vec<JoinHandle<Joined>> {
        (1..world)
            .map(|rank| {
                let cfg =
                    RendezvousConfig::new(rank, world, self.addr.clone(), STRANGERS_TIMEOUT).with_token(token.clone());
                thread::spawn(move || rendezvous(&cfg, || Ok(id(99)), &mut quiet))
            })
            .collect()
    }

    /// Asserts that rank 0 and `joiners` formed one group, and that its
    /// links carry goodbyes; returns every line rank 0 logged.
    fn formed(mut self, joiners: Vec<JoinHandle<Joined>>) -> Vec<String> {
        let mut links = vec![self.thread.join().unwrap().map(|(payload, links)| {
            assert_eq!(payload, id(1));
            links
        })];
        for joiner in joiners {
            links.push(joiner.join().unwrap().map(|(payload, links)| {
                assert_eq!(payload, id(1), "rank 0's payload");
                links
            }));
        }
        let links: Vec<Links> = links
            .into_iter()
            .enumerate()
            .map(|(rank, l)| l.unwrap_or_else(|e| panic!("rank {rank} did not join: {e}")))
            .collect();
        finish_cleanly(links);
        self.seen.extend(self.log.iter());
        self.seen
    }
}

/// Watches a formed group, then ends it rank by rank, each goodbye seen
/// by rank 0 before the next; no rank may see a failure.
fn finish_cleanly(links: Vec<Links>) {
    let world = links.len();
    let mut watches: Vec<_> = links.into_iter().map(|l| watch(l, fast())).collect();
    let (w0, rx0) = watches.remove(0);
    for (i, (w, rx)) in watches.into_iter().enumerate() {
        w.finish();
        wait_until("rank 0 sees the goodbye", PROMPT, || w0.watching() == world - 2 - i);
        assert_no_failure(&rx);
    }
    w0.finish();
    assert_no_failure(&rx0);
}

/// Rank 0's challenge, as a stranger reads it.
fn read_challenge(stream: &TcpStream) -> [u8; CHALLENGE_LEN] {
    let mut challenge = [0u8; CHALLENGE_LEN];
    read_exact_until(stream, &mut challenge, Instant::now() + PROMPT).expect("rank 0's challenge");
    assert_eq!((challenge[0], &challenge[1..5]), (CHALLENGE, &MAGIC[..]));
    challenge
}

/// What rank 0 sent after its challenge, until it closed the connection.
fn rest_of(mut stream: &TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(PROMPT)).unwrap();
    let mut rest = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return rest,
            Ok(n) => rest.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return rest,
            Err(e) => panic!("rank 0 did not close the connection: {e}"),
        }
    }
}

/// A hello as a rank sends it, with `proof`.
fn hello_frame(rank: u32, world: u32, proof: [u8; PROOF_LEN]) -> [u8; HELLO_LEN] {
    let mut hello = [0u8; HELLO_LEN];
    hello[0] = HELLO;
    hello[1..5].copy_from_slice(&MAGIC);
    hello[5..9].copy_from_slice(&(HELLO_BODY as u32).to_le_bytes());
    hello[9..13].copy_from_slice(&rank.to_le_bytes());
    hello[13..17].copy_from_slice(&world.to_le_bytes());
    hello[17..].copy_from_slice(&proof);
    hello
}

/// Deterministic noise, as a port scanner's probe might look.
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `stranger` sends `bytes` to rank 0 of a group of 3 and is dropped for
/// `reason`, reported once; then the real ranks form their group.
fn dropped_for(bytes: &[u8], reason: &str) {
    let mut leader = start_rank_0(3, None);
    let mut stranger = leader.connect();
    let from = stranger.local_addr().unwrap().to_string();
    stranger.write_all(bytes).unwrap();
    stranger.shutdown(Shutdown::Write).unwrap();
    let line = leader.line_with(&[&from]);
    assert!(line.contains(reason), "{line}");
    // Rank 0 closed the connection without taking it for a rank.
    let _ = read_challenge(&stranger);
    assert!(!rest_of(&stranger).contains(&PAYLOAD));
    let joiners = leader.joiners(3, None);
    let log = leader.formed(joiners);
    assert_eq!(
        log.iter().filter(|l| l.contains(&from)).count(),
        1,
        "reported once: {log:#?}"
    );
}

#[test]
fn a_stranger_sending_random_bytes_is_dropped_and_the_group_forms() {
    let bytes = noise(4096);
    assert_ne!(bytes[0], HELLO, "the noise does not begin like a hello");
    dropped_for(&bytes, "does not speak bumpgrad's rendezvous protocol (wrong magic)");
}

#[test]
fn a_hello_claiming_a_huge_length_is_dropped_and_the_group_forms() {
    let mut bytes = vec![HELLO];
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(&noise(64));
    dropped_for(&bytes, "claims a body of 4294967295 bytes where this version's has 40");
}

#[test]
fn an_older_bumpgrad_or_a_cut_hello_is_dropped_with_its_reason() {
    let old = [&[HELLO][..], b"BGR1", &1u32.to_le_bytes(), &2u32.to_le_bytes()].concat();
    dropped_for(&old, "an older version of bumpgrad's rendezvous protocol (BGR1)");
    dropped_for(
        &hello_frame(1, 3, [0; PROOF_LEN])[..20],
        "closed the connection 20 bytes into a hello of 49",
    );
}

#[test]
fn silent_connections_held_open_do_not_hold_up_the_group() {
    let leader = start_rank_0(3, None);
    let silent: Vec<TcpStream> = (0..8).map(|_| leader.connect()).collect();
    let joiners = leader.joiners(3, None);
    let start = Instant::now();
    let log = leader.formed(joiners);
    // Formed within 216 ms at worst under load (see the top of this file).
    assert!(
        start.elapsed() < HELLO_WAIT,
        "waited on the silent ones: {:?}",
        start.elapsed()
    );
    for stream in &silent {
        let _ = read_challenge(stream);
        assert_eq!(rest_of(stream), b"", "closed when the group formed");
        let from = stream.local_addr().unwrap().to_string();
        let lines: Vec<_> = log.iter().filter(|l| l.contains(&from)).collect();
        assert_eq!(lines.len(), 1, "{log:#?}");
        assert!(
            lines[0].ends_with("the group formed before it sent a whole hello"),
            "{}",
            lines[0]
        );
    }
}

#[test]
fn a_silent_connection_is_dropped_at_its_hello_deadline_and_told_to_retry() {
    let mut leader = start_rank_0(2, None);
    let connected = Instant::now();
    let silent = leader.connect();
    let from = silent.local_addr().unwrap().to_string();
    let line = leader.line_with(&[&from]);
    assert!(connected.elapsed() >= HELLO_WAIT, "{:?}", connected.elapsed());
    assert!(line.ends_with("it sent no whole hello within 3 s"), "{line}");
    let _ = read_challenge(&silent);
    assert_eq!(rest_of(&silent), [RETRY], "a slow rank would connect again");
    let joiners = leader.joiners(2, None);
    leader.formed(joiners);
}

#[test]
fn two_hundred_connections_opened_and_closed_do_not_stop_the_group() {
    let started = Instant::now();
    let mut leader = start_rank_0(3, None);
    let crowd: Vec<TcpStream> = (0..200).map(|_| leader.connect()).collect();
    // Past the cap, the oldest waiting ones make room; reports stop at
    // MAX_REPORTED.
    leader.line_with(&["counted, not reported one by one"]);
    let joiners = leader.joiners(3, None);
    let log = leader.formed(joiners);
    // Not held up by the crowd, still open: one at a time, each waited on
    // for its hello, they would take rank 0's whole timeout. 1.23 s at
    // worst under load (see the top of this file).
    assert!(started.elapsed() < STRANGERS_TIMEOUT / 2, "{:?}", started.elapsed());
    drop(crowd);
    assert!(log.len() <= MAX_REPORTED + 2, "bounded output: {log:#?}");
    let summary = log.last().unwrap();
    let dropped: usize = summary
        .strip_prefix("dropped ")
        .and_then(|s| s.strip_suffix(" connections in all that were not ranks of this run"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count: {summary}"));
    assert!((MAX_REPORTED + 1..=200).contains(&dropped), "{summary}");
}

#[test]
fn past_the_cap_the_oldest_waiting_connection_makes_room() {
    let mut leader = start_rank_0(2, None);
    let crowd: Vec<TcpStream> = (0..MAX_WAITING + 3).map(|_| leader.connect()).collect();
    for stream in &crowd[..3] {
        let from = stream.local_addr().unwrap().to_string();
        let line = leader.line_with(&[&from]);
        assert!(
            line.ends_with("it was the oldest of more than 64 connections waiting for their hello"),
            "{line}"
        );
        let _ = read_challenge(stream);
        assert_eq!(rest_of(stream), [RETRY]);
    }
    let joiners = leader.joiners(2, None);
    let log = leader.formed(joiners);
    // Every one of the crowd was dropped once (evicted, timed out, or
    // left when the group formed), and the joiner was not.
    assert_eq!(
        log.last().unwrap(),
        &format!(
            "dropped {} connections in all that were not ranks of this run",
            MAX_WAITING + 3
        )
    );
}

#[test]
fn a_rank_with_the_wrong_token_is_turned_away_and_the_group_forms() {
    let token = Token::new("this job's secret");
    let mut leader = start_rank_0(2, token.clone());
    let impostor =
        RendezvousConfig::new(1, 2, leader.addr.clone(), STRANGERS_TIMEOUT).with_token(Token::new("a guess"));
    match rendezvous(&impostor, || Ok(id(66)), &mut quiet) {
        Err(DistError::NotAdmitted { reason, .. }) => assert!(reason.contains("did not check out"), "{reason}"),
        other => panic!("the impostor: expected NotAdmitted, got {:?}", other.map(|(p, _)| p)),
    }
    leader.line_with(&["its hello as rank 1 of 2 does not prove knowledge of this job's token"]);
    let joiners = leader.joiners(2, token);
    leader.formed(joiners);
}

#[test]
fn with_a_token_a_forged_hello_cannot_take_rank_1s_place() {
    let token = Token::new("this job's secret");
    let mut leader = start_rank_0(2, token.clone());
    let forger = leader.connect();
    let challenge = read_challenge(&forger);
    assert_eq!(challenge[5], 1, "rank 0 says it needs a token");
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&challenge[6..]);
    // The forger knows the protocol and the nonce, not the token.
    let guess = Token::new("a guess").unwrap().prove(&nonce, 1, 2);
    (&forger).write_all(&hello_frame(1, 2, guess)).unwrap();
    let answer = rest_of(&forger);
    assert_eq!(answer[..2], [REFUSE, REFUSED_NOT_ADMITTED], "{answer:?}");
    let from = forger.local_addr().unwrap().to_string();
    leader.line_with(&[&from, "does not prove knowledge of this job's token"]);
    // The real rank 1 still gets its place.
    let joiners = leader.joiners(2, token);
    leader.formed(joiners);
}

#[test]
fn with_a_token_a_duplicate_rank_or_another_world_size_still_fails_the_group() {
    let token = Token::new("this job's secret");
    let (listener, addr) = bound();
    let start = |rank, world, listener| {
        let cfg = RendezvousConfig::new(rank, world, addr.clone(), LONG).with_token(token.clone());
        thread::spawn(move || member(&cfg, listener, || Ok(id(1)), &mut quiet).map(|_| ()))
    };
    let rank0 = start(0, 3, Some(listener));
    let others = [start(1, 3, None), start(1, 3, None)];
    for member in [rank0].into_iter().chain(others) {
        let err = member.join().unwrap().unwrap_err();
        assert!(
            matches!(&err, DistError::Protocol(why) if why.contains("two processes joined as rank 1")),
            "{err}"
        );
    }
    let mismatched = rendezvous_all(&[(0, 3), (1, 2)], LONG);
    for (joined, _) in mismatched {
        assert!(matches!(joined, Err(DistError::Protocol(_))));
    }
}

#[test]
fn a_token_on_one_side_only_is_a_clear_error() {
    for (rank0, joiner, needed) in [
        (
            Token::new("t"),
            None,
            "rank 0 admits only ranks that know the job's token, and this rank has none",
        ),
        (None, Token::new("t"), "this rank has a token but rank 0 has none"),
    ] {
        let leader = start_rank_0(2, rank0);
        let cfg = RendezvousConfig::new(1, 2, leader.addr.clone(), STRANGERS_TIMEOUT).with_token(joiner);
        let err = rendezvous(&cfg, || Ok(id(0)), &mut quiet).map(|_| ()).unwrap_err();
        assert!(
            matches!(&err, DistError::NotAdmitted { reason, .. } if reason.contains(needed)),
            "{err}"
        );
        assert!(err.to_string().contains("BUMPGRAD_RENDEZVOUS_TOKEN"), "{err}");
    }
}

#[test]
fn once_the_group_has_formed_new_connections_are_refused() {
    let mut links = group(2);
    let addr = links[0].peers[0].stream.local_addr().unwrap();
    let late = TcpStream::connect_timeout(&addr, PROMPT);
    match late {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}"),
        Ok(stream) => panic!("a connection after the group formed: {stream:?}"),
    }
    let l1 = links.pop().unwrap();
    let l0 = links.pop().unwrap();
    finish_cleanly(vec![l0, l1]);
}

#[test]
fn a_joiner_told_to_retry_connects_again() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let rank0 = thread::spawn(move || {
        let (first, _) = listener.accept().unwrap();
        (&first).write_all(&[RETRY]).unwrap();
        drop(first);
        let (second, _) = listener.accept().unwrap();
        let mut challenge = [0u8; CHALLENGE_LEN];
        challenge[0] = CHALLENGE;
        challenge[1..5].copy_from_slice(&MAGIC);
        (&second).write_all(&challenge).unwrap();
        let mut hello = [0u8; HELLO_LEN];
        read_exact_until(&second, &mut hello, Instant::now() + PROMPT).unwrap();
        let frame = [&[PAYLOAD][..], &id(5)].concat();
        (&second).write_all(&frame).unwrap();
        hello
    });
    let cfg = RendezvousConfig::new(1, 2, addr, LONG);
    let (payload, _links) = rendezvous(&cfg, || Ok(id(0)), &mut quiet).unwrap();
    assert_eq!(payload, id(5));
    assert_eq!(rank0.join().unwrap(), hello_frame(1, 2, [0; PROOF_LEN]));
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
