//! Forming a group of ranks over TCP, and watching it while it trains.
//!
//! Rank 0 listens on the rendezvous address and sends every connection a
//! challenge: a fresh random nonce. A rank answers with a hello saying who
//! it is and proving that it knows the job's token (see [`super::token`]),
//! and once every rank has joined it receives the 128-byte payload (the
//! NCCL unique id) that rank 0 makes once. The star of connections then
//! stays open for [`Links::watch`]: heartbeats both ways, a goodbye on a
//! clean end, and a failure notice when a rank stops the group, which rank
//! 0 relays to everyone else by closing every link.
//!
//! # Who can connect
//!
//! Anything that reaches the port: port scanners, health checks, a rank of
//! another job. Such a stranger is dropped, never fatal: a connection that
//! sends the wrong magic, a malformed hello, a proof that does not check
//! out, or no whole hello within [`HELLO_WAIT`] is closed and reported once
//! through the caller's log, and rank 0 goes on waiting for the real ranks
//! until its own timeout. What strangers can cost is bounded: at most
//! [`MAX_WAITING`] connections (or the world size, if larger) wait for their
//! hello at once, a new one beyond that evicting the oldest; each waits at
//! most [`HELLO_WAIT`]; its bytes go to a fixed buffer of one hello, so no
//! length a stranger sends sizes any allocation. A hello with a good proof
//! (or, without a token, any well-formed hello) is a rank of this job: a
//! world size or a rank that does not fit is this job's misconfiguration
//! and fails the whole group. Once the group has formed the listener is
//! closed, so later connections are refused: the links carry only the ranks
//! that joined. Without a token, anything that reaches the port and speaks
//! this protocol can join as a rank, or fail the group.
//!
//! # Invariants
//!
//! - Nothing here blocks past the configured timeout (plus [`REPLY_SLACK`]):
//!   every read and write has a deadline, every retry loop a bound; rank 0
//!   never blocks on a connection that has not joined.
//! - `make_payload` runs at most once, on rank 0, and only once the whole
//!   group has joined, so a group that never forms never makes an id.
//! - A group that cannot form (timeout, a duplicate rank, a world size
//!   mismatch) fails on every rank that reached rank 0, not only on rank 0:
//!   rank 0 tells each joined rank why.
//! - A rank's connection closing is a failure unless that rank said
//!   goodbye first.
//!
//! # Wire format
//!
//! Every message is a one-byte tag and a body; integers are little-endian,
//! texts UTF-8 (at most [`MAX_TEXT`] bytes).
//!
//! | tag | name        | body                                                                   | sent                                                           |
//! |-----|-------------|------------------------------------------------------------------------|----------------------------------------------------------------|
//! | 7   | `CHALLENGE` | magic `b"BGR2"`, token required `u8`, nonce (32 bytes)                 | rank 0 → every connection, as soon as it is accepted           |
//! | 1   | `HELLO`     | magic `b"BGR2"`, body length `u32` (40), rank `u32`, world size `u32`, proof (32 bytes) | joiner → rank 0, answering the challenge      |
//! | 2   | `PAYLOAD`   | 128 bytes                                                              | rank 0 → joiner, once the whole group has joined               |
//! | 3   | `REFUSE`    | kind `u8`, joined `u32`, length `u16`, text                            | rank 0 → joiner, instead of `PAYLOAD`                          |
//! | 8   | `RETRY`     | —                                                                      | rank 0 → a connection it drops before a whole hello: a rank connects again |
//! | 4   | `HEARTBEAT` | —                                                                      | both ways, about every second, while watched                   |
//! | 5   | `BYE`       | —                                                                      | both ways: a clean end; the close that follows is fine         |
//! | 6   | `FAIL`      | origin rank `u32`, length `u16`, text                                  | both ways: the sender stops the group, and why                 |
//!
//! The proof is HMAC-SHA-256 keyed by the token over a fixed label, the
//! nonce, the rank and the world size; zeros when there is no token.
//! `REFUSE` kinds: 0 the rendezvous timed out (joined = how many ranks had
//! joined), 1 a protocol error, 2 rank 0 could not make the payload (no
//! group forms for any of these), 3 this connection is not admitted (its
//! proof did not check out; the others go on). The magic carries the
//! protocol's version: a bumpgrad speaking another one is a stranger.

use super::env::Source;
use super::error::DistError;
use super::token::{Nonces, Token, NONCE_LEN, PROOF_LEN};
use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The bytes rank 0 hands every rank: a NCCL unique id.
pub const PAYLOAD_LEN: usize = 128;
/// How long [`RendezvousConfig::from_env`] waits for the group when
/// `BUMPGRAD_RENDEZVOUS_TIMEOUT` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// A connection that has not sent a whole hello this long after it was
/// accepted is dropped (and told to retry, should it be a slow rank).
pub const HELLO_WAIT: Duration = Duration::from_secs(3);
/// Connections that may wait for their hello at once (or the world size,
/// if larger); one more evicts the oldest.
pub const MAX_WAITING: usize = 64;

const MAGIC: [u8; 4] = *b"BGR2";
/// The magic of the protocol before tokens, named when a rank speaks it.
const OLD_MAGIC: [u8; 4] = *b"BGR1";
const HELLO: u8 = 1;
const PAYLOAD: u8 = 2;
const REFUSE: u8 = 3;
const HEARTBEAT: u8 = 4;
const BYE: u8 = 5;
const FAIL: u8 = 6;
const CHALLENGE: u8 = 7;
const RETRY: u8 = 8;
const CHALLENGE_LEN: usize = 1 + 4 + 1 + NONCE_LEN;
/// What follows the hello's length field: rank, world size, proof.
const HELLO_BODY: usize = 4 + 4 + PROOF_LEN;
const HELLO_LEN: usize = 1 + 4 + 4 + HELLO_BODY;

