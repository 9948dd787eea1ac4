//! What a person sees: a progress bar per epoch on a terminal, one summary
//! line per epoch, or one JSON object per epoch with `--json`.

use bumpgrad::memory::{ByteSize, RecomputeReason};
use bumpgrad::tasks::Metric;
use bumpgrad::train::{EpochLine, EpochReport, Observer, RecomputePlan, RunInfo, StepProfile, Timed, WorkspaceHold};
use bumpgrad::Layout;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

pub struct Printer {
    json: bool,
    /// Only JSON: a data-parallel rank other than 0 (rank 0 speaks for all).
    quiet: bool,
    /// Where to write the step's memory timeline when the run starts.
    memory_report: Option<std::path::PathBuf>,
    bar: Option<ProgressBar>,
    loss_sum: f64,
    /// Under a memory budget, the plan the run follows: every JSON epoch
    /// line carries it beside the measured step time.
    recomputed: Option<RecomputePlan>,
    /// The epochs' metrics for the checkpoint directory's CSV and picture.
    curves: Option<crate::curves::Curves>,
    /// The run has no test (validation) examples: its epochs measure no
    /// accuracy.
    untested: bool,
    /// A step's profile was printed (`--profile`).
    profiled: bool,
}

impl Printer {
    pub fn new(json: bool, memory_report: Option<std::path::PathBuf>) -> Self {
        Self {
            json,
            quiet: false,
            memory_report,
            bar: None,
            loss_sum: 0.0,
            recomputed: None,
            curves: None,
            untested: false,
            profiled: false,
        }
    }

    /// Also appends every epoch's metrics to the checkpoint directory's CSV.
    pub fn with_curves(mut self, curves: Option<crate::curves::Curves>) -> Self {
        self.curves = curves;
        self
    }

    /// Whether a step's profile was printed (`--profile`).
    pub fn printed_a_profile(&self) -> bool {
        self.profiled
    }

    /// Draws the curves of the CSV (this run's epochs and any earlier
    /// run's it resumed) and says where, if there were any.
    pub fn finish_curves(&self) {
        if let Some(path) = self.curves.as_ref().and_then(|c| c.finish()) {
            if !self.quiet {
                eprintln!(
                    "curves: {} (from {})",
                    path.display(),
                    path.with_file_name(crate::curves::CSV).display()
                );
            }
        }
    }

    /// A printer for data-parallel rank `rank`: all but rank 0 print only
    /// their JSON lines.
    pub fn for_rank(mut self, rank: usize) -> Self {
        self.quiet = rank != 0;
        if self.quiet {
            self.memory_report = None;
        }
        self
    }

    /// Human lines go to stdout, unless stdout carries JSON.
    fn say(&self, line: &str) {
        if self.quiet {
            return;
        }
        let print = |line: &str| match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        };
        if self.json {
            print(line);
        } else {
            stdout_line(line);
        }
    }
}

