//! `bumpgrad train --gpus N`: one child process per GPU, torchrun style.
//!
//! The launcher starts every rank with its place in the group in the
//! environment (`BUMPGRAD_RANK`, `BUMPGRAD_WORLD_SIZE`,
//! `BUMPGRAD_LOCAL_RANK`, `BUMPGRAD_RENDEZVOUS`, `BUMPGRAD_LAUNCHED=1`,
//! `BUMPGRAD_RENDEZVOUS_TIMEOUT`, `BUMPGRAD_RENDEZVOUS_TOKEN`; the rest of
//! its own environment, NCCL_* included, passes through), then supervises
//! them until all have exited.
//!
//! # Invariants
//!
//! - Each rank leads its own process group, so a Ctrl-C at the terminal
//!   reaches the launcher alone, and what the launcher sends a rank reaches
//!   that rank's own children too.
//! - Each rank's stdin is a pipe the launcher holds open until it returns:
//!   its end is how a rank learns that the launcher died, however it died.
//! - One rank failing stops the others: SIGTERM, then SIGKILL after the
//!   grace period. The launcher returns only once every rank has been
//!   reaped (or, after SIGKILL, found unkillable).
//! - Only children not yet reaped are signalled, so a process group id
//!   cannot have been reused by the time it is signalled.
//! - Every launch has a rendezvous token (the caller's, or a new random
//!   one), so only the ranks it started can join their group.

use super::error::DistError;
use super::token::{Token, TOKEN_VAR};
use std::ffi::OsString;
use std::io;
use std::net::TcpListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The exit status of a run stopped by an interrupt, as a shell reports
/// SIGINT.
pub const INTERRUPTED: i32 = 130;

/// How often the launcher looks at its ranks.
const POLL: Duration = Duration::from_millis(50);
/// How long after SIGKILL a rank may take to be reaped before the launcher
/// gives up on it: a process inside a driver call cannot die until the call
/// returns.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// How to launch a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Ranks to start, one per GPU.
    pub gpus: usize,
    /// Passed to every rank as BUMPGRAD_RENDEZVOUS_TIMEOUT.
    pub rendezvous_timeout: Duration,
    /// After one rank fails, how long the others have between SIGTERM
    /// (stop after this step) and SIGKILL.
    pub grace: Duration,
    /// Passed to every rank as BUMPGRAD_RENDEZVOUS_TOKEN; `None`: a new
    /// random one for this launch.
    pub token: Option<Token>,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        Self {
            gpus: 1,
            rendezvous_timeout: super::rendezvous::DEFAULT_TIMEOUT,
            grace: Duration::from_secs(10),
            token: None,
        }
    }
}

/// Runs `exe` (normally `std::env::current_exe()`) `opts.gpus` times with
/// `args`, one rank each, rendezvousing on a free port of 127.0.0.1, and
/// supervises them. Returns the exit status the launcher should exit with:
///
/// - 0 when every rank exits 0;
/// - the status of the first rank to fail (128 + signal for a signal),
///   after stopping the others (SIGTERM, then SIGKILL once `opts.grace`
///   has passed);
/// - [`INTERRUPTED`] when stopped by an interrupt, unless every rank still
///   exited 0.
///
/// `stop` is the caller's Ctrl-C flag: its handler stores `true` at every
/// interrupt, and the launcher takes each one (stores `false` back). The
/// first asks every rank to checkpoint and exit (SIGTERM); the next kills
/// them (SIGKILL). `log` receives one line per event worth telling.
pub fn launch(
    exe: &Path,
    args: &[OsString],
    opts: &LaunchOptions,
    stop: &AtomicBool,
    log: &mut dyn FnMut(&str),
) -> Result<i32, DistError> {
    if opts.gpus == 0 {
        return Err(DistError::Spawn {
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "no ranks to launch (0 GPUs were asked for)",
            ),
        });
    }
    let addr = format!("127.0.0.1:{}", free_port()?);
    let token = match &opts.token {
        Some(token) => token.clone(),
        None => Token::generate()?,
    };
    let mut ranks = Ranks(Vec::with_capacity(opts.gpus));
    for rank in 0..opts.gpus {
        let mut child = Command::new(exe)
            .args(args)
            .env("BUMPGRAD_RANK", rank.to_string())
            .env("BUMPGRAD_WORLD_SIZE", opts.gpus.to_string())
            .env("BUMPGRAD_LOCAL_RANK", rank.to_string())
            .env("BUMPGRAD_RENDEZVOUS", &addr)
            .env("BUMPGRAD_LAUNCHED", "1")
            .env(TOKEN_VAR, token.secret())
            .env(
                "BUMPGRAD_RENDEZVOUS_TIMEOUT",
                opts.rendezvous_timeout.as_secs_f64().to_string(),
            )
            .stdin(Stdio::piped())
            .process_group(0)
            .spawn()
            // Ranks already started are killed when `ranks` drops.
            .map_err(|e| DistError::Spawn {
                source: io::Error::new(e.kind(), format!("{}: {e}", exe.display())),
            })?;
        let stdin = child.stdin.take();
        ranks.0.push(Rank {
            rank,
            child,
            _stdin: stdin,
            exit: None,
        });
    }
    let pids: Vec<String> = ranks.0.iter().map(|r| r.child.id().to_string()).collect();
    log(&format!(
        "started {} ranks (pids {}), rendezvous at {addr}",
        opts.gpus,
        pids.join(", ")
    ));
    supervise(&mut ranks, opts, stop, log)
}