const REFUSED_TIMEOUT: u8 = 0;
const REFUSED_PROTOCOL: u8 = 1;
const REFUSED_PAYLOAD: u8 = 2;
const REFUSED_NOT_ADMITTED: u8 = 3;

/// Longest text a `REFUSE` or `FAIL` carries; longer ones are cut.
const MAX_TEXT: usize = 1024;
/// Dropped connections reported one by one; past this many, only counted.
const MAX_REPORTED: usize = 20;
/// Connections taken from the listener per look, so that a flood of them
/// cannot keep rank 0 from reading the hellos it has.
const ACCEPT_BATCH: usize = 256;
/// Between a joiner's connection attempts while rank 0 is not listening yet.
const CONNECT_RETRY: Duration = Duration::from_millis(100);
/// Between rank 0's looks for new connections and hellos.
const ACCEPT_POLL: Duration = Duration::from_millis(10);
/// How long past its own deadline a joiner waits for rank 0's answer, so
/// that rank 0, timing out at about the same moment, can say how many
/// ranks had joined.
const REPLY_SLACK: Duration = Duration::from_secs(1);
/// Bound on every write of a whole message.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);
/// The watch thread's period: how soon a closed link or a finish is seen.
const POLL: Duration = Duration::from_millis(50);
/// Longer timeouts are cut to this, so that no deadline overflows.
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Where this process stands in a data-parallel group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RendezvousConfig {
    pub rank: usize,
    pub world_size: usize,
    /// host:port of rank 0's listener; unused (may be empty) when
    /// `world_size` is 1.
    pub addr: String,
    pub timeout: Duration,
    /// Whether this process was started by `launcher::launch` (then it
    /// watches its stdin: EOF = the launcher died).
    pub launched: bool,
    /// The GPU this rank uses on its host.
    pub local_rank: usize,
    /// The job's secret: rank 0 admits only ranks that prove they know
    /// it. `None`: any process that reaches rank 0 can join.
    pub token: Option<Token>,
    /// Where this configuration was read from, for the run to say.
    pub source: Source,
}

impl RendezvousConfig {
    /// A rank of a group on explicit terms, not launched, using GPU `rank`,
    /// with no token.
    pub fn new(rank: usize, world_size: usize, addr: impl Into<String>, timeout: Duration) -> Self {
        Self {
            rank,
            world_size,
            addr: addr.into(),
            timeout,
            launched: false,
            local_rank: rank,
            token: None,
            source: Source::PROGRAM,
        }
    }

    /// This configuration admitting only ranks that know `token`.
    pub fn with_token(self, token: Option<Token>) -> Self {
        Self { token, ..self }
    }

    /// The GPU this rank uses on its host: BUMPGRAD_LOCAL_RANK or
    /// LOCAL_RANK, else the cluster launcher's local rank, else the rank.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }
}

/// The open connections of a group that has formed: rank 0 holds one per
/// other rank, every other rank one to rank 0.
#[derive(Debug)]
pub struct Links {
    rank: usize,
    world_size: usize,
    peers: Vec<Peer>,
}

#[derive(Debug)]
struct Peer {
    rank: usize,
    stream: TcpStream,
}

/// Joins the group: rank 0 listens on `cfg.addr` until every other rank
/// has said hello, then calls `make_payload` (once) and sends its bytes to
/// each; every other rank connects (retrying while rank 0 is not up yet),
/// says hello and receives them. Both return the payload and the links
/// for [`Links::watch`]. A group of one makes its payload and has no links.
/// Rank 0 tells `log` about each connection it drops (see the module's doc).
///
/// Fails, never hangs past `cfg.timeout` (plus about a second on joiners):
/// [`DistError::RendezvousTimeout`], [`DistError::Protocol`] for a
/// duplicate rank or a world size mismatch, [`DistError::NotAdmitted`] for
/// a joiner whose token is not rank 0's, [`DistError::Bind`] when rank 0
/// cannot listen.
pub fn rendezvous(
    cfg: &RendezvousConfig,
    make_payload: impl FnOnce() -> Result<[u8; PAYLOAD_LEN], String>,
    log: &mut dyn FnMut(&str),
) -> Result<([u8; PAYLOAD_LEN], Links), DistError> {
    if cfg.rank >= cfg.world_size {
        return Err(DistError::Protocol(format!(
            "this process is rank {} of a group of {}; ranks must be below the world size",
            cfg.rank, cfg.world_size
        )));
    }
    if cfg.world_size == 1 {
        let payload = make_payload().map_err(DistError::Payload)?;
        let links = Links {
            rank: 0,
            world_size: 1,
            peers: Vec::new(),
        };
        return Ok((payload, links));
    }
    if cfg.rank == 0 {
        lead(cfg, make_payload, log)
    } else {
        join(cfg)
    }
}

/// Rank 0's side of the rendezvous.
fn lead(
    cfg: &RendezvousConfig,
    make_payload: impl FnOnce() -> Result<[u8; PAYLOAD_LEN], String>,
    log: &mut dyn FnMut(&str),
) -> Result<([u8; PAYLOAD_LEN], Links), DistError> {
    // std sets SO_REUSEADDR on Unix: a port the previous run left in
    // TIME_WAIT can be listened on again at once.
    let listener = TcpListener::bind(cfg.addr.as_str()).map_err(|source| DistError::Bind {
        addr: cfg.addr.clone(),
        source,
    })?;
    lead_on(listener, cfg, make_payload, log)
}