impl Observer for Printer {
    fn started(&mut self, info: &RunInfo) {
        if let Some(curves) = self.curves.as_mut() {
            curves.started(info);
        }
        if let Some(note) = info.device_note.as_ref().filter(|_| !self.quiet) {
            eprintln!("bumpgrad: {note}");
        }
        let a = &info.arena;
        self.untested = info.test_examples == 0;
        self.say(&format!(
            "bumpgrad: {} ({} parameters), {}, {}",
            info.model,
            info.parameters,
            crate::choices::in_words(&info.optimizer),
            info.schedule
        ));
        self.say(&format!(
            "bumpgrad: {}, precision {}{}, {}: {} training / {} test {}, {} steps per epoch, augment {}",
            info.device_name,
            info.precision,
            match info.precision.layout() {
                Layout::Nhwc => " (convolutions channels last)",
                Layout::Nchw => "",
            },
            info.data,
            info.train_examples,
            info.test_examples,
            info.example_unit,
            info.steps_per_epoch,
            info.augment
        ));
        if info.synthetic {
            self.say("bumpgrad: synthetic CIFAR-10-shaped data: accuracy means nothing");
        }
        for note in &info.data_notes {
            self.say(&format!("bumpgrad: {note}"));
        }
        self.say(&format!(
            "arena: {} allocated once ({}): persistent {} (model, optimizer, data set), step region {}",
            ByteSize(a.capacity_bytes),
            if info.arena_size_measured {
                "measured by a dry run"
            } else {
                "--arena-size"
            },
            ByteSize(a.persistent_bytes),
            ByteSize(a.capacity_bytes - a.persistent_bytes),
        ));
        // Held workspaces cost time too: the prediction is the budget's
        // whole cost, recomputation and slower algorithms together.
        self.recomputed = info.recomputed.clone();
        if let Some(plan) = &info.recomputed {
            let (dropped, of, extra) = (plan.dropped.len(), plan.candidates, plan.predicted_extra_seconds);
            let lost = plan.workspace_extra_seconds;
            let slower = match lost > 0.0 {
                true => format!(
                    ": {:.2} recomputing, {:.2} in slower convolution algorithms",
                    extra * 1e3,
                    lost * 1e3
                ),
                false => String::new(),
            };
            let bytes: usize = plan.outputs.iter().map(|o| o.bytes).sum();
            self.say(&format!(
                "memory: the step recomputes {dropped} of its {of} convolution and block outputs ({}) in backward rather than keep them{}, {} (predicted {:.2} ms more a step{slower})",
                ByteSize(bytes),
                if plan.transient_chains { ", chains of them made again for each reader" } else { "" },
                match plan.reason {
                    RecomputeReason::MemoryBudget => "to fit --memory-budget",
                    RecomputeReason::ArenaSize => "to fit --arena-size",
                    RecomputeReason::Cheap => "by default, the outputs made again without a multiply-add that lower its peak (--recompute none keeps them)",
                    RecomputeReason::Lean => "by default, the least step a search over budgets found within the allowed time (--recompute cheap recomputes only outputs made without a multiply-add; none keeps them)",
                },
                plan.predicted_step_extra_seconds * 1e3,
            ));
            if let Some(search) = &plan.search {
                self.say(&format!("memory: {}", search.describe()));
            }
        }
        if let Some(lean) = info.conv_tuning.and_then(|t| t.lean) {
            self.say(&format!("memory: {}", lean.describe()));
        }
        if let Some(t) = info.conv_tuning {
            let growth = (info.workspace_growth * 100.0).round();
            // Under a budget (given or the arena's) the bound is the budget.
            let within = match info.recomputed.as_ref().map(|r| r.reason) {
                Some(RecomputeReason::MemoryBudget | RecomputeReason::ArenaSize) => "the memory budget".to_string(),
                Some(RecomputeReason::Lean) => "the default's smaller step".to_string(),
                Some(RecomputeReason::Cheap) | None => format!("{growth}% of the heuristic's"),
            };
            let cost = t.seconds_lost * 1e3;
            let how = match (t.kept, t.held) {
                (false, _) if t.changed > 0 => {
                    format!("; no timed choice kept the step within {within}: its choices kept")
                }
                (_, WorkspaceHold::Held { at_peak, cap }) => {
                    let peak = (at_peak > 0)
                        .then(|| format!("the workspaces of {at_peak} passes that run where the step peaks held down"));
                    let cap = cap.map(|c| format!("every workspace held to {}", ByteSize(c)));
                    let held: Vec<String> = peak.into_iter().chain(cap).collect();
                    let halves = match t.halved {
                        0 => String::new(),
                        n => format!(" ({n} passes run as two halves of the batch, each in a smaller workspace)"),
                    };
                    format!(
                        "; {}{halves} to keep the step within {within} ({cost:.2} ms more a step by cuDNN's timings)",
                        held.join(" and ")
                    )
                }
                (_, WorkspaceHold::Fastest) => String::new(),
            };
            self.say(&format!(
                "cuDNN: every convolution's algorithms timed on the device (as cudnn.benchmark): {} of the shapes run faster ones than the heuristic's{how}",
                t.changed,
            ));
        }
        if let Some((graph, of)) = info.fp32_passes_on_graph.filter(|p| p.0 > 0) {
            self.say(&format!(
                "cuDNN: {graph} of {of} fp32 convolution passes run the graph API's engines, timed faster than the legacy API's algorithms"
            ));
        }
        if let Some((dims, why)) = info.legacy_convolutions.first() {
            self.say(&format!(
                "cuDNN: {} {} convolution shapes run on the legacy API, slower, as the graph API refused them (the first, {dims:?}: {why})",
                info.legacy_convolutions.len(),
                info.precision,
            ));
        }
        if !info.buckets.is_empty() {
            let buckets: Vec<String> = info
                .buckets
                .iter()
                .map(|(names, bytes)| format!("{} ({})", names.join(" + "), ByteSize(*bytes)))
                .collect();
            self.say(&format!(
                "data-parallel: {} GPUs, {} per step ({} on each); gradients summed in {} buckets: {}{}",
                info.world.size,
                info.batch * info.world.size,
                info.batch,
                buckets.len(),
                buckets.join(", "),
                info.nccl_bytes
                    .map(|b| format!("; NCCL took {} of device memory outside the arena", ByteSize(b)))
                    .unwrap_or_default()
            ));
        }
        if let Some(m) = &info.memory {
            self.say(&format!(
                "step memory plan: peak {} against a lower bound of {} ({:.3}×); bump allocation would hold {}",
                ByteSize(m.plan_peak_bytes),
                ByteSize(m.lower_bound_bytes),
                m.plan_peak_bytes as f64 / m.lower_bound_bytes.max(1) as f64,
                ByteSize(m.bump_bytes)
            ));
            if let Some(path) = &self.memory_report {
                let title = format!("bumpgrad step memory: {}, {}", info.model, info.device_name);
                match std::fs::write(path, m.svg(&title)) {
                    Ok(()) => self.say(&format!("memory timeline: {}", path.display())),
                    Err(e) => eprintln!("bumpgrad: warning: could not write {}: {e}", path.display()),
                }
            }
        }
    }

