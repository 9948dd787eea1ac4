//! The run's curves, in the checkpoint directory of a run that writes
//! checkpoints as it goes (not under `--checkpoint-every off`): every epoch appends a row
//! to `metrics.csv`, and the end of the run, Ctrl-C included, draws
//! `curves.svg` from the whole file: the losses on the left, the accuracy on
//! the right. A run's first row drops those of its epoch and after: a fresh
//! run starts the file anew, a resumed one keeps the epochs before the one
//! it resumes in (an epoch it repeats is written once) and goes on.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use bumpgrad::train::{EpochReport, RunInfo};

/// The CSV's file name in the checkpoint directory.
pub(crate) const CSV: &str = "metrics.csv";
/// The picture's.
pub(crate) const SVG: &str = "curves.svg";
const HEADER: &str = "epoch,train_loss,valid_loss,accuracy,lr,examples_per_second,seconds";

/// Appends the epochs' rows as they end.
pub(crate) struct Curves {
    dir: PathBuf,
    batch: usize,
    base_lr: f32,
    schedule: bumpgrad::optim::Schedule,
    epochs: usize,
    /// The learning rate of every step, once the run says its steps.
    rates: Vec<f32>,
    steps_per_epoch: usize,
    /// The first failure to write, said once; the run goes on without curves.
    failed: bool,
    /// Whether this process has written a row yet.
    written: bool,
}

impl Curves {
    /// Curves for a run that writes checkpoints as it goes; none under
    /// `--checkpoint-every off`, which asks for nothing in the directory
    /// unless the run is stopped.
    pub(crate) fn new(cfg: &bumpgrad::train::TrainConfig) -> Option<Self> {
        let policy = cfg.run.checkpoints.as_ref()?;
        policy.every?;
        let dir = policy.dir.clone();
        Some(Self {
            dir,
            batch: cfg.run.batch,
            base_lr: cfg.run.lr,
            schedule: cfg.run.schedule,
            epochs: cfg.run.epochs,
            rates: Vec::new(),
            steps_per_epoch: 0,
            failed: false,
            written: false,
        })
    }

    pub(crate) fn started(&mut self, info: &RunInfo) {
        self.steps_per_epoch = info.steps_per_epoch;
        self.rates = self.schedule.table(self.base_lr, info.steps_per_epoch, self.epochs);
    }

    /// The rate of the epoch's last step.
    fn lr(&self, epoch: usize) -> Option<f32> {
        let last = (epoch * self.steps_per_epoch).checked_sub(1)?;
        self.rates.get(last.min(self.rates.len().checked_sub(1)?)).copied()
    }

    pub(crate) fn epoch(&mut self, r: &EpochReport) {
        if self.failed {
            return;
        }
        let num = |v: Option<f64>| v.filter(|v| v.is_finite()).map_or(String::new(), |v| format!("{v}"));
        let rate = (r.seconds > 0.0).then(|| (r.steps * self.batch) as f64 / r.seconds);
        let row = format!(
            "{},{},{},{},{},{},{}",
            r.epoch,
            num(Some(r.train_loss)),
            num(r.valid_loss),
            num(Some(r.test_accuracy)),
            self.lr(r.epoch).map_or(String::new(), |lr| lr.to_string()),
            num(rate.map(|v| (v * 10.0).round() / 10.0)),
            num(Some(r.seconds)),
        );
        let path = self.dir.join(CSV);
        let first = !std::mem::replace(&mut self.written, true);
        let kept = if first { start(&path, r.epoch) } else { Ok(()) };
        if let Err(e) = kept.and_then(|()| append(&path, &row)) {
            self.failed = true;
            eprintln!(
                "bumpgrad: warning: cannot write {} ({e}); training goes on without it",
                self.dir.join(CSV).display()
            );
        }
    }

    /// Draws the curves of every row the CSV holds, if it holds any.
    pub(crate) fn finish(&self) -> Option<PathBuf> {
        let text = std::fs::read_to_string(self.dir.join(CSV)).ok()?;
        let rows = parse(&text);
        if rows.is_empty() {
            return None;
        }
        let path = self.dir.join(SVG);
        match std::fs::write(&path, svg(&rows)) {
            Ok(()) => Some(path),
            Err(e) => {
                eprintln!("bumpgrad: warning: cannot write {} ({e})", path.display());
                None
            }
        }
    }
}

/// Readies the CSV for this process's first row, of `epoch`: the rows of
/// the epochs before it are kept, the others dropped.
fn start(path: &Path, epoch: usize) -> std::io::Result<()> {
    let old = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let kept: Vec<&str> = old
        .lines()
        .filter(|line| {
            let row_epoch = line.split(',').next().and_then(|e| e.parse::<usize>().ok());
            row_epoch.is_some_and(|e| e < epoch)
        })
        .collect();
    let mut text = format!("{HEADER}\n");
    for line in kept {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(path, text)
}

/// Appends `row`, with the header first where the file is new.
fn append(path: &Path, row: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let new = !path.exists();
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    if new {
        writeln!(file, "{HEADER}")?;
    }
    writeln!(file, "{row}")
}

/// One row of the CSV: the epoch, then each column (absent: empty).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub epoch: f64,
    pub train_loss: Option<f64>,
    pub valid_loss: Option<f64>,
    pub accuracy: Option<f64>,
}

/// The rows of a CSV this module wrote; a line it cannot read is skipped
/// (a run cut off mid-write leaves at most a partial last line).
pub(crate) fn parse(text: &str) -> Vec<Row> {
    text.lines()
        .filter(|l| *l != HEADER)
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            if cells.len() != HEADER.split(',').count() {
                return None;
            }
            let cell = |i: usize| cells[i].parse::<f64>().ok().filter(|v| v.is_finite());
            Some(Row {
                epoch: cell(0)?,
                train_loss: cell(1),
                valid_loss: cell(2),
                accuracy: cell(3),
            })
        })
        .collect()
}

