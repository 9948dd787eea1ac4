//! Forming a group of ranks over TCP, and watching it while it trains.
//!
//! Rank 0 listens on the rendezvous address; every other rank connects to
//! it, says who it is, and receives the 128-byte payload (the NCCL unique
//! id) that rank 0 makes once, after every rank has joined. The star of
//! connections then stays open for [`Links::watch`]: heartbeats both ways,
//! a goodbye on a clean end, and a failure notice when a rank stops the
//! group, which rank 0 relays to everyone else by closing every link.
//!
//! # Invariants
//!
//! - Nothing here blocks past the configured timeout (plus [`REPLY_SLACK`]):
//!   every read and write has a deadline, every retry loop a bound.
//! - `make_payload` runs at most once, on rank 0, and only once the whole
//!   group has joined, so a group that never forms never makes an id.
//! - A group that cannot form (timeout, a duplicate rank, a world size
//!   mismatch, a stranger on the port) fails on every rank that reached
//!   rank 0, not only on rank 0: rank 0 tells each joined rank why.
//! - A rank's connection closing is a failure unless that rank said
//!   goodbye first.
//!
//! # Wire format
//!
//! Every message is a one-byte tag and a body; integers are little-endian,
//! texts UTF-8 (at most [`MAX_TEXT`] bytes).
//!
//! | tag | name        | body                                                      | sent                                                    |
//! |-----|-------------|-----------------------------------------------------------|---------------------------------------------------------|
//! | 1   | `HELLO`     | magic `b"BGR1"`, rank `u32`, world size `u32`             | joiner → rank 0, first thing after connecting           |
//! | 2   | `PAYLOAD`   | 128 bytes                                                 | rank 0 → joiner, once the whole group has joined        |
//! | 3   | `REFUSE`    | kind `u8`, joined `u32`, length `u16`, text               | rank 0 → joiner, instead of `PAYLOAD`: no group forms   |
//! | 4   | `HEARTBEAT` | —                                                         | both ways, about every second, while watched            |
//! | 5   | `BYE`       | —                                                         | both ways: a clean end; the close that follows is fine  |
//! | 6   | `FAIL`      | origin rank `u32`, length `u16`, text                     | both ways: the sender stops the group, and why          |
//!
//! `REFUSE` kinds: 0 the rendezvous timed out (joined = how many ranks had
//! joined), 1 a protocol error, 2 rank 0 could not make the payload. The
//! magic carries the protocol's version: a bumpgrad speaking another one is
//! refused as a stranger, never misread.

use super::error::DistError;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The bytes rank 0 hands every rank: a NCCL unique id.
pub const PAYLOAD_LEN: usize = 128;
/// How long [`RendezvousConfig::from_env`] waits for the group when
/// `BUMPGRAD_RENDEZVOUS_TIMEOUT` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

const MAGIC: [u8; 4] = *b"BGR1";
const HELLO: u8 = 1;
const PAYLOAD: u8 = 2;
const REFUSE: u8 = 3;
const HEARTBEAT: u8 = 4;
const BYE: u8 = 5;
const FAIL: u8 = 6;
const HELLO_LEN: usize = 1 + 4 + 4 + 4;

const REFUSED_TIMEOUT: u8 = 0;
const REFUSED_PROTOCOL: u8 = 1;
const REFUSED_PAYLOAD: u8 = 2;

/// Longest text a `REFUSE` or `FAIL` carries; longer ones are cut.
const MAX_TEXT: usize = 1024;
/// Between a joiner's connection attempts while rank 0 is not listening yet.
const CONNECT_RETRY: Duration = Duration::from_millis(100);
/// Between rank 0's looks for new connections.
const ACCEPT_POLL: Duration = Duration::from_millis(10);
/// A connection that sends no hello this long is not a rank (a port
/// scanner, a health check) and is dropped, so it cannot hold up the rest.
const HELLO_WAIT: Duration = Duration::from_secs(2);
/// How long past its own deadline a joiner waits for rank 0's answer, so
/// that rank 0, timing out at about the same moment, can say how many
/// ranks had joined.
const REPLY_SLACK: Duration = Duration::from_secs(1);
/// Bound on every write of a whole message.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);
/// The watch thread's period: how soon a closed link or a finish is seen.
const POLL: Duration = Duration::from_millis(50);
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
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
}

impl RendezvousConfig {
    /// A rank of a group on explicit terms, not launched, using GPU `rank`.
    pub fn new(rank: usize, world_size: usize, addr: impl Into<String>, timeout: Duration) -> Self {
        Self {
            rank,
            world_size,
            addr: addr.into(),
            timeout,
            launched: false,
            local_rank: rank,
        }
    }

