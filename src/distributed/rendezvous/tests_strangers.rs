//! Strangers on the port: dropped, reported, never fatal to the group.

use super::super::waiting::MAX_REPORTED;
use super::super::wire::{
    read_exact_until, CHALLENGE, CHALLENGE_LEN, HELLO, HELLO_BODY, HELLO_LEN, MAGIC, PAYLOAD, REFUSE,
    REFUSED_NOT_ADMITTED, RETRY,
};
use super::*;
use crate::distributed::token::{Token, NONCE_LEN, PROOF_LEN};
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::thread::JoinHandle;

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