/// Where supervision stands.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Running,
    /// A rank failed; the others were sent SIGTERM at this moment.
    Draining(Instant),
    /// An interrupt asked every rank to stop.
    Stopping,
    /// Every rank left was sent SIGKILL at this moment.
    Killed(Instant),
}

fn supervise(
    ranks: &mut Ranks,
    opts: &LaunchOptions,
    stop: &AtomicBool,
    log: &mut dyn FnMut(&str),
) -> Result<i32, DistError> {
    let mut phase = Phase::Running;
    let mut failure = None;
    let mut interrupted = false;
    loop {
        for i in 0..ranks.0.len() {
            let r = &mut ranks.0[i];
            if r.exit.is_some() {
                continue;
            }
            let status = r.child.try_wait().map_err(|source| DistError::Io {
                what: format!("waiting for rank {} (pid {})", r.rank, r.child.id()),
                source,
            })?;
            let Some(status) = status else { continue };
            let code = exit_code(status);
            r.exit = Some(code);
            let who = format!("rank {} (pid {})", r.rank, r.child.id());
            if code == 0 {
                continue;
            }
            match phase {
                Phase::Running => {
                    log(&format!("{who} {}; stopping the other ranks", describe(status)));
                    failure = Some(code);
                    ranks.signal_live(libc::SIGTERM);
                    phase = Phase::Draining(Instant::now());
                }
                Phase::Stopping if code != INTERRUPTED => log(&format!("{who} {} while stopping", describe(status))),
                _ => {}
            }
        }
        if ranks.live().next().is_none() {
            break;
        }
        if stop.swap(false, Ordering::SeqCst) {
            match phase {
                Phase::Running => {
                    interrupted = true;
                    ranks.signal_live(libc::SIGTERM);
                    log("stopping: asked every rank to checkpoint and exit");
                    phase = Phase::Stopping;
                }
                Phase::Draining(_) | Phase::Stopping => {
                    interrupted = true;
                    ranks.signal_live(libc::SIGKILL);
                    log("interrupted again: killing every rank");
                    phase = Phase::Killed(Instant::now());
                }
                Phase::Killed(_) => {}
            }
        }
        match phase {
            Phase::Draining(since) if since.elapsed() >= opts.grace => {
                for r in ranks.live() {
                    log(&format!(
                        "rank {} (pid {}) did not exit within {:.1} s of SIGTERM; killing it",
                        r.rank,
                        r.child.id(),
                        opts.grace.as_secs_f64()
                    ));
                }
                ranks.signal_live(libc::SIGKILL);
                phase = Phase::Killed(Instant::now());
            }
            Phase::Killed(since) if since.elapsed() >= KILL_WAIT => {
                for r in ranks.0.iter_mut().filter(|r| r.exit.is_none()) {
                    log(&format!(
                        "rank {} (pid {}) is still alive {} s after SIGKILL (stuck in the kernel?); leaving it",
                        r.rank,
                        r.child.id(),
                        KILL_WAIT.as_secs()
                    ));
                    r.exit = Some(128 + libc::SIGKILL);
                }
                break;
            }
            _ => {}
        }
        thread::sleep(POLL);
    }
    let all_zero = ranks.0.iter().all(|r| r.exit == Some(0));
    Ok(match failure {
        Some(code) => code,
        None if interrupted && !all_zero => INTERRUPTED,
        None => 0,
    })
}