/// Rank 0's side of the rendezvous, on `listener` (bound to `cfg.addr`).
/// Apart from [`lead`] for the tests, which hand rank 0 a port the system
/// chose and bound, so that nothing can take it before rank 0 listens.
fn lead_on(
    listener: TcpListener,
    cfg: &RendezvousConfig,
    make_payload: impl FnOnce() -> Result<[u8; PAYLOAD_LEN], String>,
    log: &mut dyn FnMut(&str),
) -> Result<([u8; PAYLOAD_LEN], Links), DistError> {
    let start = Instant::now();
    let deadline = start + cfg.timeout.min(MAX_WAIT);
    // Non-blocking so that one thread can watch the deadline, the listener
    // and every waiting connection in turn.
    listener
        .set_nonblocking(true)
        .map_err(|source| io_error(format!("setting up the rendezvous listener on {}", cfg.addr), source))?;
    let mut joined = Joined {
        streams: (0..cfg.world_size).map(|_| None).collect(),
        count: 1,
    };
    let mut waiting = Waiting {
        conns: VecDeque::new(),
        cap: MAX_WAITING.max(cfg.world_size),
        drops: Drops::default(),
        nonces: Nonces::new()?,
    };
    while joined.count < cfg.world_size {
        let now = Instant::now();
        if let Err(err) = waiting.accept(&listener, cfg.token.is_some(), now, log) {
            joined.refuse_all(REFUSED_PROTOCOL, &err.to_string());
            return Err(err);
        }
        let mut i = 0;
        // Once the group is whole, later hellos are not read: they are
        // dropped with the listener, not taken for duplicates.
        while i < waiting.conns.len() && joined.count < cfg.world_size {
            let (rank, world_size, proof) = match waiting.conns[i].poll(now) {
                Heard::Nothing => {
                    i += 1;
                    continue;
                }
                Heard::Stranger { reason, retry } => {
                    waiting.drop_at(i, &reason, retry.then_some(&[RETRY][..]), log);
                    continue;
                }
                Heard::Hello {
                    rank,
                    world_size,
                    proof,
                } => (rank, world_size, proof),
            };
            if let Some(token) = &cfg.token {
                if !token.verify(&waiting.conns[i].nonce, rank, world_size, &proof) {
                    let notice = refuse_frame(
                        REFUSED_NOT_ADMITTED,
                        joined.count,
                        "this rank's proof of the job's token did not check out: its token is not rank 0's",
                    );
                    let reason = format!(
                        "its hello as rank {rank} of {world_size} does not prove knowledge of this job's token"
                    );
                    waiting.drop_at(i, &reason, Some(&notice), log);
                    continue;
                }
            }
            let Some(conn) = waiting.conns.remove(i) else { break };
            let (rank, world_size) = (rank as usize, world_size as usize);
            if let Some(reason) = joined.problem(rank, world_size) {
                refuse(&conn.stream, REFUSED_PROTOCOL, joined.count, &reason);
                joined.refuse_all(REFUSED_PROTOCOL, &reason);
                return Err(DistError::Protocol(reason));
            }
            joined.streams[rank] = Some(conn.stream);
            joined.count += 1;
        }
        if joined.count == cfg.world_size {
            break;
        }
        if now >= deadline {
            joined.refuse_all(REFUSED_TIMEOUT, "");
            waiting.drops.summary(log);
            return Err(DistError::RendezvousTimeout {
                addr: cfg.addr.clone(),
                waited_s: start.elapsed().as_secs_f64(),
                joined: joined.count,
                world_size: cfg.world_size,
            });
        }
        thread::sleep(ACCEPT_POLL.min(deadline - now));
    }
    // The group is whole: nobody else gets in. Connections still in the
    // listener's queue are refused as it closes.
    drop(listener);
    while !waiting.conns.is_empty() {
        waiting.drop_at(0, "the group formed before it sent a whole hello", None, log);
    }
    waiting.drops.summary(log);
    let payload = match make_payload() {
        Ok(payload) => payload,
        Err(reason) => {
            joined.refuse_all(REFUSED_PAYLOAD, &reason);
            return Err(DistError::Payload(reason));
        }
    };
    let mut frame = [0u8; 1 + PAYLOAD_LEN];
    frame[0] = PAYLOAD;
    frame[1..].copy_from_slice(&payload);
    let mut peers = Vec::with_capacity(cfg.world_size - 1);
    for (rank, stream) in joined.streams.into_iter().enumerate() {
        let Some(stream) = stream else { continue };
        // A rank that left since its hello: the others learn it when this
        // error drops their links.
        send(&stream, &frame).map_err(|source| io_error(format!("sending the group's id to rank {rank}"), source))?;
        peers.push(Peer { rank, stream });
    }
    let links = Links {
        rank: 0,
        world_size: cfg.world_size,
        peers,
    };
    Ok((payload, links))
}

/// The ranks that have said hello to rank 0 so far.
struct Joined {
    /// Indexed by rank; rank 0's own slot stays empty.
    streams: Vec<Option<TcpStream>>,
    /// Counting rank 0.
    count: usize,
}

impl Joined {
    /// Why a hello from `rank` of a group of `world_size` cannot join.
    fn problem(&self, rank: usize, world_size: usize) -> Option<String> {
        let expected = self.streams.len();
        if world_size != expected {
            Some(format!(
                "rank {rank} was started with a world size of {world_size}, rank 0 with {expected} — start every \
                 rank with the same world size"
            ))
        } else if rank == 0 || rank >= expected {
            Some(format!(
                "a process joined as rank {rank}, but a group of {expected} expects ranks 1 to {} to join rank 0 — \
                 give every process a distinct rank below the world size",
                expected - 1
            ))
        } else if self.streams[rank].is_some() {
            Some(format!(
                "two processes joined as rank {rank} — give every process a distinct rank (BUMPGRAD_RANK or RANK)"
            ))
        } else {
            None
        }
    }

    /// Tells every rank that has joined that the group will not form.
    fn refuse_all(&mut self, kind: u8, text: &str) {
        for stream in self.streams.iter_mut().filter_map(Option::take) {
            refuse(&stream, kind, self.count, text);
        }
    }
}

