//! Where a CPU step's time goes (`--profile`): the host's clock read around
//! each op's call, while a step is timed. The CPU runs an op's body to the
//! end before the next starts, so the clock times the op itself: its
//! kernels, its workers' joins, nothing queued.

use crate::backend::OpTime;
use std::panic::Location;
use std::time::Instant;

/// Op times of one step. Idle (and empty) unless enabled.
#[derive(Default)]
pub(crate) struct OpClock {
    /// Room for this many ops a step, reserved when enabled (so that timing
    /// a step allocates nothing in it); zero while disabled.
    room: usize,
    /// Timing ops right now.
    recording: bool,
    times: Vec<OpTime>,
    /// The first timed op's start and the last one's end.
    span: Option<(Instant, Instant)>,
}

impl OpClock {
    /// Prepares to time up to `ops` ops of a step.
    pub(crate) fn enable(&mut self, ops: usize) {
        self.room = ops.max(1);
        self.times.reserve(self.room);
    }

    /// Times every op from now on, until [`OpClock::pause`]; false when
    /// not enabled.
    pub(crate) fn start(&mut self) -> bool {
        self.recording = self.room > 0;
        self.recording
    }

    pub(crate) fn pause(&mut self) {
        self.recording = false;
    }

    /// Runs `op`, timing it if the clock is recording and has room (an op
    /// past the room runs untimed, inside the span).
    pub(crate) fn time<R>(&mut self, name: &'static str, at: &'static Location<'static>, op: impl FnOnce() -> R) -> R {
        if !self.recording {
            return op();
        }
        let start = Instant::now();
        let out = op();
        let end = Instant::now();
        if self.times.len() < self.room {
            self.times.push(OpTime {
                op: name,
                at: Some(at),
                seconds: (end - start).as_secs_f64(),
            });
        }
        self.span = Some(self.span.map_or((start, end), |(first, _)| (first, end)));
        out
    }

    /// Moves the timed ops into `out` and returns the seconds from the
    /// first one's start to the last one's end; `None` if none was timed.
    pub(crate) fn finish(&mut self, out: &mut Vec<OpTime>) -> Option<f64> {
        out.append(&mut self.times);
        self.span.take().map(|(first, last)| (last - first).as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ops_between_start_and_pause_are_timed_and_only_when_enabled() {
        let at = Location::caller();
        let mut clock = OpClock::default();
        assert!(!clock.start(), "a clock never enabled times nothing");
        clock.time("before", at, || ());
        let mut out = Vec::new();
        assert_eq!(clock.finish(&mut out), None);
        assert!(out.is_empty());

        clock.enable(2);
        clock.time("untimed", at, || ());
        assert!(clock.start());
        clock.time("first", at, || std::thread::sleep(std::time::Duration::from_millis(2)));
        clock.time("second", at, || ());
        clock.time("past the room", at, || {
            std::thread::sleep(std::time::Duration::from_millis(2))
        });
        clock.pause();
        clock.time("after", at, || ());
        let span = clock.finish(&mut out).expect("ops were timed");
        let names: Vec<_> = out.iter().map(|t| t.op).collect();
        assert_eq!(names, ["first", "second"]);
        assert!(out[0].seconds >= 0.002, "{:?}", out[0]);
        let timed: f64 = out.iter().map(|t| t.seconds).sum();
        assert!(
            span >= timed + 0.002,
            "the span covers the op past the room: {span} against {timed}"
        );
        assert_eq!(clock.finish(&mut Vec::new()), None, "finishing empties the clock");
    }
}