    /// Reads BUMPGRAD_RANK / BUMPGRAD_WORLD_SIZE / BUMPGRAD_RENDEZVOUS
    /// (host:port) / BUMPGRAD_LAUNCHED=1 / BUMPGRAD_LOCAL_RANK /
    /// BUMPGRAD_RENDEZVOUS_TIMEOUT (seconds), falling back to torchrun's
    /// RANK / WORLD_SIZE / MASTER_ADDR + MASTER_PORT / LOCAL_RANK, with
    /// [`DEFAULT_TIMEOUT`]. `Ok(None)` for a plain single-process run.
    pub fn from_env() -> Result<Option<Self>, DistError> {
        let get = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
        Self::from_lookup(get, DEFAULT_TIMEOUT)
    }

    /// [`from_env`](Self::from_env) reading variables through `get`, so
    /// tests need not mutate the process environment. `timeout` applies
    /// unless BUMPGRAD_RENDEZVOUS_TIMEOUT is set (the launcher sets it to
    /// its own, so every rank it starts waits as long as it was told).
    ///
    /// An empty value counts as unset (`export RANK=` in a script). Each
    /// BUMPGRAD_ variable wins over its torchrun counterpart.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>, timeout: Duration) -> Result<Option<Self>, DistError> {
        let lookup = Lookup(&get);
        let rank = lookup.first(&["BUMPGRAD_RANK", "RANK"]);
        let world = lookup.first(&["BUMPGRAD_WORLD_SIZE", "WORLD_SIZE"]);
        let (rank, world) = match (rank, world) {
            (None, None) => return Ok(None),
            (Some(rank), None) => {
                return Err(rank.invalid(
                    "the world size is not set: set BUMPGRAD_WORLD_SIZE (or WORLD_SIZE) too, or neither \
                     for a single-process run",
                ))
            }
            (None, Some(world)) => {
                return Err(world.invalid(
                    "the rank is not set: set BUMPGRAD_RANK (or RANK) too, or neither for a single-process run",
                ))
            }
            (Some(rank), Some(world)) => (rank, world),
        };
        let world_size = world.count()?;
        if world_size == 0 {
            return Err(world.invalid("a group needs at least 1 rank"));
        }
        let rank_n = rank.count()?;
        if rank_n >= world_size {
            return Err(rank.invalid(&format!(
                "ranks run from 0 to {} in a group of {world_size} (from {}); give every process a distinct \
                 rank below the world size",
                world_size - 1,
                world.name
            )));
        }
        let local_rank = match lookup.first(&["BUMPGRAD_LOCAL_RANK", "LOCAL_RANK"]) {
            Some(local) => local.count()?,
            None => rank_n,
        };
        let addr = match lookup.rendezvous_addr()? {
            Some(addr) => addr,
            None if world_size == 1 => String::new(),
            None => {
                return Err(DistError::Env {
                    var: "BUMPGRAD_RENDEZVOUS".into(),
                    value: String::new(),
                    reason: format!(
                        "a group of {world_size} ranks needs rank 0's address: set BUMPGRAD_RENDEZVOUS=host:port \
                         (or MASTER_ADDR and MASTER_PORT)"
                    ),
                })
            }
        };
        let launched = match lookup.get("BUMPGRAD_LAUNCHED") {
            None => false,
            Some(v) if v.value.trim() == "1" => true,
            Some(v) if v.value.trim() == "0" => false,
            Some(v) => return Err(v.invalid("expected 1 (started by the launcher) or 0")),
        };
        let timeout = match lookup.get("BUMPGRAD_RENDEZVOUS_TIMEOUT") {
            None => timeout,
            Some(v) => v.seconds()?,
        };
        Ok(Some(Self {
            rank: rank_n,
            world_size,
            addr,
            timeout,
            launched,
            local_rank,
        }))
    }

    /// The GPU this rank uses on its host: BUMPGRAD_LOCAL_RANK or
    /// LOCAL_RANK, else the rank.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }
}

/// Environment variables read through a caller's lookup function.
struct Lookup<'a, F>(&'a F);

/// One variable that is set, and its value.
struct Var {
    name: String,
    value: String,
}