/// The connections rank 0 has accepted that have not said a whole hello.
struct Waiting {
    /// Oldest first.
    conns: VecDeque<Conn>,
    /// The most that may wait at once.
    cap: usize,
    drops: Drops,
    nonces: Nonces,
}

impl Waiting {
    /// Takes what the listener has queued (at most [`ACCEPT_BATCH`]),
    /// challenging each; over the cap, the oldest waiting one makes room.
    /// `Err` only for a failure of the listener itself.
    fn accept(
        &mut self,
        listener: &TcpListener,
        token_required: bool,
        now: Instant,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), DistError> {
        for _ in 0..ACCEPT_BATCH {
            let (stream, from) = match listener.accept() {
                Ok(connection) => connection,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => return Ok(()),
                // Gone before it was accepted: nothing to drop.
                Err(e) if matches!(e.kind(), ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset) => continue,
                // Out of descriptors (a flood): the waiting ones time out
                // or are evicted, freeing some, and rank 0 goes on.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) =>
                {
                    return Ok(())
                }
                Err(source) => {
                    let addr = listener.local_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                    return Err(io_error(format!("accepting ranks on {addr}"), source));
                }
            };
            match Conn::challenge(stream, from, self.nonces.next(), token_required, now) {
                Ok(conn) => self.conns.push_back(conn),
                Err(reason) => self.drops.report(from, &reason, log),
            }
            if self.conns.len() > self.cap {
                let reason = format!(
                    "it was the oldest of more than {} connections waiting for their hello",
                    self.cap
                );
                self.drop_at(0, &reason, Some(&[RETRY]), log);
            }
        }
        Ok(())
    }

    /// Closes waiting connection `i`, having sent it `notice` if it takes
    /// it at once, and reports why.
    fn drop_at(&mut self, i: usize, reason: &str, notice: Option<&[u8]>, log: &mut dyn FnMut(&str)) {
        let Some(conn) = self.conns.remove(i) else { return };
        if let Some(notice) = notice {
            // Never waits: a stranger that does not read gets nothing.
            let _ = (&conn.stream).write(notice);
        }
        let _ = conn.stream.shutdown(Shutdown::Both);
        self.drops.report(conn.from, reason, log);
    }
}

/// Connections dropped so far, for reports that a flood cannot multiply
/// without bound.
#[derive(Default)]
struct Drops {
    count: usize,
}

impl Drops {
    fn report(&mut self, from: SocketAddr, reason: &str, log: &mut dyn FnMut(&str)) {
        self.count += 1;
        if self.count <= MAX_REPORTED {
            log(&format!("dropped a connection from {from}: {reason}"));
        }
        if self.count == MAX_REPORTED {
            log("further connections that are not ranks of this run are dropped and counted, not reported one by one");
        }
    }

    fn summary(&self, log: &mut dyn FnMut(&str)) {
        if self.count > MAX_REPORTED {
            log(&format!(
                "dropped {} connections in all that were not ranks of this run",
                self.count
            ));
        }
    }
}

/// An accepted connection that has not yet said a whole hello.
struct Conn {
    stream: TcpStream,
    from: SocketAddr,
    accepted: Instant,
    /// The nonce of this connection's challenge.
    nonce: [u8; NONCE_LEN],
    /// The hello so far: never more than one hello is read.
    hello: [u8; HELLO_LEN],
    filled: usize,
}

/// What a waiting connection has said.
enum Heard {
    Nothing,
    /// Not a rank: drop it, telling it to retry should it be a slow one.
    Stranger {
        reason: String,
        retry: bool,
    },
    Hello {
        rank: u32,
        world_size: u32,
        proof: [u8; PROOF_LEN],
    },
}

impl Conn {
    /// Sends a new connection its challenge; `Err` says why the connection
    /// is dropped at once.
    fn challenge(
        stream: TcpStream,
        from: SocketAddr,
        nonce: [u8; NONCE_LEN],
        token_required: bool,
        now: Instant,
    ) -> Result<Self, String> {
        let mut frame = [0u8; CHALLENGE_LEN];
        frame[0] = CHALLENGE;
        frame[1..5].copy_from_slice(&MAGIC);
        frame[5] = token_required as u8;
        frame[6..].copy_from_slice(&nonce);
        // Accepted sockets do not inherit the listener's non-blocking mode
        // on Linux, but other systems differ: set it either way.
        let sent = stream.set_nonblocking(true).and_then(|()| (&stream).write(&frame));
        let _ = stream.set_nodelay(true);
        match sent {
            Ok(CHALLENGE_LEN) => Ok(Self {
                stream,
                from,
                accepted: now,
                nonce,
                hello: [0; HELLO_LEN],
                filled: 0,
            }),
            Ok(_) => Err("its connection took only part of the challenge".into()),
            Err(e) => Err(format!("the challenge could not be sent ({e})")),
        }
    }