/// The launched ranks. Dropping this kills and reaps any still running, so
/// an early return (a failed spawn, a failed wait) leaves no rank behind.
struct Ranks(Vec<Rank>);

struct Rank {
    rank: usize,
    child: Child,
    /// Held open until the launcher is done; see the module's invariants.
    _stdin: Option<ChildStdin>,
    /// The exit status once reaped (128 + signal for a signal).
    exit: Option<i32>,
}

impl Ranks {
    fn live(&self) -> impl Iterator<Item = &Rank> {
        self.0.iter().filter(|r| r.exit.is_none())
    }

    fn signal_live(&self, signal: libc::c_int) {
        for r in self.live() {
            signal_group(r.child.id(), signal);
        }
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        self.signal_live(libc::SIGKILL);
        let deadline = Instant::now() + KILL_WAIT;
        for r in self.0.iter_mut().filter(|r| r.exit.is_none()) {
            while Instant::now() < deadline {
                if !matches!(r.child.try_wait(), Ok(None)) {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Sends `signal` to the process group led by the child with id `pid`.
/// Failure means the group is already gone, which is what was wanted.
fn signal_group(pid: u32, signal: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill(2) takes two integers and touches no memory of ours. The
    // negative id names the process group that `process_group(0)` made this
    // child lead; callers signal only children they have not reaped, so the
    // id cannot have been reused by another group.
    let _ = unsafe { libc::kill(-pgid, signal) };
}

/// A port that was free a moment ago. Another process could take it before
/// rank 0 binds it; rank 0 then fails with a clear `Bind` error.
fn free_port() -> Result<u16, DistError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| DistError::Io {
            what: "finding a free port on 127.0.0.1 for the rendezvous".into(),
            source,
        })
}

/// A shell's view of an exit: the status, or 128 + the signal.
fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => {
            let name = match signal {
                libc::SIGINT => " (SIGINT)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGBUS => " (SIGBUS)",
                libc::SIGKILL => " (SIGKILL: out of memory?)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGTERM => " (SIGTERM)",
                _ => "",
            };
            format!("was killed by signal {signal}{name}")
        }
        (None, None) => format!("ended ({status})"),
    }
}

/// Ends this process at once with `code`, running no destructor and no
/// `atexit` handler. A rank whose group failed calls this from its watch
/// thread while its main thread may be blocked in a collective that will
/// never complete: an ordinary exit runs the CUDA and NCCL libraries'
/// teardown, which waits for that collective and hangs (seen on the GPU
/// machine: `std::process::exit` never returned).
pub(crate) fn exit_now(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stderr().flush();
    let _ = std::io::stdout().flush();
    // SAFETY: _exit(2) takes an integer and ends the process; it touches no
    // memory of ours. Skipping destructors loses nothing: checkpoints are
    // written to a temporary file and renamed, so none is left half-written.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn sh(script: &str, extra: &[&str]) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["-c".into(), script.into(), "sh".into()];
        args.extend(extra.iter().map(OsString::from));
        args
    }

    fn opts(gpus: usize, grace_ms: u64) -> LaunchOptions {
        LaunchOptions {
            gpus,
            rendezvous_timeout: Duration::from_secs(7),
            grace: Duration::from_millis(grace_ms),
            token: None,
        }
    }

    /// Runs the launcher on `/bin/sh`; returns its result, the log and the
    /// time it took.
    fn run(args: &[OsString], opts: &LaunchOptions, stop: &AtomicBool) -> (i32, Vec<String>, Duration) {
        let mut lines = Vec::new();
        let start = Instant::now();
        let code = launch(Path::new("/bin/sh"), args, opts, stop, &mut |line| {
            lines.push(line.to_string())
        })
        .expect("launch");
        (code, lines, start.elapsed())
    }

