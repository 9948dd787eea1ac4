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
//! out, or no whole hello within `HELLO_WAIT` (3 s) is closed and reported once
//! through the caller's log, and rank 0 goes on waiting for the real ranks
//! until its own timeout. What strangers can cost is bounded: at most
//! `MAX_WAITING` (64) connections (or the world size, if larger) wait for their
//! hello at once, a new one beyond that evicting the oldest; each waits at
//! most `HELLO_WAIT`; its bytes go to a fixed buffer of one hello, so no
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
//! - Nothing here blocks past the configured timeout (plus `REPLY_SLACK`, 1 s):
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
//! # Where it lives
//!
//! - `wire`: the messages and their bytes (the table of them is its doc),
//!   written and read within a deadline;
//! - `lead`: rank 0's side, admitting one hello per rank and handing out
//!   the payload; `waiting`: the connections it accepted that have not said
//!   a whole hello, where strangers are dropped;
//! - `join`: every other rank's side;
//! - `watch`: [`Links::watch`] and the [`Watch`] it returns; `watcher`: the
//!   thread behind it.

mod join;
mod lead;
mod waiting;
mod watch;
mod watcher;
mod wire;

pub use watch::{Watch, WatchOptions};

use super::env::Source;
use super::error::DistError;
use super::token::Token;
use std::io;
use std::net::TcpStream;
use std::time::Duration;

/// The bytes rank 0 hands every rank: a NCCL unique id.
pub(crate) const PAYLOAD_LEN: usize = 128;
/// How long [`RendezvousConfig::from_env`] waits for the group when
/// `BUMPGRAD_RENDEZVOUS_TIMEOUT` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// A connection that has not sent a whole hello this long after it was
/// accepted is dropped (and told to retry, should it be a slow rank).
pub(crate) const HELLO_WAIT: Duration = Duration::from_secs(3);
/// Connections that may wait for their hello at once (or the world size,
/// if larger); one more evicts the oldest.
pub(crate) const MAX_WAITING: usize = 64;
/// How long past its own deadline a joiner waits for rank 0's answer, so
/// that rank 0, timing out at about the same moment, can say how many
/// ranks had joined.
const REPLY_SLACK: Duration = Duration::from_secs(1);
/// Longer timeouts are cut to this, so that no deadline overflows.
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Where this process stands in a data-parallel group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RendezvousConfig {
    /// This process's rank, from 0.
    pub rank: usize,
    /// The ranks in the group.
    pub world_size: usize,
    /// host:port of rank 0's listener; unused (may be empty) when
    /// `world_size` is 1.
    pub addr: String,
    /// How long the rendezvous waits for every rank before it gives up.
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

impl Links {
    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The ranks in the group.
    pub fn world_size(&self) -> usize {
        self.world_size
    }
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
        lead::lead(cfg, make_payload, log)
    } else {
        join::join(cfg)
    }
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

#[cfg(test)]
mod tests;
