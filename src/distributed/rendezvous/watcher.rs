//! The watch thread: it reads every link, sends heartbeats, and on the
//! first failure tells every peer why and closes every link.

use super::seconds;
use super::watch::{End, WatchOptions};
use super::wire::{fail_frame, send, u32_at, BYE, FAIL, HEARTBEAT, MAX_TEXT};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// The watch thread's period: how soon a closed link or a finish is seen.
const POLL: Duration = Duration::from_millis(50);

/// Why the group stops.
struct Failure {
    /// The rank that stopped it.
    origin: usize,
    /// A complete sentence.
    reason: String,
}

/// One link as the watch thread sees it.
pub(super) struct Watched {
    pub(super) rank: usize,
    pub(super) stream: TcpStream,
    /// Bytes received and not yet parsed into messages.
    pub(super) inbox: Vec<u8>,
    pub(super) heard: Instant,
    pub(super) said_bye: bool,
}

/// A message a peer may send while watched.
pub(super) enum Message {
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
pub(super) fn parse(inbox: &[u8]) -> Option<(Message, usize)> {
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
pub(super) struct Watcher<F> {
    pub(super) rank: usize,
    pub(super) peers: Vec<Watched>,
    pub(super) progress: Arc<AtomicU64>,
    /// The progress value last seen to change, and when.
    pub(super) last_progress: (u64, Instant),
    pub(super) last_beat: Instant,
    /// Shared with the [`Watch`]: `peers.len()`.
    pub(super) watching: Arc<AtomicUsize>,
    pub(super) opts: WatchOptions,
    pub(super) launcher_gone: Option<Arc<AtomicBool>>,
    /// A link that could not be set up for watching.
    pub(super) broken: Option<String>,
    pub(super) on_failure: Arc<Mutex<Option<F>>>,
}

impl<F: FnOnce(String)> Watcher<F> {
    pub(super) fn run(mut self, ended: mpsc::Receiver<End>) {
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
pub(super) fn stdin_closed() -> Arc<AtomicBool> {
    static CLOSED: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    CLOSED.get_or_init(|| until_eof(io::stdin())).clone()
}

/// A flag set when `input` ends (or fails); what arrives is discarded.
pub(super) fn until_eof(mut input: impl Read + Send + 'static) -> Arc<AtomicBool> {
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