    fn scratch(name: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("bumpgrad-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn all_ranks_exiting_zero_exit_zero() {
        let (code, lines, _) = run(&sh("exit 0", &[]), &opts(3, 1000), &AtomicBool::new(false));
        assert_eq!(code, 0, "{lines:?}");
        assert_eq!(lines.len(), 1, "only the start line: {lines:?}");
    }

    /// What each of `gpus` ranks launched with `opts` saw of its
    /// environment: rank, world size, local rank, address, launched,
    /// timeout, PATH, token.
    fn environments(opts: &LaunchOptions) -> (Vec<Vec<String>>, Vec<String>) {
        let dir = scratch("launch-env");
        let script = r#"printf '%s|%s|%s|%s|%s|%s|%s|%s' "$BUMPGRAD_RANK" "$BUMPGRAD_WORLD_SIZE" "$BUMPGRAD_LOCAL_RANK" \
            "$BUMPGRAD_RENDEZVOUS" "$BUMPGRAD_LAUNCHED" "$BUMPGRAD_RENDEZVOUS_TIMEOUT" "$PATH" \
            "$BUMPGRAD_RENDEZVOUS_TOKEN" > "$1/rank-$BUMPGRAD_RANK""#;
        let dir_arg = dir.to_str().unwrap();
        let (code, lines, _) = run(&sh(script, &[dir_arg]), opts, &AtomicBool::new(false));
        assert_eq!(code, 0, "{lines:?}");
        let seen = (0..opts.gpus)
            .map(|r| {
                let text = std::fs::read_to_string(dir.join(format!("rank-{r}"))).unwrap();
                text.split('|').map(str::to_string).collect()
            })
            .collect();
        std::fs::remove_dir_all(&dir).ok();
        (seen, lines)
    }

    #[test]
    fn ranks_see_their_place_in_the_group() {
        let (seen, lines) = environments(&opts(2, 1000));
        for (r, vars) in seen.iter().enumerate() {
            assert_eq!(vars[0], r.to_string());
            assert_eq!(vars[1], "2");
            assert_eq!(vars[2], r.to_string());
            assert!(vars[3].starts_with("127.0.0.1:"), "{vars:?}");
            let port: u16 = vars[3]["127.0.0.1:".len()..].parse().unwrap();
            assert_ne!(port, 0);
            assert_eq!(vars[4], "1");
            assert_eq!(vars[5], "7");
            // The launcher's own environment passes through (NCCL_* too).
            assert_eq!(Some(vars[6].as_str()), std::env::var("PATH").ok().as_deref());
        }
        assert_eq!(seen[0][3], seen[1][3], "one rendezvous address for the group");
        assert!(lines[0].contains(&seen[0][3]), "{lines:?}");
    }

    #[test]
    fn every_launch_gives_its_ranks_one_token_of_its_own() {
        let (first, lines) = environments(&opts(2, 1000));
        let token = &first[0][7];
        assert_eq!(token.len(), 64, "{token:?}");
        assert!(token.chars().all(|c| c.is_ascii_hexdigit()), "{token:?}");
        assert_eq!(&first[1][7], token, "one token for the group");
        assert!(
            !lines.iter().any(|l| l.contains(token.as_str())),
            "never logged: {lines:?}"
        );
        let (second, _) = environments(&opts(2, 1000));
        assert_ne!(&second[0][7], token, "a new one each launch");
        let given = LaunchOptions {
            token: Token::new("the user's own"),
            ..opts(2, 1000)
        };
        let (third, _) = environments(&given);
        assert!(third.iter().all(|vars| vars[7] == "the user's own"), "{third:?}");
    }

    #[test]
    fn first_failure_stops_the_others_and_is_returned() {
        let script = r#"if [ "$BUMPGRAD_RANK" = 1 ]; then exit 3; fi; sleep 30"#;
        let (code, lines, took) = run(&sh(script, &[]), &opts(3, 5000), &AtomicBool::new(false));
        assert_eq!(code, 3, "{lines:?}");
        assert!(took < Duration::from_secs(25), "took {took:?}");
        assert!(
            lines.iter().any(|l| l.starts_with("rank 1 (pid ") && l.ends_with("exited with status 3; stopping the other ranks")),
            "{lines:?}"
        );
        // SIGTERM sufficed: nobody needed killing.
        assert!(!lines.iter().any(|l| l.contains("killing")), "{lines:?}");
    }

    #[test]
    fn ranks_ignoring_sigterm_are_killed_after_the_grace() {
        // The ignored SIGTERM is inherited by `sleep` as well. Rank 0 dies
        // by a signal once rank 1 ignores SIGTERM.
        let dir = scratch("launch-grace");
        let script = r#"trap '' TERM
            if [ "$BUMPGRAD_RANK" = 1 ]; then touch "$1/ready"; exec sleep 30; fi
            n=0; while [ ! -e "$1/ready" ] && [ $n -lt 1000 ]; do sleep 0.02; n=$((n + 1)); done
            kill -USR1 $$"#;
        let args = sh(script, &[dir.to_str().unwrap()]);
        // Rank 1 ignores SIGTERM for sure once `ready` exists, so the short
        // grace races nothing: it only bounds how long the test waits.
        let (code, lines, took) = run(&args, &opts(2, 300), &AtomicBool::new(false));
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(code, 128 + libc::SIGUSR1, "{lines:?}");
        assert!(took < Duration::from_secs(30), "took {took:?}");
        let killed_by = format!("was killed by signal {}; stopping the other ranks", libc::SIGUSR1);
        assert!(
            lines.iter().any(|l| l.starts_with("rank 0") && l.ends_with(&killed_by)),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("rank 1") && l.ends_with("of SIGTERM; killing it")),
            "{lines:?}"
        );
    }