    /// Reads what has arrived, never more than the rest of one hello.
    fn poll(&mut self, now: Instant) -> Heard {
        let stranger = |reason: String| Heard::Stranger { reason, retry: false };
        while self.filled < HELLO_LEN {
            match (&self.stream).read(&mut self.hello[self.filled..]) {
                Ok(0) if self.filled == 0 => return stranger("it closed the connection without a hello".into()),
                Ok(0) => {
                    return stranger(format!(
                        "it closed the connection {} bytes into a hello of {HELLO_LEN}",
                        self.filled
                    ))
                }
                Ok(n) => {
                    self.filled += n;
                    if let Some(reason) = self.malformed() {
                        return stranger(reason);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return stranger(format!("its connection failed ({e})")),
            }
        }
        if self.filled == HELLO_LEN {
            let mut proof = [0u8; PROOF_LEN];
            proof.copy_from_slice(&self.hello[HELLO_LEN - PROOF_LEN..]);
            return Heard::Hello {
                rank: u32_at(&self.hello, 9),
                world_size: u32_at(&self.hello, 13),
                proof,
            };
        }
        if now.duration_since(self.accepted) >= HELLO_WAIT {
            return Heard::Stranger {
                reason: format!("it sent no whole hello within {} s", seconds(HELLO_WAIT)),
                retry: true,
            };
        }
        Heard::Nothing
    }

    /// Why the bytes read so far cannot begin a hello, as soon as they show it.
    fn malformed(&self) -> Option<String> {
        let got = &self.hello[..self.filled];
        let mut head = [HELLO; 5];
        head[1..].copy_from_slice(&MAGIC);
        let n = got.len().min(head.len());
        if got[..n] != head[..n] {
            if got.len() >= 5 && got[0] == HELLO && got[1..5] == OLD_MAGIC {
                return Some(
                    "it speaks an older version of bumpgrad's rendezvous protocol (BGR1): start every rank from \
                     the same build"
                        .into(),
                );
            }
            return Some("it does not speak bumpgrad's rendezvous protocol (wrong magic)".into());
        }
        if got.len() >= 9 {
            let claimed = u32_at(got, 5);
            if claimed as usize != HELLO_BODY {
                return Some(format!(
                    "its hello claims a body of {claimed} bytes where this version's has {HELLO_BODY}"
                ));
            }
        }
        None
    }
}

/// A non-zero rank's side of the rendezvous.
fn join(cfg: &RendezvousConfig) -> Result<([u8; PAYLOAD_LEN], Links), DistError> {
    let start = Instant::now();
    let deadline = start + cfg.timeout.min(MAX_WAIT);
    // What this rank knows of the group: itself, and rank 0 once connected.
    let timed_out = |joined: usize| DistError::RendezvousTimeout {
        addr: cfg.addr.clone(),
        waited_s: start.elapsed().as_secs_f64(),
        joined,
        world_size: cfg.world_size,
    };
    let targets: Vec<SocketAddr> = cfg
        .addr
        .to_socket_addrs()
        .map_err(|source| io_error(format!("resolving the rendezvous address {:?}", cfg.addr), source))?
        .collect();
    loop {
        let stream = loop {
            if let Some(stream) = connect_any(&targets, deadline) {
                break stream;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(timed_out(1));
            }
            thread::sleep(CONNECT_RETRY.min(deadline - now));
        };
        let _ = stream.set_nodelay(true);
        if let Some(payload) = handshake(cfg, &stream, deadline + REPLY_SLACK, &timed_out)? {
            let links = Links {
                rank: cfg.rank,
                world_size: cfg.world_size,
                peers: vec![Peer { rank: 0, stream }],
            };
            return Ok((payload, links));
        }
        // Rank 0 dropped this connection before its hello was whole (it
        // was slow, or strangers crowded the port): connect again.
        let now = Instant::now();
        if now >= deadline {
            return Err(timed_out(1));
        }
        thread::sleep(CONNECT_RETRY.min(deadline - now));
    }
}

/// One attempt at joining over `stream`: rank 0's challenge, this rank's
/// hello, rank 0's answer. `Ok(None)`: rank 0 asked for another attempt.
fn handshake(
    cfg: &RendezvousConfig,
    stream: &TcpStream,
    until: Instant,
    timed_out: &dyn Fn(usize) -> DistError,
) -> Result<Option<[u8; PAYLOAD_LEN]>, DistError> {
    let addr = &cfg.addr;
    let lost = |e: io::Error| match e.kind() {
        ErrorKind::TimedOut => timed_out(2),
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => DistError::PeerLost(
            format!("rank 0 at {addr} closed the connection before the group formed; see rank 0's output for why."),
        ),
        _ => io_error(format!("waiting for rank 0's answer from {addr}"), e),
    };
    let unknown = |tag: u8| {
        DistError::Protocol(format!(
            "rank 0 at {addr} answered with an unknown message (tag {tag}) — another program is listening on that \
             port, or rank 0 runs another bumpgrad version; pick a free port and start every rank from the same \
             build"
        ))
    };
    let mut tag = [0u8; 1];
    read_exact_until(stream, &mut tag, until).map_err(lost)?;
    match tag[0] {
        CHALLENGE => {}
        RETRY => return Ok(None),
        other => return Err(unknown(other)),
    }
    let mut challenge = [0u8; CHALLENGE_LEN - 1];
    read_exact_until(stream, &mut challenge, until).map_err(lost)?;
    if challenge[..4] != MAGIC {
        return Err(DistError::Protocol(format!(
            "rank 0 at {addr} speaks another version of bumpgrad's rendezvous protocol — start every rank from the \
             same build"
        )));
    }
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&challenge[5..]);
    let (rank, world_size) = (wire_u32(cfg.rank), wire_u32(cfg.world_size));
    let proof = match (&cfg.token, challenge[4] != 0) {
        (Some(token), true) => token.prove(&nonce, rank, world_size),
        (None, false) => [0; PROOF_LEN],
        (None, true) => {
            return Err(DistError::NotAdmitted {
                addr: addr.clone(),
                reason: "rank 0 admits only ranks that know the job's token, and this rank has none".into(),
            })
        }
        (Some(_), false) => {
            return Err(DistError::NotAdmitted {
                addr: addr.clone(),
                reason: "this rank has a token but rank 0 has none, so any process could take a rank's place".into(),
            })
        }
    };
    let mut hello = [0u8; HELLO_LEN];
    hello[0] = HELLO;
    hello[1..5].copy_from_slice(&MAGIC);
    hello[5..9].copy_from_slice(&(HELLO_BODY as u32).to_le_bytes());
    hello[9..13].copy_from_slice(&rank.to_le_bytes());
    hello[13..17].copy_from_slice(&world_size.to_le_bytes());
    hello[17..].copy_from_slice(&proof);
    send(stream, &hello).map_err(|source| io_error(format!("saying hello to rank 0 at {addr}"), source))?;

    read_exact_until(stream, &mut tag, until).map_err(lost)?;
    match tag[0] {
        PAYLOAD => {
            let mut payload = [0u8; PAYLOAD_LEN];
            read_exact_until(stream, &mut payload, until).map_err(lost)?;
            Ok(Some(payload))
        }
        RETRY => Ok(None),
        REFUSE => {
            let mut head = [0u8; 1 + 4 + 2];
            read_exact_until(stream, &mut head, until).map_err(lost)?;
            let len = u16::from_le_bytes([head[5], head[6]]) as usize;
            if len > MAX_TEXT {
                return Err(unknown(REFUSE));
            }
            let mut text = [0u8; MAX_TEXT];
            read_exact_until(stream, &mut text[..len], until).map_err(lost)?;
            let text = String::from_utf8_lossy(&text[..len]).into_owned();
            Err(match head[0] {
                REFUSED_TIMEOUT => timed_out(u32_at(&head, 1) as usize),
                REFUSED_PAYLOAD => DistError::Payload(text),
                REFUSED_NOT_ADMITTED => DistError::NotAdmitted {
                    addr: addr.clone(),
                    reason: text,
                },
                _ => DistError::Protocol(text),
            })
        }
        other => Err(unknown(other)),
    }
}

/// One connection attempt to each of rank 0's addresses.
fn connect_any(targets: &[SocketAddr], deadline: Instant) -> Option<TcpStream> {
    targets.iter().find_map(|target| {
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = left.min(Duration::from_secs(1)).max(Duration::from_millis(1));
        TcpStream::connect_timeout(target, wait).ok()
    })
}

/// Fills `buf`, giving up at `until` with [`ErrorKind::TimedOut`].
fn read_exact_until(mut stream: &TcpStream, buf: &mut [u8], until: Instant) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            // A read timeout shows as either, depending on the system; the
            // loop's own check decides.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes a whole message, blocking at most [`SEND_TIMEOUT`].
fn send(mut stream: &TcpStream, frame: &[u8]) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(SEND_TIMEOUT))?;
    stream.write_all(frame)
}

