//! The rendezvous's messages on the wire, and reading and writing them
//! within a deadline.
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

use crate::distributed::token::{NONCE_LEN, PROOF_LEN};
use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

pub(super) const MAGIC: [u8; 4] = *b"BGR2";
/// The magic of the protocol before tokens, named when a rank speaks it.
pub(super) const OLD_MAGIC: [u8; 4] = *b"BGR1";
pub(super) const HELLO: u8 = 1;
pub(super) const PAYLOAD: u8 = 2;
pub(super) const REFUSE: u8 = 3;
pub(super) const HEARTBEAT: u8 = 4;
pub(super) const BYE: u8 = 5;
pub(super) const FAIL: u8 = 6;
pub(super) const CHALLENGE: u8 = 7;
pub(super) const RETRY: u8 = 8;
pub(super) const CHALLENGE_LEN: usize = 1 + 4 + 1 + NONCE_LEN;
/// What follows the hello's length field: rank, world size, proof.
pub(super) const HELLO_BODY: usize = 4 + 4 + PROOF_LEN;
pub(super) const HELLO_LEN: usize = 1 + 4 + 4 + HELLO_BODY;

pub(super) const REFUSED_TIMEOUT: u8 = 0;
pub(super) const REFUSED_PROTOCOL: u8 = 1;
pub(super) const REFUSED_PAYLOAD: u8 = 2;
pub(super) const REFUSED_NOT_ADMITTED: u8 = 3;

/// Longest text a `REFUSE` or `FAIL` carries; longer ones are cut.
pub(super) const MAX_TEXT: usize = 1024;
/// Bound on every write of a whole message.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// Fills `buf`, giving up at `until` with [`ErrorKind::TimedOut`].
pub(super) fn read_exact_until(mut stream: &TcpStream, buf: &mut [u8], until: Instant) -> io::Result<()> {
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
pub(super) fn send(mut stream: &TcpStream, frame: &[u8]) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(SEND_TIMEOUT))?;
    stream.write_all(frame)
}

pub(super) fn refuse_frame(kind: u8, joined: usize, text: &str) -> Vec<u8> {
    let text = clip(text);
    let mut frame = vec![REFUSE, kind];
    frame.extend_from_slice(&wire_u32(joined).to_le_bytes());
    frame.extend_from_slice(&(text.len() as u16).to_le_bytes());
    frame.extend_from_slice(text.as_bytes());
    frame
}

pub(super) fn fail_frame(origin: usize, reason: &str) -> Vec<u8> {
    let reason = clip(reason);
    let mut frame = vec![FAIL];
    frame.extend_from_slice(&wire_u32(origin).to_le_bytes());
    frame.extend_from_slice(&(reason.len() as u16).to_le_bytes());
    frame.extend_from_slice(reason.as_bytes());
    frame
}

/// At most [`MAX_TEXT`] bytes, cut at a character boundary.
pub(super) fn clip(text: &str) -> &str {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Ranks and world sizes travel as u32; larger ones saturate, and then
/// fail the world-size check rather than alias a smaller rank.
pub(super) fn wire_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub(super) fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}