    /// Waits until `dir` holds `ready-0` to `ready-{n-1}`, at most 20 s.
    fn wait_ready(dir: &Path, n: usize) {
        let start = Instant::now();
        while !(0..n).all(|r| dir.join(format!("ready-{r}")).exists()) && start.elapsed().as_secs() < 20 {
            thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn an_interrupt_asks_every_rank_to_stop() {
        // Each rank says it is ready once its trap is set, so the interrupt
        // cannot arrive before the rank can answer it.
        let dir = scratch("launch-stop");
        let script = r#"trap 'exit 130' TERM; touch "$1/ready-$BUMPGRAD_RANK"; sleep 30 & wait"#;
        let args = sh(script, &[dir.to_str().unwrap()]);
        let stop = AtomicBool::new(false);
        let (code, lines, took) = thread::scope(|s| {
            s.spawn(|| {
                wait_ready(&dir, 2);
                stop.store(true, Ordering::SeqCst);
            });
            run(&args, &opts(2, 5000), &stop)
        });
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(code, INTERRUPTED, "{lines:?}");
        assert!(took < Duration::from_secs(30), "took {took:?}");
        assert!(
            lines
                .iter()
                .any(|l| l == "stopping: asked every rank to checkpoint and exit"),
            "{lines:?}"
        );
        // Each rank answered the request itself (status 130), none was
        // killed or ended otherwise.
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("killing") || l.contains("while stopping")),
            "{lines:?}"
        );
    }

    #[test]
    fn a_second_interrupt_kills_every_rank() {
        let dir = scratch("launch-kill");
        let script = r#"trap '' TERM; touch "$1/ready-$BUMPGRAD_RANK"; exec sleep 30"#;
        let args = sh(script, &[dir.to_str().unwrap()]);
        let stop = AtomicBool::new(false);
        let (code, lines, took) = thread::scope(|s| {
            s.spawn(|| {
                // Both ranks ignore SIGTERM before the first interrupt.
                wait_ready(&dir, 2);
                stop.store(true, Ordering::SeqCst);
                // The launcher takes the first interrupt before the second.
                let taken = Instant::now();
                while stop.load(Ordering::SeqCst) && taken.elapsed().as_secs() < 20 {
                    thread::sleep(Duration::from_millis(10));
                }
                stop.store(true, Ordering::SeqCst);
            });
            run(&args, &opts(2, 60_000), &stop)
        });
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(code, INTERRUPTED, "{lines:?}");
        assert!(took < Duration::from_secs(30), "took {took:?}");
        let stopping = lines
            .iter()
            .position(|l| l == "stopping: asked every rank to checkpoint and exit");
        let killing = lines.iter().position(|l| l == "interrupted again: killing every rank");
        assert!(stopping.is_some() && killing > stopping, "{lines:?}");
    }

    #[test]
    fn a_missing_program_is_a_spawn_error() {
        let err = launch(
            Path::new("/nonexistent/bumpgrad"),
            &[],
            &opts(2, 100),
            &AtomicBool::new(false),
            &mut |_| {},
        )
        .unwrap_err();
        assert!(matches!(err, DistError::Spawn { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/bumpgrad"), "{err}");
    }
}