    fn epoch_started(&mut self, epoch: usize, steps: usize) {
        self.loss_sum = 0.0;
        // A bar nobody sees (stderr is a file or a pipe) would only cost.
        if self.quiet || !std::io::stderr().is_terminal() {
            return;
        }
        let bar = ProgressBar::new(steps as u64);
        bar.set_style(
            ProgressStyle::with_template("epoch {prefix:>3} [{bar:30}] {pos}/{len} steps  {msg}  {elapsed}<{eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(epoch.to_string());
        self.bar = Some(bar);
    }

    fn step(&mut self, _epoch: usize, step: usize, loss: f32) {
        self.loss_sum += loss as f64;
        if let Some(bar) = &self.bar {
            bar.inc(1);
            if step.is_multiple_of(20) {
                bar.set_message(format!("loss {:.4}", self.loss_sum / (step + 1) as f64));
            }
        }
    }

    fn resumed_at(&mut self, _epoch: usize, step: usize) {
        if let Some(bar) = &self.bar {
            bar.set_position(step as u64);
        }
    }

    fn checkpoint_written(&mut self, path: &std::path::Path) {
        self.say(&format!("checkpoint: {}", path.display()));
    }

    fn note(&mut self, line: &str) {
        self.say(&format!("bumpgrad: {line}"));
    }

    fn evaluating(&mut self, _epoch: usize) {
        if let Some(bar) = &self.bar {
            bar.set_message("evaluating on the test set");
        }
    }

    fn profiled(&mut self, p: &StepProfile, wall_per_step: f64) {
        self.profiled = true;
        let us = |s: f64| s * 1e6;
        self.say(&format!(
            "profile ({}): the ops take {:.1} µs on the {}{}; the epoch ran {:.1} µs per step{}",
            match p.timed {
                Timed::Cpu => "a step on the CPU, each op timed from its call to its return",
                Timed::GpuReplayed => "a replayed step, GPU time only",
                Timed::GpuQueued => "a step queued op by op, host time inside each op included",
            },
            us(p.kernel_seconds),
            if p.timed == Timed::Cpu { "CPU" } else { "GPU" },
            p.span_seconds
                .map(|s| format!(", {:.1} µs from the first op's start to the last one's end", us(s)))
                .unwrap_or_default(),
            us(wall_per_step),
            p.ops_queued.map(|n| format!(", {n} ops or nodes")).unwrap_or_default(),
        ));
        for (op, calls, seconds) in &p.ops {
            self.say(&format!("  {:>8.1} µs  {calls:>2}×  {op}", us(*seconds)));
        }
    }

    fn epoch(&mut self, r: &EpochReport) {
        if let Some(curves) = self.curves.as_mut() {
            curves.epoch(r);
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        let mut gpu = String::new();
        if let Some(free) = r.device_free_bytes {
            gpu += &format!("  GPU free {free} B");
        }
        if let Some(norm) = r.grad_norm {
            gpu += &format!("  grad norm {norm:.3}");
        }
        if let Some(k) = r.kernels_per_step {
            gpu += &format!("  {k} {} per step", if r.graph { "graph nodes" } else { "ops" });
        }
        let metric = match (r.valid_loss, r.perplexity, r.bits_per_char) {
            (Some(loss), Some(ppl), Some(bits)) => {
                format!("valid loss {loss:.4}  perplexity {ppl:.3}  {bits:.3} bits/char")
            }
            _ if self.untested => "no validation set".to_string(),
            _ => match (r.binary_accuracy, r.node_accuracy) {
                (Some(binary), Some(nodes)) => format!(
                    "root accuracy {:.2}% (binary {:.2}%, all nodes {:.2}%)",
                    100.0 * r.test_accuracy,
                    100.0 * binary,
                    100.0 * nodes
                ),
                _ => format!("test accuracy {:.2}%", 100.0 * r.test_accuracy),
            },
        };
        self.say(&format!(
            "epoch {:>3}  train loss {:.4}  {metric}  {:.2} s (+{:.2} s eval)  step high-water {}{gpu}",
            r.epoch,
            r.train_loss,
            r.seconds,
            r.eval_seconds,
            ByteSize(r.arena.step_high_water_bytes)
        ));
        if self.json {
            match serde_json::to_string(&EpochLine::new(r, self.recomputed.as_ref())) {
                Ok(line) => stdout_line(&line),
                Err(e) => eprintln!("bumpgrad: could not encode the epoch report: {e}"),
            }
        }
    }

    fn tested(&mut self, m: &Metric) {
        let (root, binary, nodes) = (m.headline(), m.binary_accuracy(), m.node_accuracy());
        let more = match (binary, nodes) {
            (Some(binary), Some(nodes)) => format!(" (binary {:.2}%, all nodes {:.2}%)", 100.0 * binary, 100.0 * nodes),
            _ => String::new(),
        };
        self.say(&format!(
            "test split, after the last epoch: root accuracy {:.2}%{more}",
            100.0 * root
        ));
        if self.json {
            let line = serde_json::json!({
                "final_test": {"root_accuracy": root, "binary_accuracy": binary, "node_accuracy": nodes}
            });
            stdout_line(&line.to_string());
        }
    }
}

/// Writes `line` to stdout. A closed stdout (`train | head -2`) must not
/// kill training, nor lose the checkpoints still to come: the run goes on,
/// and what it would have printed goes nowhere.
pub(crate) fn stdout_line(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|_| out.flush());
}