/// One panel's series: a name, a colour and its points.
struct Series<'a> {
    name: &'a str,
    colour: &'a str,
    points: Vec<(f64, f64)>,
}

const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 280.0;
const MARGIN: f64 = 50.0;

/// The picture: losses left, accuracy right (where there is one).
pub(crate) fn svg(rows: &[Row]) -> String {
    let series = |name, colour, f: fn(&Row) -> Option<f64>| Series {
        name,
        colour,
        points: rows.iter().filter_map(|r| Some((r.epoch, f(r)?))).collect(),
    };
    let losses = [
        series("train loss", "#1f77b4", |r| r.train_loss),
        series("validation loss", "#ff7f0e", |r| r.valid_loss),
    ];
    let accuracy = [series("accuracy", "#2ca02c", |r| r.accuracy.map(|a| 100.0 * a))];
    let panels: Vec<(&str, &[Series])> = [("loss", &losses[..]), ("accuracy (%)", &accuracy[..])]
        .into_iter()
        .filter(|(_, s)| s.iter().any(|s| !s.points.is_empty()))
        .collect();
    let width = panels.len().max(1) as f64 * (PANEL_W + MARGIN) + MARGIN;
    let height = PANEL_H + 2.0 * MARGIN;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, (title, series)) in panels.iter().enumerate() {
        let x0 = MARGIN + i as f64 * (PANEL_W + MARGIN);
        panel(&mut out, x0, MARGIN, title, series);
    }
    out.push_str("</svg>\n");
    out
}

/// One panel at `(x0, y0)`: a frame, the axes' ranges, a line per series.
fn panel(out: &mut String, x0: f64, y0: f64, title: &str, series: &[Series]) {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut xmin, mut xmax, mut ymin, mut ymax) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        (xmin, xmax, ymin, ymax) = (xmin.min(x), xmax.max(x), ymin.min(y), ymax.max(y));
    }
    if xmax <= xmin {
        (xmin, xmax) = (xmin - 0.5, xmax + 0.5);
    }
    if ymax <= ymin {
        (ymin, ymax) = (ymin - 0.5, ymax + 0.5);
    }
    let sx = |x: f64| x0 + (x - xmin) / (xmax - xmin) * PANEL_W;
    let sy = |y: f64| y0 + PANEL_H - (y - ymin) / (ymax - ymin) * PANEL_H;
    let _ = writeln!(
        out,
        r##"<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#888"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle" font-weight="bold">{title}</text>"#,
        x0 + PANEL_W / 2.0,
        y0 - 18.0
    );
    let label = |v: f64| {
        if v.abs() >= 100.0 || v == v.trunc() {
            format!("{v:.0}")
        } else {
            format!("{v:.3}")
        }
    };
    for (y, anchor_y) in [(ymax, y0 + 4.0), (ymin, y0 + PANEL_H)] {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{anchor_y}" text-anchor="end">{}</text>"#,
            x0 - 4.0,
            label(y)
        );
    }
    for (x, anchor) in [(xmin, "start"), (xmax, "end")] {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="{anchor}">epoch {}</text>"#,
            sx(x),
            y0 + PANEL_H + 16.0,
            label(x)
        );
    }
    for (k, s) in series.iter().filter(|s| !s.points.is_empty()).enumerate() {
        let points: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            s.colour,
            points.join(" ")
        );
        for &(x, y) in &s.points {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"/>"#,
                sx(x),
                sy(y),
                s.colour
            );
        }
        let ly = y0 + 14.0 + 16.0 * k as f64;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{ly}" text-anchor="end" fill="{}">{}</text>"#,
            x0 + PANEL_W - 6.0,
            s.colour,
            s.name
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_with_absent_columns_and_a_cut_off_line() {
        let text = format!("{HEADER}\n1,2.5,,0.5,0.05,1000,1.2\n2,1.5,1.7,0.75,0.05,1100,1.1\n3,1.2,1.");
        let rows = parse(&text);
        assert_eq!(rows.len(), 2, "the partial last line is skipped");
        assert_eq!(rows[0].valid_loss, None);
        assert_eq!(rows[1].valid_loss, Some(1.7));
        assert_eq!(rows[1].accuracy, Some(0.75));
    }

    #[test]
    fn the_picture_has_a_line_per_series_through_every_epoch() {
        let rows = parse(&format!(
            "{HEADER}\n1,2.5,2.6,0.5,,,1\n2,1.5,1.7,0.75,,,1\n3,1.0,1.4,0.8,,,1\n"
        ));
        let svg = svg(&rows);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 3, "train, validation, accuracy");
        assert_eq!(svg.matches("<circle").count(), 9, "a point per epoch per series");
        // The first train-loss point is the panel's top (the largest loss).
        assert!(svg.contains(&format!(
            "{:.1},{:.1}",
            MARGIN,
            MARGIN + PANEL_H * (1.0 - (2.5 - 1.0) / (2.6 - 1.0))
        )));
    }

    #[test]
    fn a_language_model_without_accuracy_draws_one_panel() {
        let rows = parse(&format!("{HEADER}\n1,2.5,2.6,,,,1\n2,1.5,1.7,,,,1\n"));
        let svg = svg(&rows);
        assert!(!svg.contains("accuracy (%)"));
        assert_eq!(svg.matches("<polyline").count(), 2);
    }
}
