//! One op's time in a profiled step (`--profile`), on either device: the
//! GPU names its launches (kernels and library calls), the CPU its ops by
//! where they are written, since one CPU op body may run several kernels.

use std::panic::Location;

/// How long one op of a timed step took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpTime {
    /// The op: a GPU launch's name, or the path of a CPU op's body (its
    /// closure's type name).
    pub op: &'static str,
    /// Where a CPU op was launched, in the source: two launches of one op
    /// body (a convolution's two gradients) are told apart by it.
    pub at: Option<&'static Location<'static>>,
    /// Its time: between GPU events recorded around it, or on the host's
    /// clock around the CPU's call.
    pub seconds: f64,
}

impl OpTime {
    /// What a profile prints: the GPU launch's name as it is; a CPU op's
    /// path without the crate, the `impl` blocks and the closures
    /// (`conv2d::Saved::backward`), with the line that launched it.
    pub fn label(&self) -> String {
        match self.at {
            None => self.op.to_string(),
            Some(at) => format!("{} ({}:{})", short_path(self.op), at.file(), at.line()),
        }
    }
}

/// `bumpgrad::ops::batch_norm2d::forward::<impl bumpgrad::ops::batch_norm2d::Saved>::apply::{{closure}}`
/// as `batch_norm2d::forward::apply`.
fn short_path(path: &str) -> String {
    let kept: Vec<&str> = segments(path)
        .into_iter()
        .filter(|s| !(s.starts_with('<') || s.starts_with('{')))
        .collect();
    let skip = match kept.as_slice() {
        ["bumpgrad", "ops", ..] => 2,
        ["bumpgrad", ..] => 1,
        _ => 0,
    };
    kept[skip..].join("::")
}

/// `path` split on the `::` outside angle brackets, so that an `impl`
/// block's own path stays one segment.
fn segments(path: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start, mut i) = (Vec::new(), 0usize, 0, 0);
    let bytes = path.as_bytes();
    while i < bytes.len() {
        match bytes[i] {
            b'<' => depth += 1,
            b'>' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                out.push(&path[start..i]);
                i += 2;
                start = i;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&path[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ops_are_named_by_their_path_and_line() {
        let cases = [
            (
                "bumpgrad::ops::batch_norm2d::forward::<impl bumpgrad::ops::batch_norm2d::Saved>::apply::{{closure}}",
                "batch_norm2d::forward::apply",
            ),
            ("bumpgrad::ops::conv2d::Saved::backward::{{closure}}", "conv2d::Saved::backward"),
            (
                "bumpgrad::ops::sgd_update::<impl bumpgrad::autograd::step::Step<'_, bumpgrad::ops::tape::Node>>::sgd_update::{{closure}}",
                "sgd_update::sgd_update",
            ),
            ("bumpgrad::train::loss::{{closure}}::{{closure}}", "train::loss"),
            ("other::crate::f::{{closure}}", "other::crate::f"),
        ];
        for (path, short) in cases {
            assert_eq!(short_path(path), short, "{path}");
        }
        let at = Location::caller();
        let cpu = OpTime {
            op: cases[1].0,
            at: Some(at),
            seconds: 0.0,
        };
        assert_eq!(
            cpu.label(),
            format!("conv2d::Saved::backward ({}:{})", at.file(), at.line())
        );
        let gpu = OpTime { at: None, ..cpu };
        assert_eq!(gpu.label(), cases[1].0, "a GPU launch keeps its own name");
    }
}
