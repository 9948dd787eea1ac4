//! Learning-rate schedules, as a table of one rate per global step.
//!
//! The table is computed once on the host, before training, and kept in the
//! persistent region, where the optimizer ops read the rate of the step the
//! cursor is at ([`crate::ops::lr::LrAt`]): a captured step graph then
//! follows the schedule with nothing re-uploaded between steps.
//!
//! What PyTorch users write, per step (`scheduler.step()` after every
//! `optimizer.step()`):
//! - `constant`: the base rate throughout;
//! - `step:EPOCHS,GAMMA`: `lr · γ^⌊epoch / EPOCHS⌋`, `StepLR` stepped once
//!   an epoch;
//! - `cosine`: `CosineAnnealingLR(T_max = the run's steps after the
//!   warm-up, eta_min = 0)`, from the base rate down towards 0;
//! - a warm-up of `W = round(warmup_epochs · steps_per_epoch)` steps,
//!   `LinearLR(start_factor = 1/W, total_iters = W)`: from `lr/W` rising by
//!   equal steps to reach `lr` at step `W`. It applies to every schedule:
//!   before `cosine` as `SequentialLR(milestones = [W])` (the cosine starts
//!   after the warm-up), and multiplying `constant` and `step` as
//!   `ChainedScheduler` does (the step decay still counts epochs from the
//!   run's start). A warm-up longer than the run ends with the run.

use std::fmt;
use std::str::FromStr;

/// How the rate falls after the warm-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decay {
    /// The base rate throughout.
    Constant,
    /// Multiplied by `gamma` every `every` epochs.
    Step {
        /// Epochs between decays.
        every: usize,
        /// The factor of each decay.
        gamma: f64,
    },
    /// Half a cosine, from the base rate to 0 at the end of the run.
    Cosine,
}

/// A schedule: its decay and the warm-up before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// How the rate falls after the warm-up.
    pub decay: Decay,
    /// Epochs of linear warm-up (fractions allowed); 0 for none.
    pub warmup_epochs: f64,
}

impl Default for Schedule {
    fn default() -> Self {
        Self {
            decay: Decay::Constant,
            warmup_epochs: 0.0,
        }
    }
}

/// A `--schedule` or warm-up that does not parse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// A schedule of no known name.
    #[error("unknown schedule '{0}'; expected constant, step:EPOCHS,GAMMA or cosine")]
    Unknown(String),
    /// A `step:` schedule whose numbers do not parse.
    #[error("schedule '{text}': {problem}; expected step:EPOCHS,GAMMA, e.g. step:30,0.1")]
    Step {
        /// The text given.
        text: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A warm-up that is not a number of epochs.
    #[error("a warm-up of '{0}' epochs: expected a number of epochs, 0 or more")]
    Warmup(String),
}

impl Schedule {
    /// The same decay after a warm-up of `epochs` (finite, 0 or more).
    pub fn with_warmup(self, epochs: f64) -> Result<Self, ScheduleError> {
        if !(epochs.is_finite() && epochs >= 0.0) {
            return Err(ScheduleError::Warmup(epochs.to_string()));
        }
        Ok(Self {
            warmup_epochs: epochs,
            ..self
        })
    }

    /// Steps of warm-up in a run of `total` steps.
    fn warmup_steps(&self, steps_per_epoch: usize, total: usize) -> usize {
        let w = (self.warmup_epochs * steps_per_epoch as f64).round();
        if w >= total as f64 {
            total
        } else {
            w as usize
        }
    }

    /// The rate of every global step of a run of `epochs` epochs of
    /// `steps_per_epoch` steps, each computed in f64 and rounded to f32
    /// once. Trailing repeats of the last rate are left out, since past the
    /// table's end its last rate holds: a constant rate is a table of one,
    /// and a constant after a warm-up of `W` steps a table of `W + 1`.
    pub fn table(&self, base_lr: f32, steps_per_epoch: usize, epochs: usize) -> Vec<f32> {
        let base = base_lr as f64;
        let total = steps_per_epoch.saturating_mul(epochs);
        let warmup = self.warmup_steps(steps_per_epoch, total);
        let mut table: Vec<f32> = (0..total)
            .map(|i| {
                let warm = if i < warmup {
                    let start = 1.0 / warmup as f64;
                    start + (1.0 - start) * i as f64 / warmup as f64
                } else {
                    1.0
                };
                let decay = match self.decay {
                    Decay::Constant => 1.0,
                    Decay::Step { every, gamma } => gamma.powi((i / steps_per_epoch / every) as i32),
                    Decay::Cosine if i < warmup => 1.0,
                    Decay::Cosine => {
                        let (j, t) = ((i - warmup) as f64, (total - warmup) as f64);
                        (1.0 + (std::f64::consts::PI * j / t).cos()) / 2.0
                    }
                };
                (base * warm * decay) as f32
            })
            .collect();
        while table.len() > 1 && table[table.len() - 2] == table[table.len() - 1] {
            table.pop();
        }
        if table.is_empty() {
            table.push(base_lr);
        }
        table
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.decay {
            Decay::Constant => f.write_str("constant")?,
            Decay::Step { every, gamma } => write!(f, "step:{every},{gamma}")?,
            Decay::Cosine => f.write_str("cosine")?,
        }
        if self.warmup_epochs > 0.0 {
            write!(f, "+warmup:{}", self.warmup_epochs)?;
        }
        Ok(())
    }
}

