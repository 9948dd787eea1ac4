//! A non-zero rank's side of the rendezvous: it connects to rank 0
//! (again while rank 0 is not up, or asks it to retry), answers the
//! challenge with its hello, and reads rank 0's answer.

use super::wire::{
    read_exact_until, send, u32_at, wire_u32, CHALLENGE, CHALLENGE_LEN, HELLO, HELLO_BODY, HELLO_LEN, MAGIC, MAX_TEXT,
    PAYLOAD, REFUSE, REFUSED_NOT_ADMITTED, REFUSED_PAYLOAD, REFUSED_TIMEOUT, RETRY,
};
use super::{io_error, Links, Peer, RendezvousConfig, MAX_WAIT, PAYLOAD_LEN, REPLY_SLACK};
use crate::distributed::error::DistError;
use crate::distributed::token::{NONCE_LEN, PROOF_LEN};
use std::io::{self, ErrorKind};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

/// Between a joiner's connection attempts while rank 0 is not listening yet.
const CONNECT_RETRY: Duration = Duration::from_millis(100);

/// A non-zero rank's side of the rendezvous.
pub(super) fn join(cfg: &RendezvousConfig) -> Result<([u8; PAYLOAD_LEN], Links), DistError> {
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