/// Tells a joined rank why the group will not form; best effort, since
/// the rank learns it from the closed connection anyway.
fn refuse(stream: &TcpStream, kind: u8, joined: usize, text: &str) {
    let _ = send(stream, &refuse_frame(kind, joined, text));
    let _ = stream.shutdown(Shutdown::Both);
}

fn refuse_frame(kind: u8, joined: usize, text: &str) -> Vec<u8> {
    let text = clip(text);
    let mut frame = vec![REFUSE, kind];
    frame.extend_from_slice(&wire_u32(joined).to_le_bytes());
    frame.extend_from_slice(&(text.len() as u16).to_le_bytes());
    frame.extend_from_slice(text.as_bytes());
    frame
}

fn fail_frame(origin: usize, reason: &str) -> Vec<u8> {
    let reason = clip(reason);
    let mut frame = vec![FAIL];
    frame.extend_from_slice(&wire_u32(origin).to_le_bytes());
    frame.extend_from_slice(&(reason.len() as u16).to_le_bytes());
    frame.extend_from_slice(reason.as_bytes());
    frame
}

/// At most [`MAX_TEXT`] bytes, cut at a character boundary.
fn clip(text: &str) -> &str {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Ranks and world sizes travel as u32; larger ones saturate, and then
/// fail the world-size check rather than alias a smaller rank.
fn wire_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

fn io_error(what: String, source: io::Error) -> DistError {
    DistError::Io { what, source }
}

/// Seconds as a person writes them: "30", "0.3".
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

/// What [`Links::watch`] looks for besides closed links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchOptions {
    /// A peer silent this long is lost.
    pub heartbeat_timeout: Duration,
    /// How often this rank sends each peer a heartbeat.
    pub heartbeat_every: Duration,
    /// Training progress unchanged this long stops the group; `None`: never.
    pub stall_timeout: Option<Duration>,
    /// Watch stdin: its end means the launcher is gone.
    pub launched: bool,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            heartbeat_timeout: Duration::from_secs(30),
            heartbeat_every: Duration::from_secs(1),
            stall_timeout: None,
            launched: false,
        }
    }
}

