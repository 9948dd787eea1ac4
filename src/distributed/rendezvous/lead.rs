//! Rank 0's side of the rendezvous: it admits the ranks of this job, one
//! hello each, refuses the group when it cannot form, and hands every rank
//! the payload once the group is whole.

use super::waiting::{Drops, Heard, Waiting};
use super::wire::{
    refuse_frame, send, PAYLOAD, REFUSED_NOT_ADMITTED, REFUSED_PAYLOAD, REFUSED_PROTOCOL, REFUSED_TIMEOUT, RETRY,
};
use super::{io_error, Links, Peer, RendezvousConfig, MAX_WAIT, MAX_WAITING, PAYLOAD_LEN};
use crate::distributed::error::DistError;
use crate::distributed::token::Nonces;
use std::collections::VecDeque;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// Between rank 0's looks for new connections and hellos.
const ACCEPT_POLL: Duration = Duration::from_millis(10);

/// Rank 0's side of the rendezvous.
pub(super) fn lead(
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
pub(super) fn lead_on(
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

/// Tells a joined rank why the group will not form; best effort, since
/// the rank learns it from the closed connection anyway.
fn refuse(stream: &TcpStream, kind: u8, joined: usize, text: &str) {
    let _ = send(stream, &refuse_frame(kind, joined, text));
    let _ = stream.shutdown(Shutdown::Both);
}