/// `constant`, `step:EPOCHS,GAMMA` or `cosine`, optionally followed by
/// `+warmup:EPOCHS` (as [`Schedule`]'s `Display` writes a warm-up).
impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let (decay_text, warmup) = match text.split_once("+warmup:") {
            Some((d, w)) => {
                let epochs = w.trim().parse::<f64>().map_err(|_| ScheduleError::Warmup(w.into()))?;
                (d.trim(), epochs)
            }
            None => (text, 0.0),
        };
        let decay = match decay_text {
            "constant" => Decay::Constant,
            "cosine" => Decay::Cosine,
            _ => match decay_text.strip_prefix("step:") {
                Some(args) => parse_step(text, args)?,
                None => return Err(ScheduleError::Unknown(text.into())),
            },
        };
        Schedule {
            decay,
            warmup_epochs: 0.0,
        }
        .with_warmup(warmup)
    }
}

fn parse_step(text: &str, args: &str) -> Result<Decay, ScheduleError> {
    let bad = |problem| ScheduleError::Step {
        text: text.into(),
        problem,
    };
    let (every, gamma) = args.split_once(',').ok_or(bad("no GAMMA"))?;
    let every = every
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&e| e >= 1)
        .ok_or(bad("EPOCHS must be a whole number, 1 or more"))?;
    let gamma = gamma
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|g| g.is_finite() && *g > 0.0)
        .ok_or(bad("GAMMA must be a positive number"))?;
    Ok(Decay::Step { every, gamma })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Schedule {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn f32s(v: &[f64]) -> Vec<f32> {
        v.iter().map(|&x| x as f32).collect()
    }

    #[test]
    fn text_round_trips_through_display() {
        for text in [
            "constant",
            "step:30,0.1",
            "cosine",
            "cosine+warmup:2",
            "step:2,0.5+warmup:0.5",
        ] {
            assert_eq!(parse(text).to_string(), text);
        }
        assert_eq!(
            parse("step:30,0.1"),
            Schedule {
                decay: Decay::Step { every: 30, gamma: 0.1 },
                warmup_epochs: 0.0
            }
        );
        let warm = parse("cosine").with_warmup(1.5).unwrap();
        assert_eq!(warm.to_string(), "cosine+warmup:1.5");
        assert_eq!(parse(&warm.to_string()), warm);
        assert_eq!(Schedule::default().to_string(), "constant");
    }

    #[test]
    fn bad_text_gets_a_clear_error() {
        let cases = [
            (
                "cosinus",
                "unknown schedule 'cosinus'; expected constant, step:EPOCHS,GAMMA or cosine",
            ),
            (
                "step:30",
                "schedule 'step:30': no GAMMA; expected step:EPOCHS,GAMMA, e.g. step:30,0.1",
            ),
            (
                "step:0,0.1",
                "schedule 'step:0,0.1': EPOCHS must be a whole number, 1 or more",
            ),
            ("step:2.5,0.1", "EPOCHS must be a whole number, 1 or more"),
            ("step:3,-1", "schedule 'step:3,-1': GAMMA must be a positive number"),
            ("step:3,inf", "GAMMA must be a positive number"),
            (
                "cosine+warmup:x",
                "a warm-up of 'x' epochs: expected a number of epochs, 0 or more",
            ),
            ("cosine+warmup:-1", "a warm-up of '-1' epochs"),
        ];
        for (text, expected) in cases {
            let err = text.parse::<Schedule>().unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
        assert!(Schedule::default().with_warmup(f64::NAN).is_err());
    }

    #[test]
    fn a_constant_rate_is_a_table_of_one() {
        assert_eq!(parse("constant").table(0.1, 600, 10), [0.1]);
        assert_eq!(parse("cosine").table(0.1, 0, 10), [0.1], "an empty run");
    }

    #[test]
    fn step_decay_multiplies_by_gamma_every_epochs() {
        // 2 steps an epoch, 5 epochs, halved every 2 epochs; the last
        // epoch's second step repeats its first and is left out.
        let table = parse("step:2,0.5").table(0.8, 2, 5);
        assert_eq!(table, [0.8, 0.8, 0.8, 0.8, 0.4, 0.4, 0.4, 0.4, 0.2]);
    }

    #[test]
    fn cosine_falls_from_the_rate_towards_zero_over_the_run() {
        let h = std::f64::consts::FRAC_1_SQRT_2 / 2.0;
        // 4 steps: (1 + cos(πj/4)) / 2.
        assert_eq!(parse("cosine").table(1.0, 2, 2), f32s(&[1.0, 0.5 + h, 0.5, 0.5 - h]));
    }

    #[test]
    fn warm_up_is_pytorchs_linear_lr_then_the_schedule() {
        // W = 2 steps: lr/2, then 3lr/4, then the cosine over the other 4.
        let h = std::f64::consts::FRAC_1_SQRT_2 / 2.0;
        assert_eq!(
            parse("cosine+warmup:1").table(1.0, 2, 3),
            f32s(&[0.5, 0.75, 1.0, 0.5 + h, 0.5, 0.5 - h])
        );
        // W = round(0.5 · 4) = 2 steps, then constant: a table of 3.
        assert_eq!(parse("constant+warmup:0.5").table(0.1, 4, 3), f32s(&[0.05, 0.075, 0.1]));
        // W = 4 steps (from 1/4), times a decay counted from the run's start.
        assert_eq!(
            parse("step:1,0.5+warmup:2").table(1.0, 2, 3),
            f32s(&[0.25, 0.4375, 0.5 * 0.625, 0.5 * 0.8125, 0.25])
        );
        // A warm-up longer than the run ends with it.
        assert_eq!(parse("cosine+warmup:9").table(1.0, 2, 1), [0.5, 0.75]);
    }
}
