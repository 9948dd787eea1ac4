//! The connections rank 0 has accepted that have not yet said a whole
//! hello: where strangers are told apart from ranks and dropped, at a
//! bounded cost.

use super::wire::{u32_at, CHALLENGE, CHALLENGE_LEN, HELLO, HELLO_BODY, HELLO_LEN, MAGIC, OLD_MAGIC, RETRY};
use super::{io_error, seconds, HELLO_WAIT};
use crate::distributed::error::DistError;
use crate::distributed::token::{Nonces, NONCE_LEN, PROOF_LEN};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

/// Dropped connections reported one by one; past this many, only counted.
pub(super) const MAX_REPORTED: usize = 20;
/// Connections taken from the listener per look, so that a flood of them
/// cannot keep rank 0 from reading the hellos it has.
const ACCEPT_BATCH: usize = 256;

/// The connections rank 0 has accepted that have not said a whole hello.
pub(super) struct Waiting {
    /// Oldest first.
    pub(super) conns: VecDeque<Conn>,
    /// The most that may wait at once.
    pub(super) cap: usize,
    pub(super) drops: Drops,
    pub(super) nonces: Nonces,
}

impl Waiting {
    /// Takes what the listener has queued (at most [`ACCEPT_BATCH`]),
    /// challenging each; over the cap, the oldest waiting one makes room.
    /// `Err` only for a failure of the listener itself.
    pub(super) fn accept(
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
    pub(super) fn drop_at(&mut self, i: usize, reason: &str, notice: Option<&[u8]>, log: &mut dyn FnMut(&str)) {
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
pub(super) struct Drops {
    count: usize,
}

impl Drops {
    pub(super) fn report(&mut self, from: SocketAddr, reason: &str, log: &mut dyn FnMut(&str)) {
        self.count += 1;
        if self.count <= MAX_REPORTED {
            log(&format!("dropped a connection from {from}: {reason}"));
        }
        if self.count == MAX_REPORTED {
            log("further connections that are not ranks of this run are dropped and counted, not reported one by one");
        }
    }

    pub(super) fn summary(&self, log: &mut dyn FnMut(&str)) {
        if self.count > MAX_REPORTED {
            log(&format!(
                "dropped {} connections in all that were not ranks of this run",
                self.count
            ));
        }
    }
}

/// An accepted connection that has not yet said a whole hello.
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    from: SocketAddr,
    accepted: Instant,
    /// The nonce of this connection's challenge.
    pub(super) nonce: [u8; NONCE_LEN],
    /// The hello so far: never more than one hello is read.
    hello: [u8; HELLO_LEN],
    filled: usize,
}

/// What a waiting connection has said.
pub(super) enum Heard {
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
    pub(super) fn challenge(
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
    pub(super) fn poll(&mut self, now: Instant) -> Heard {
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