impl Links {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// Starts a thread that watches the group and calls `on_failure` once,
    /// with a sentence fit to print as the process's last error line, at
    /// the first of:
    /// - a peer's connection closing or failing without its goodbye;
    /// - no heartbeat from a peer for `opts.heartbeat_timeout`;
    /// - with `opts.launched`, the end of this process's stdin (the
    ///   launcher is gone);
    /// - `progress` unchanged for `opts.stall_timeout`;
    /// - a peer's notice that it stopped the group.
    ///
    /// Before calling `on_failure` the thread tells every peer why and
    /// closes every link, so one failure reaches the whole group: rank 0
    /// closing its links is what every other rank sees. Dropping the
    /// [`Watch`] without [`Watch::finish`] closes the links without a
    /// goodbye, which the peers take as this rank's failure.
    ///
    /// `on_failure` runs on the watch thread: keep it short (set a flag,
    /// print, exit). `progress` matters only with a stall timeout; the
    /// training loop bumps it once per step. With `opts.launched`, stdin
    /// is read (and discarded) by a thread of its own, one per process,
    /// which stays blocked in that read until the launcher is gone.
    pub fn watch(
        self,
        progress: Arc<AtomicU64>,
        opts: WatchOptions,
        on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Watch {
        let launcher_gone = opts.launched.then(stdin_closed);
        self.watch_with(progress, opts, launcher_gone, on_failure)
    }

    /// [`watch`](Self::watch), with the launcher's end shown by a flag.
    fn watch_with(
        self,
        progress: Arc<AtomicU64>,
        opts: WatchOptions,
        launcher_gone: Option<Arc<AtomicBool>>,
        on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Watch {
        let now = Instant::now();
        let mut broken = None;
        let peers: Vec<Watched> = self
            .peers
            .into_iter()
            .map(|peer| {
                // Reads must return at once so that one thread can look at
                // every link in turn.
                if let Err(e) = peer.stream.set_nonblocking(true) {
                    broken.get_or_insert(format!("cannot watch the link to rank {} ({e}).", peer.rank));
                }
                Watched {
                    rank: peer.rank,
                    stream: peer.stream,
                    inbox: Vec::new(),
                    heard: now,
                    said_bye: false,
                }
            })
            .collect();
        let on_failure = Arc::new(Mutex::new(Some(on_failure)));
        let watching = Arc::new(AtomicUsize::new(peers.len()));
        let watcher = Watcher {
            watching: watching.clone(),
            rank: self.rank,
            peers,
            progress: progress.clone(),
            last_progress: (progress.load(Ordering::Relaxed), now),
            last_beat: now,
            opts,
            launcher_gone,
            broken,
            on_failure: on_failure.clone(),
        };
        let (ends, ended) = mpsc::channel();
        let thread = thread::Builder::new()
            .name(format!("bumpgrad-watch-{}", self.rank))
            .spawn(move || watcher.run(ended));
        match thread {
            Ok(thread) => Watch {
                ends: Some(ends),
                thread: Some(thread),
                watching,
            },
            Err(e) => {
                // The watcher, and with it every link, is gone: the peers
                // see this rank leave, and this rank must learn it too.
                if let Some(on_failure) = on_failure.lock().ok().and_then(|mut f| f.take()) {
                    on_failure(format!(
                        "cannot start the thread that watches the group ({e}); stopping."
                    ));
                }
                Watch {
                    ends: None,
                    thread: None,
                    watching,
                }
            }
        }
    }
}

/// A running watch of the group; see [`Links::watch`].
#[derive(Debug)]
pub struct Watch {
    /// Sending [`End::Finish`] ends cleanly; dropping it, without a goodbye.
    ends: Option<mpsc::Sender<End>>,
    thread: Option<JoinHandle<()>>,
    /// Peers still watched: a peer that said goodbye and closed is not.
    watching: Arc<AtomicUsize>,
}

enum End {
    Finish,
}

impl Watch {
    /// How many peers this rank still watches (those that have not said
    /// goodbye and closed their link).
    pub fn watching(&self) -> usize {
        self.watching.load(Ordering::SeqCst)
    }

    /// The clean end: says goodbye to the peers, closes the links and joins
    /// the thread. `on_failure` is not called after this returns.
    pub fn finish(mut self) {
        if let Some(ends) = self.ends.take() {
            let _ = ends.send(End::Finish);
        }
        self.join();
    }

    fn join(&mut self) {
        self.ends.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.join();
    }
}

/// Why the group stops.
struct Failure {
    /// The rank that stopped it.
    origin: usize,
    /// A complete sentence.
    reason: String,
}

/// One link as the watch thread sees it.
struct Watched {
    rank: usize,
    stream: TcpStream,
    /// Bytes received and not yet parsed into messages.
    inbox: Vec<u8>,
    heard: Instant,
    said_bye: bool,
}

/// A message a peer may send while watched.
enum Message {
    Heartbeat,
    Bye,
    Fail { origin: usize, reason: String },
    Unexpected(u8),
}

impl Watched {
    /// Reads what has arrived; `Err` with the reason when this link shows
    /// a failure, `Ok(false)` when it closed after a goodbye.
    fn poll(&mut self, me: usize, now: Instant, opts: &WatchOptions) -> Result<bool, Failure> {
        let mut buf = [0u8; 512];
        let end = loop {
            match (&self.stream).read(&mut buf) {
                Ok(0) => break Some(None),
                Ok(n) => {
                    self.inbox.extend_from_slice(&buf[..n]);
                    self.heard = now;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => break Some(Some(e)),
            }
        };
        // Messages first: a goodbye or a notice may precede the close.
        while let Some((message, used)) = parse(&self.inbox) {
            self.inbox.drain(..used);
            match message {
                Message::Heartbeat => {}
                Message::Bye => self.said_bye = true,
                Message::Fail { origin, reason } => return Err(Failure { origin, reason }),
                Message::Unexpected(tag) => {
                    return Err(Failure {
                        origin: me,
                        reason: format!(
                            "rank {} sent an unexpected message (tag {tag}); is it running another bumpgrad version?",
                            self.rank
                        ),
                    })
                }
            }
        }
        let lost = |reason| Err(Failure { origin: me, reason });
        match end {
            Some(_) if self.said_bye => Ok(false),
            Some(None) => lost(format!(
                "rank {} stopped without a goodbye (an error, a crash or a signal); see its output for why.",
                self.rank
            )),
            Some(Some(e)) => lost(format!(
                "lost the connection to rank {} ({e}); it crashed, was killed, or its host became unreachable.",
                self.rank
            )),
            None if !self.said_bye && now.duration_since(self.heard) >= opts.heartbeat_timeout => lost(format!(
                "rank {} sent no heartbeat for {} s; it is hung or its host is unreachable.",
                self.rank,
                seconds(opts.heartbeat_timeout)
            )),
            None => Ok(true),
        }
    }

    fn beat(&self, me: usize) -> Result<(), Failure> {
        match (&self.stream).write(&[HEARTBEAT]) {
            Ok(_) => Ok(()),
            // A full send buffer: the peer is slow to read, which its own
            // heartbeat timeout on our side judges, not this.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(()),
            Err(e) => Err(Failure {
                origin: me,
                reason: format!(
                    "lost the connection to rank {} ({e}); it crashed, was killed, or its host became unreachable.",
                    self.rank
                ),
            }),
        }
    }
}

/// The first whole message in `inbox` and its length; `None` until one
/// has fully arrived.
fn parse(inbox: &[u8]) -> Option<(Message, usize)> {
    match *inbox.first()? {
        HEARTBEAT => Some((Message::Heartbeat, 1)),
        BYE => Some((Message::Bye, 1)),
        FAIL => {
            let head = inbox.get(..7)?;
            let len = u16::from_le_bytes([head[5], head[6]]) as usize;
            if len > MAX_TEXT {
                // Not what any bumpgrad sends: do not wait for it to arrive.
                return Some((Message::Unexpected(FAIL), inbox.len()));
            }
            let text = inbox.get(7..7 + len)?;
            let reason = String::from_utf8_lossy(text).into_owned();
            Some((
                Message::Fail {
                    origin: u32_at(head, 1) as usize,
                    reason,
                },
                7 + len,
            ))
        }
        tag => Some((Message::Unexpected(tag), 1)),
    }
}

/// The watch thread's state.
struct Watcher<F> {
    rank: usize,
    peers: Vec<Watched>,
    progress: Arc<AtomicU64>,
    /// The progress value last seen to change, and when.
    last_progress: (u64, Instant),
    last_beat: Instant,
    /// Shared with the [`Watch`]: `peers.len()`.
    watching: Arc<AtomicUsize>,
    opts: WatchOptions,
    launcher_gone: Option<Arc<AtomicBool>>,
    /// A link that could not be set up for watching.
    broken: Option<String>,
    on_failure: Arc<Mutex<Option<F>>>,
}

impl<F: FnOnce(String)> Watcher<F> {
    fn run(mut self, ended: mpsc::Receiver<End>) {
        loop {
            if let Err(failure) = self.check(Instant::now()) {
                self.stop_group(&failure);
                let message = if failure.origin == self.rank {
                    failure.reason
                } else {
                    format!("rank {} stopped the group: {}", failure.origin, failure.reason)
                };
                if let Some(on_failure) = self.on_failure.lock().ok().and_then(|mut f| f.take()) {
                    on_failure(message);
                }
                return;
            }
            match ended.recv_timeout(POLL) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(End::Finish) => return self.say_goodbye(),
                // The Watch was dropped without finishing.
                Err(RecvTimeoutError::Disconnected) => return self.close_all(),
            }
        }
    }

    fn check(&mut self, now: Instant) -> Result<(), Failure> {
        let me = self.rank;
        if let Some(reason) = self.broken.take() {
            return Err(Failure { origin: me, reason });
        }
        let mut i = 0;
        while i < self.peers.len() {
            if self.peers[i].poll(me, now, &self.opts)? {
                i += 1;
            } else {
                // Closed after its goodbye: nothing more to watch there.
                self.peers.swap_remove(i);
                self.watching.store(self.peers.len(), Ordering::SeqCst);
            }
        }
        if now.duration_since(self.last_beat) >= self.opts.heartbeat_every {
            self.last_beat = now;
            for peer in self.peers.iter().filter(|p| !p.said_bye) {
                peer.beat(me)?;
            }
        }
        if self
            .launcher_gone
            .as_ref()
            .is_some_and(|gone| gone.load(Ordering::SeqCst))
        {
            return Err(Failure {
                origin: me,
                reason: "the launcher exited (this rank's stdin closed); stopping so that no rank is left \
                         running on its own."
                    .into(),
            });
        }
        if let Some(limit) = self.opts.stall_timeout {
            let progress = self.progress.load(Ordering::Relaxed);
            if progress != self.last_progress.0 {
                self.last_progress = (progress, now);
            } else if now.duration_since(self.last_progress.1) >= limit {
                return Err(Failure {
                    origin: me,
                    reason: format!(
                        "no training progress for {} s (a rank is stuck in a collective?); stopping the group.",
                        seconds(limit)
                    ),
                });
            }
        }
        Ok(())
    }

    /// Tells every peer why the group stops, then closes every link.
    fn stop_group(&mut self, failure: &Failure) {
        let frame = fail_frame(failure.origin, &failure.reason);
        for peer in self.peers.drain(..) {
            let _ = send(&peer.stream, &frame);
            let _ = peer.stream.shutdown(Shutdown::Both);
        }
    }

    fn say_goodbye(&mut self) {
        for peer in self.peers.drain(..) {
            let _ = send(&peer.stream, &[BYE]);
            // The goodbye and then the close, in that order; then read what
            // the peer still sent, since closing a socket with unread bytes
            // resets the connection instead of closing it.
            let _ = peer.stream.shutdown(Shutdown::Write);
            let _ = peer.stream.set_nonblocking(true);
            let mut sink = [0u8; 512];
            while matches!((&peer.stream).read(&mut sink), Ok(n) if n > 0) {}
        }
    }

    fn close_all(&mut self) {
        for peer in self.peers.drain(..) {
            let _ = peer.stream.shutdown(Shutdown::Both);
        }
    }
}

/// Set once this process's stdin has ended. One reader thread per
/// process, started on first use and never joined: it sits in a read that
/// only the launcher's exit ends.
fn stdin_closed() -> Arc<AtomicBool> {
    static CLOSED: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    CLOSED.get_or_init(|| until_eof(io::stdin())).clone()
}

/// A flag set when `input` ends (or fails); what arrives is discarded.
fn until_eof(mut input: impl Read + Send + 'static) -> Arc<AtomicBool> {
    let ended = Arc::new(AtomicBool::new(false));
    let flag = ended.clone();
    // Should the thread not start, the launcher's end goes unnoticed here;
    // the launcher still signals its ranks when it can.
    let _ = thread::Builder::new()
        .name("bumpgrad-launcher-pipe".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match input.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            flag.store(true, Ordering::SeqCst);
        });
    ended
}

#[cfg(test)]
#[path = "tests_rendezvous.rs"]
mod tests;
