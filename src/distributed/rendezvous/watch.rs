//! Watching a formed group: what a rank asks of the watch, and the handle
//! that ends it cleanly or, dropped, as a failure.

use super::watcher::{stdin_closed, Watched, Watcher};
use super::Links;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

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
    pub(super) fn watch_with(
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

pub(super) enum End {
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