impl<F: Fn(&str) -> Option<String>> Lookup<'_, F> {
    fn get(&self, name: &str) -> Option<Var> {
        let value = (self.0)(name).filter(|v| !v.trim().is_empty())?;
        Some(Var {
            name: name.to_string(),
            value,
        })
    }

    /// The first of `names` that is set.
    fn first(&self, names: &[&str]) -> Option<Var> {
        names.iter().find_map(|name| self.get(name))
    }

    /// BUMPGRAD_RENDEZVOUS, else MASTER_ADDR:MASTER_PORT, checked.
    fn rendezvous_addr(&self) -> Result<Option<String>, DistError> {
        if let Some(var) = self.get("BUMPGRAD_RENDEZVOUS") {
            let addr = var.value.trim();
            let port = addr
                .rsplit_once(':')
                .filter(|(host, _)| !host.is_empty())
                .map(|(_, port)| port);
            if !port.is_some_and(|p| p.parse::<u16>().is_ok_and(|p| p != 0)) {
                return Err(var.invalid(
                    "expected host:port of rank 0's listener with a port from 1 to 65535, e.g. 10.0.0.1:29500",
                ));
            }
            return Ok(Some(addr.to_string()));
        }
        match (self.get("MASTER_ADDR"), self.get("MASTER_PORT")) {
            (None, None) => Ok(None),
            (Some(host), None) => Err(host.invalid("MASTER_PORT is not set: set it too (torchrun sets both)")),
            (None, Some(port)) => Err(port.invalid("MASTER_ADDR is not set: set it too (torchrun sets both)")),
            (Some(host), Some(port)) => {
                if !port.value.trim().parse::<u16>().is_ok_and(|p| p != 0) {
                    return Err(port.invalid("expected a port from 1 to 65535, e.g. 29500"));
                }
                let host = host.value.trim();
                // A bare IPv6 address needs brackets before a port.
                let host = if host.contains(':') && !host.starts_with('[') {
                    format!("[{host}]")
                } else {
                    host.to_string()
                };
                Ok(Some(format!("{host}:{}", port.value.trim())))
            }
        }
    }
}

impl Var {
    fn invalid(&self, reason: &str) -> DistError {
        DistError::Env {
            var: self.name.clone(),
            value: self.value.clone(),
            reason: reason.to_string(),
        }
    }

    fn count(&self) -> Result<usize, DistError> {
        self.value
            .trim()
            .parse()
            .map_err(|_| self.invalid("expected a whole number (0, 1, 2, ...)"))
    }

    fn seconds(&self) -> Result<Duration, DistError> {
        self.value
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| self.invalid("expected a positive number of seconds, e.g. 300"))
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
///
/// Fails, never hangs past `cfg.timeout` (plus about a second on joiners):
/// [`DistError::RendezvousTimeout`], [`DistError::Protocol`] for a
/// duplicate rank, a world size mismatch or a stranger on the port,
/// [`DistError::Bind`] when rank 0 cannot listen.
pub fn rendezvous(
    cfg: &RendezvousConfig,
    make_payload: impl FnOnce() -> Result<[u8; PAYLOAD_LEN], String>,
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
        lead(cfg, make_payload)
    } else {
        join(cfg)
    }
}

/// Rank 0's side of the rendezvous.
fn lead(
    cfg: &RendezvousConfig,
    make_payload: impl FnOnce() -> Result<[u8; PAYLOAD_LEN], String>,
) -> Result<([u8; PAYLOAD_LEN], Links), DistError> {
    let start = Instant::now();
    let deadline = start + cfg.timeout.min(MAX_WAIT);
    // std sets SO_REUSEADDR on Unix: a port the previous run left in
    // TIME_WAIT can be listened on again at once.
    let listener = TcpListener::bind(cfg.addr.as_str()).map_err(|source| DistError::Bind {
        addr: cfg.addr.clone(),
        source,
    })?;
    // Non-blocking so that the deadline is checked between connections.
    listener
        .set_nonblocking(true)
        .map_err(|source| io_error(format!("setting up the rendezvous listener on {}", cfg.addr), source))?;
    let mut joined = Joined {
        streams: (0..cfg.world_size).map(|_| None).collect(),
        count: 1,
    };
    while joined.count < cfg.world_size {
        let (stream, from) = match listener.accept() {
            Ok(connection) => connection,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                let now = Instant::now();
                if now >= deadline {
                    joined.refuse_all(REFUSED_TIMEOUT, "");
                    return Err(DistError::RendezvousTimeout {
                        addr: cfg.addr.clone(),
                        waited_s: start.elapsed().as_secs_f64(),
                        joined: joined.count,
                        world_size: cfg.world_size,
                    });
                }
                thread::sleep(ACCEPT_POLL.min(deadline - now));
                continue;
            }
            Err(source) => {
                let err = io_error(format!("accepting ranks on {}", cfg.addr), source);
                joined.refuse_all(REFUSED_PROTOCOL, &err.to_string());
                return Err(err);
            }
        };
        let hello = match read_hello(&stream, deadline) {
            Ok(hello) => hello,
            Err(Silent) => continue,
        };
        let problem = match hello {
            Hello::Stranger => Some(format!(
                "a connection from {from} to {} does not speak bumpgrad's rendezvous protocol (wrong magic) — \
                 another program is using this port, or that rank runs another bumpgrad version; pick a free \
                 port and start every rank from the same build",
                cfg.addr
            )),
            Hello::Rank { rank, world_size } => joined.problem(rank, world_size),
        };
        if let Some(reason) = problem {
            refuse(&stream, REFUSED_PROTOCOL, joined.count, &reason);
            joined.refuse_all(REFUSED_PROTOCOL, &reason);
            return Err(DistError::Protocol(reason));
        }
        if let Hello::Rank { rank, .. } = hello {
            // Small messages go out at once rather than waiting to be merged.
            let _ = stream.set_nodelay(true);
            joined.streams[rank] = Some(stream);
            joined.count += 1;
        }
    }
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

enum Hello {
    Rank { rank: usize, world_size: usize },
    Stranger,
}

/// A connection that closed or said nothing: not a rank.
struct Silent;

fn read_hello(stream: &TcpStream, deadline: Instant) -> Result<Hello, Silent> {
    // Accepted sockets do not inherit the listener's non-blocking mode on
    // Linux, but other systems differ.
    stream.set_nonblocking(false).map_err(|_| Silent)?;
    let wait = deadline.saturating_duration_since(Instant::now()).min(HELLO_WAIT);
    let mut buf = [0u8; HELLO_LEN];
    let until = Instant::now() + wait.max(Duration::from_millis(1));
    read_exact_until(stream, &mut buf, until).map_err(|_| Silent)?;
    if buf[0] != HELLO || buf[1..5] != MAGIC {
        return Ok(Hello::Stranger);
    }
    Ok(Hello::Rank {
        rank: u32_at(&buf, 5) as usize,
        world_size: u32_at(&buf, 9) as usize,
    })
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
    let mut hello = [0u8; HELLO_LEN];
    hello[0] = HELLO;
    hello[1..5].copy_from_slice(&MAGIC);
    hello[5..9].copy_from_slice(&wire_u32(cfg.rank).to_le_bytes());
    hello[9..13].copy_from_slice(&wire_u32(cfg.world_size).to_le_bytes());
    send(&stream, &hello).map_err(|source| io_error(format!("saying hello to rank 0 at {}", cfg.addr), source))?;

    let until = deadline + REPLY_SLACK;
    let answer_lost = |e: io::Error| match e.kind() {
        ErrorKind::TimedOut => timed_out(2),
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => {
            DistError::PeerLost(format!(
                "rank 0 at {} closed the connection before the group formed; see rank 0's output for why.",
                cfg.addr
            ))
        }
        _ => io_error(format!("waiting for rank 0's answer from {}", cfg.addr), e),
    };
    let mut tag = [0u8; 1];
    read_exact_until(&stream, &mut tag, until).map_err(answer_lost)?;
    match tag[0] {
        PAYLOAD => {
            let mut payload = [0u8; PAYLOAD_LEN];
            read_exact_until(&stream, &mut payload, until).map_err(answer_lost)?;
            let links = Links {
                rank: cfg.rank,
                world_size: cfg.world_size,
                peers: vec![Peer { rank: 0, stream }],
            };
            Ok((payload, links))
        }
        REFUSE => {
            let mut head = [0u8; 1 + 4 + 2];
            read_exact_until(&stream, &mut head, until).map_err(answer_lost)?;
            let mut text = vec![0u8; u16::from_le_bytes([head[5], head[6]]) as usize];
            read_exact_until(&stream, &mut text, until).map_err(answer_lost)?;
            let text = String::from_utf8_lossy(&text).into_owned();
            Err(match head[0] {
                REFUSED_TIMEOUT => timed_out(u32_at(&head, 1) as usize),
                REFUSED_PAYLOAD => DistError::Payload(text),
                _ => DistError::Protocol(text),
            })
        }
        other => Err(DistError::Protocol(format!(
            "rank 0 at {} answered with an unknown message (tag {other}) — another program is listening on that \
             port, or rank 0 runs another bumpgrad version; pick a free port and start every rank from the same \
             build",
            cfg.addr
        ))),
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
    let text = clip(text);
    let mut frame = vec![REFUSE, kind];
    frame.extend_from_slice(&wire_u32(joined).to_le_bytes());
    frame.extend_from_slice(&(text.len() as u16).to_le_bytes());
    frame.extend_from_slice(text.as_bytes());
    let _ = send(stream, &frame);
    let _ = stream.shutdown(Shutdown::Both);
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
    /// A peer silent this long is lost (heartbeats go out every second).
    pub heartbeat_timeout: Duration,
    /// Training progress unchanged this long stops the group; `None`: never.
    pub stall_timeout: Option<Duration>,
    /// Watch stdin: its end means the launcher is gone.
    pub launched: bool,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            heartbeat_timeout: Duration::from_secs(30),
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
        let peers = self
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
        let watcher = Watcher {
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
}

enum End {
    Finish,
}

impl Watch {
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
            }
        }
        if now.duration_since(self.last_beat) >= HEARTBEAT_EVERY {
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
