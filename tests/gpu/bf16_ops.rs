//! The pools, add, concat and dropout in bf16 on the GPU against fp32 (see
//! `bf16.rs`).

use super::bf16::*;
use super::*;
use bumpgrad::{DType, Layout};

use super::pools::args;

/// The windows the pools are compared on, with an input shape for each:
/// the 2×2 kernels on an odd size, padding, and SqueezeNet's 3×3 stride-2
/// ceil-mode pool on an odd size.
const WINDOWS: [(&str, [usize; 4], Pool2dArgs); 4] = [
    ("2×2 s2 odd", [2, 3, 7, 9], args(2, 2, 0, false)),
    ("3×3 s2 p1", [2, 3, 9, 7], args(3, 2, 1, false)),
    ("3×3 s2 ceil", [2, 4, 13, 13], args(3, 2, 0, true)),
    ("3×3 s1", [1, 4, 6, 6], args(3, 1, 0, false)),
];

/// `n` values on the grid `(k + 1/4) / 128`, `k` in `-128..128`: neighbours
/// on it are 2^-7 apart, and bf16 rounds a value below 1 by at most 2^-9 and
/// never onto a midpoint, so rounding keeps every order and every tie. A
/// max-pool picks the same winners in both types; with values merely
/// distinct, bf16 could tie two that fp32 tells apart and route a gradient
/// elsewhere, a difference of the types rather than of the kernels.
fn ordered_values(n: usize, seed: u64) -> Vec<f32> {
    values(n, seed)
        .into_iter()
        .map(|v| ((v * 128.0).floor() + 0.25) / 128.0)
        .collect()
}

/// [`input`] of the given values.
fn input_of<'s>(
    s: &mut Step<'s>,
    name: &'static str,
    shape: Shape,
    values: &[f32],
) -> bumpgrad::Result<(Tensor<'s>, Tensor<'s>)> {
    let x = s.variable(name, shape, values)?;
    let dtype = s.compute_dtype();
    let cast = x.cast(s, dtype)?;
    Ok((x, cast))
}

#[test]
fn max_pool_in_bf16_picks_fp32s_winners() {
    for (name, dims, a) in WINDOWS {
        same_in_bf16(&format!("bf16 max_pool2d {name}"), BF16_TOL, &move |s| {
            let shape = Shape::new(&dims);
            let (x, h) = input_of(s, "x", shape, &ordered_values(shape.numel(), 41))?;
            let y = h.max_pool2d(s, a)?;
            with_grads_as(s, y, &[("x grad", x)])
        });
    }
}

#[test]
fn max_pool_relu_in_bf16_matches_fp32() {
    same_in_bf16("bf16 max_pool2d_relu", BF16_TOL, &|s| {
        let shape = Shape::new(&[2, 3, 7, 9]);
        let (x, h) = input_of(s, "x", shape, &ordered_values(shape.numel(), 42))?;
        let y = h.max_pool2d_relu(s)?;
        with_grads_as(s, y, &[("x grad", x)])
    });
}

#[test]
fn avg_pool_in_bf16_matches_fp32() {
    for (name, dims, a) in WINDOWS {
        same_in_bf16(&format!("bf16 avg_pool2d {name}"), BF16_TOL, &move |s| {
            let (x, h) = input(s, "x", Shape::new(&dims), 43)?;
            let y = h.avg_pool2d(s, a)?;
            with_grads_as(s, y, &[("x grad", x)])
        });
    }
}

/// Planes of 1024 values near 1: a running sum kept in bf16 would lose
/// most of each term past 256 (where bf16's step is 2) and end far below
/// fp32's.
#[test]
fn global_avg_pool_in_bf16_sums_in_fp32() {
    same_in_bf16("bf16 global_avg_pool2d", BF16_TOL, &|s| {
        let shape = Shape::new(&[3, 5, 32, 32]);
        let near_one: Vec<f32> = values(shape.numel(), 44).iter().map(|v| 1.0 + v / 2.0).collect();
        let (x, h) = input_of(s, "x", shape, &near_one)?;
        let y = h.global_avg_pool2d(s)?;
        with_grads_as(s, y, &[("x grad", x)])
    });
    same_in_bf16("bf16 global_avg_pool2d small planes", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[5, 67, 4, 3]), 45)?;
        let y = h.global_avg_pool2d(s)?;
        with_grads_as(s, y, &[("x grad", x)])
    });
}

#[test]
fn add_in_bf16_matches_fp32() {
    same_in_bf16("bf16 add", BF16_TOL, &|s| {
        let shape = Shape::new(&[3, 5, 7, 9]);
        let (a, ha) = input(s, "a", shape, 46)?;
        let (b, hb) = input(s, "b", shape, 47)?;
        let y = ha.add(s, hb)?;
        with_grads_as(s, y, &[("a grad", a), ("b grad", b)])
    });
    same_in_bf16("bf16 add to itself", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[4, 33]), 48)?;
        let y = h.add(s, h)?;
        with_grads_as(s, y, &[("x grad", x)])
    });
}

/// A bf16 tensor and an fp32 one add in fp32, as PyTorch promotes them;
/// each gradient comes back in its input's type.
#[test]
fn add_of_bf16_and_fp32_is_fp32() {
    same_in_bf16("bf16 + fp32 add", BF16_TOL, &|s| {
        let shape = Shape::new(&[3, 5, 7, 9]);
        let (a, ha) = input(s, "a", shape, 49)?;
        let b = s.variable("b", shape, &values(shape.numel(), 50))?;
        let y = ha.add(s, b)?;
        assert_eq!(y.dtype(), DType::F32, "mixed types add in fp32");
        let gy = s.input("upstream grad", shape, &values(shape.numel(), 99))?;
        let grads = s.backward_from(y, gy)?;
        let ga = s.grad(&grads, a).expect("gradient");
        let gb = s.grad(&grads, b).expect("gradient");
        Ok(vec![("output", y), ("a grad", ga), ("b grad", gb)])
    });
}

#[test]
fn concat_in_bf16_matches_fp32() {
    same_in_bf16("bf16 concat_channels", BF16_TOL, &|s| {
        let (a, ha) = input(s, "a", Shape::new(&[3, 2, 5, 7]), 51)?;
        let (b, hb) = input(s, "b", Shape::new(&[3, 5, 5, 7]), 52)?;
        let (c, hc) = input(s, "c", Shape::new(&[3, 1, 5, 7]), 53)?;
        // `a` twice: its gradient is the sum of both slices.
        let y = Tensor::concat_channels(s, &[ha, hb, hc, ha])?;
        with_grads_as(s, y, &[("a grad", a), ("b grad", b), ("c grad", c)])
    });
    same_in_bf16("bf16 concat_channels of two", BF16_TOL, &|s| {
        let (a, ha) = input(s, "a", Shape::new(&[2, 3, 4, 4]), 54)?;
        let (b, hb) = input(s, "b", Shape::new(&[2, 4, 4, 4]), 55)?;
        let y = Tensor::concat_channels(s, &[ha, hb])?;
        with_grads_as(s, y, &[("a grad", a), ("b grad", b)])
    });
}

/// Parts of both types concatenate in fp32, as PyTorch promotes them.
#[test]
fn concat_of_bf16_and_fp32_parts_is_fp32() {
    same_in_bf16("bf16 + fp32 concat_channels", BF16_TOL, &|s| {
        let (a, ha) = input(s, "a", Shape::new(&[3, 2, 5, 7]), 56)?;
        let b = s.variable("b", Shape::new(&[3, 5, 5, 7]), &values(525, 57))?;
        let (c, hc) = input(s, "c", Shape::new(&[3, 1, 5, 7]), 58)?;
        let y = Tensor::concat_channels(s, &[ha, b, hc])?;
        assert_eq!(y.dtype(), DType::F32, "mixed types concatenate in fp32");
        let gy = s.input("upstream grad", y.shape(), &values(y.shape().numel(), 99))?;
        let grads = s.backward_from(y, gy)?;
        let mut out = vec![("output", y)];
        for (name, t) in [("a grad", a), ("b grad", b), ("c grad", c)] {
            out.push((name, s.grad(&grads, t).expect("gradient")));
        }
        Ok(out)
    });
}

/// Dropout of `shape` (in `layout` where given) on inputs at least 1/2
/// away from 0, so a kept one never reads as dropped: every element is
/// kept exactly where `dropout::keep` keeps its memory index `at(i)` (`i`
/// its NCHW index), and a dropped one's gradient is 0.
fn dropout_keeps_where_keep_says<'s>(
    s: &mut Step<'s>,
    (shape, values_seed, seed): (Shape, u64, u64),
    layout: Option<Layout>,
    at: &dyn Fn(usize) -> usize,
) -> bumpgrad::Result<Vec<(&'static str, Tensor<'s>)>> {
    use bumpgrad::ops::dropout::keep;
    const P: f32 = 0.3;
    let away: Vec<f32> = values(shape.numel(), values_seed)
        .iter()
        .map(|v| v.signum() * (0.5 + v.abs() / 2.0))
        .collect();
    let (x, mut h) = input_of(s, "x", shape, &away)?;
    if let Some(layout) = layout {
        h = h.to_layout(s, layout)?;
    }
    let y = h.dropout(s, P, seed)?;
    assert_eq!(y.layout(), h.layout(), "dropout keeps its input's layout");
    let out = with_grads_as(s, y, &[("x grad", x)])?;
    let mut host = vec![0.0; shape.numel()];
    s.read(y, &mut host)?;
    let mut grad = vec![0.0; shape.numel()];
    s.read(out[1].1, &mut grad)?;
    let dtype = s.compute_dtype();
    for (i, (v, g)) in host.iter().zip(&grad).enumerate() {
        let at = at(i);
        let kept = keep(seed, at as u64, P);
        assert_eq!(
            *v != 0.0,
            kept,
            "{dtype}: element {i} (memory {at}) kept ({kept}) but its output is {v}"
        );
        assert!(
            kept || *g == 0.0,
            "{dtype}: element {i} (memory {at}) dropped but its gradient is {g}"
        );
    }
    Ok(out)
}

/// The mask is a function of the seed and the element's index alone, so
/// both types drop exactly the elements `dropout::keep` drops.
#[test]
fn dropout_in_bf16_drops_fp32s_elements() {
    same_in_bf16("bf16 dropout", BF16_TOL, &|s| {
        dropout_keeps_where_keep_says(s, (Shape::new(&[10, 100]), 59, 0xDEAD_BEEF_1234), None, &|i| i)
    });
}

/// A reshape aliases its input: a bf16 tensor stays bf16, and so does the
/// gradient it passes on.
#[test]
fn reshape_in_bf16_keeps_the_type() {
    same_in_bf16("bf16 reshape", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[4, 3, 5, 2]), 60)?;
        let y = h.flatten(s)?;
        assert_eq!(y.dtype(), h.dtype(), "a reshape keeps its input's type");
        let y = y.relu(s)?;
        with_grads_as(s, y, &[("x grad", x)])
    });
}

// Channels last: in a bf16 step the convolutions hand these ops NHWC
// tensors. Each body converts its input to `s.compute_layout()` (NHWC in
// bf16, NCHW in fp32), so the bf16 run takes the NHWC path and is held to
// the fp32 run's NCHW one; `s.read` gives NCHW order either way.

/// `t` in the step's compute layout (channels last in a bf16 step).
fn in_compute_layout<'s>(s: &mut Step<'s>, t: Tensor<'s>) -> bumpgrad::Result<Tensor<'s>> {
    let layout = s.compute_layout();
    let t = t.to_layout(s, layout)?;
    assert_eq!(t.layout(), layout);
    Ok(t)
}

/// The NHWC kernels read channels last in place: each (n, c) sums its
/// pixels in fp32, in the NCHW kernel's order, into a row-major `[N, C]`;
/// the gradient comes back channels last. ResNet's head (7×7 and 4×4
/// planes, many channels), a large plane near 1 (a bf16 running sum would
/// drift), and a 1×1 plane.
#[test]
fn global_avg_pool_of_channels_last_in_bf16_matches_fp32() {
    for (name, dims) in [
        ("7×7", [4, 96, 7, 7]),
        ("4×4 odd channels", [5, 67, 4, 4]),
        ("1×1", [3, 40, 1, 1]),
    ] {
        same_in_bf16(&format!("bf16 NHWC global_avg_pool2d {name}"), BF16_TOL, &move |s| {
            let (x, h) = input(s, "x", Shape::new(&dims), 61)?;
            let h = in_compute_layout(s, h)?;
            let y = h.global_avg_pool2d(s)?;
            assert_eq!(y.layout(), Layout::Nchw, "the pooled [N, C] is row-major");
            with_grads_as(s, y, &[("x grad", x)])
        });
    }
    same_in_bf16("bf16 NHWC global_avg_pool2d sums in fp32", BF16_TOL, &|s| {
        let shape = Shape::new(&[3, 5, 32, 32]);
        let near_one: Vec<f32> = values(shape.numel(), 62).iter().map(|v| 1.0 + v / 2.0).collect();
        let (x, h) = input_of(s, "x", shape, &near_one)?;
        let h = in_compute_layout(s, h)?;
        let y = h.global_avg_pool2d(s)?;
        with_grads_as(s, y, &[("x grad", x)])
    });
}

#[test]
fn add_of_channels_last_in_bf16_matches_fp32() {
    same_in_bf16("bf16 NHWC add", BF16_TOL, &|s| {
        let shape = Shape::new(&[3, 5, 7, 9]);
        let (a, ha) = input(s, "a", shape, 63)?;
        let (b, hb) = input(s, "b", shape, 64)?;
        let (ha, hb) = (in_compute_layout(s, ha)?, in_compute_layout(s, hb)?);
        let y = ha.add(s, hb)?;
        assert_eq!(y.layout(), ha.layout(), "the sum keeps the operands' layout");
        with_grads_as(s, y, &[("a grad", a), ("b grad", b)])
    });
}

/// Operands in two layouts: the second is converted to the first's, and
/// the sum is in the first's layout; each gradient comes back in its
/// operand's layout (and, through the cast, in fp32 NCHW).
#[test]
fn add_of_channels_last_and_nchw_in_bf16_matches_fp32() {
    for second_first in [false, true] {
        let name = if second_first {
            "bf16 NCHW + NHWC add"
        } else {
            "bf16 NHWC + NCHW add"
        };
        same_in_bf16(name, BF16_TOL, &move |s| {
            let shape = Shape::new(&[3, 6, 5, 7]);
            let (a, ha) = input(s, "a", shape, 65)?;
            let (b, hb) = input(s, "b", shape, 66)?;
            let ha = in_compute_layout(s, ha)?;
            assert_eq!(hb.layout(), Layout::Nchw);
            let (first, second) = if second_first { (hb, ha) } else { (ha, hb) };
            let y = first.add(s, second)?;
            assert_eq!(y.layout(), first.layout(), "the sum is in the first operand's layout");
            with_grads_as(s, y, &[("a grad", a), ("b grad", b)])
        });
    }
}

/// Dropout draws its mask by memory index, so a channels-last tensor drops
/// other elements than its NCHW copy would: both runs convert to NHWC here
/// (the fp32 one too), so both drop the elements `dropout::keep` names at
/// each element's channels-last index.
#[test]
fn dropout_of_channels_last_in_bf16_drops_fp32s_elements() {
    same_in_bf16("bf16 NHWC dropout", BF16_TOL, &|s| {
        let dims = [4, 6, 5, 7];
        let (c, hw) = (dims[1], dims[2] * dims[3]);
        // NCHW index i is element (n, ch, p), at (n·HW + p)·C + ch.
        let at = |i: usize| (i / (c * hw) * hw + i % hw) * c + i / hw % c;
        dropout_keeps_where_keep_says(s, (Shape::new(&dims), 67, 0xFEED_5EED_4321), Some(Layout::Nhwc), &at)
    });
}

/// The pools and concat have NCHW kernels only: a channels-last input is
/// converted to NCHW first, and the output is NCHW.
#[test]
fn max_pool_of_channels_last_in_bf16_picks_fp32s_winners() {
    for (name, dims, a) in WINDOWS {
        same_in_bf16(&format!("bf16 NHWC max_pool2d {name}"), BF16_TOL, &move |s| {
            let shape = Shape::new(&dims);
            let (x, h) = input_of(s, "x", shape, &ordered_values(shape.numel(), 68))?;
            let h = in_compute_layout(s, h)?;
            let y = h.max_pool2d(s, a)?;
            assert_eq!(y.layout(), Layout::Nchw);
            with_grads_as(s, y, &[("x grad", x)])
        });
    }
    same_in_bf16("bf16 NHWC max_pool2d_relu", BF16_TOL, &|s| {
        let shape = Shape::new(&[2, 3, 7, 9]);
        let (x, h) = input_of(s, "x", shape, &ordered_values(shape.numel(), 69))?;
        let h = in_compute_layout(s, h)?;
        let y = h.max_pool2d_relu(s)?;
        assert_eq!(y.layout(), Layout::Nchw);
        with_grads_as(s, y, &[("x grad", x)])
    });
}

#[test]
fn avg_pool_of_channels_last_in_bf16_matches_fp32() {
    for (name, dims, a) in WINDOWS {
        same_in_bf16(&format!("bf16 NHWC avg_pool2d {name}"), BF16_TOL, &move |s| {
            let (x, h) = input(s, "x", Shape::new(&dims), 70)?;
            let h = in_compute_layout(s, h)?;
            let y = h.avg_pool2d(s, a)?;
            assert_eq!(y.layout(), Layout::Nchw);
            with_grads_as(s, y, &[("x grad", x)])
        });
    }
}

/// Channels-last parts, an NCHW one among them and one part twice.
#[test]
fn concat_of_channels_last_parts_in_bf16_matches_fp32() {
    same_in_bf16("bf16 NHWC concat_channels", BF16_TOL, &|s| {
        let (a, ha) = input(s, "a", Shape::new(&[3, 2, 5, 7]), 71)?;
        let (b, hb) = input(s, "b", Shape::new(&[3, 5, 5, 7]), 72)?;
        let (c, hc) = input(s, "c", Shape::new(&[3, 1, 5, 7]), 73)?;
        let (ha, hc) = (in_compute_layout(s, ha)?, in_compute_layout(s, hc)?);
        let y = Tensor::concat_channels(s, &[ha, hb, hc, ha])?;
        assert_eq!(y.layout(), Layout::Nchw);
        with_grads_as(s, y, &[("a grad", a), ("b grad", b), ("c grad", c)])
    });
}

/// An LSTM layer in bf16 keeps its cells in fp32 (`ops::lstm_layer`): a
/// forget gate near 1 and inputs adding about 0.01 a step to cells near 1
/// for 64 steps. A cell kept in bf16 (whose step at 1 is 2⁻⁷ ≈ 0.0078)
/// would round each addition to 0 or 0.0156 and end 5–10% of the scale
/// away from fp32's; in fp32 only the bf16 inputs' rounding shows.
#[test]
fn lstm_layer_in_bf16_keeps_its_cells_in_fp32() {
    let (steps, batch, hidden) = (64, 4, 32);
    same_in_bf16("bf16 lstm_layer", BF16_TOL, &move |s| {
        let gates = 4 * hidden;
        // Pre-activations: i 0 (i = 0.5), f 9 (f ≈ 1), g about 0.02, o 0.
        let pre: Vec<f32> = (0..steps * batch * gates)
            .map(|k| match (k % gates) / hidden {
                1 => 9.0,
                2 => 0.02 * (1.0 + 0.5 * (k as f32 * 0.37).sin()),
                _ => 0.0,
            })
            .collect();
        let (proj, p) = input_of(s, "proj", Shape::new(&[steps, batch, gates]), &pre)?;
        let small: Vec<f32> = values(gates * hidden, 61).iter().map(|v| v * 0.01).collect();
        let (w_hh, w) = input_of(s, "w_hh", Shape::new(&[gates, hidden]), &small)?;
        let (h0, h) = input(s, "h0", Shape::new(&[batch, hidden]), 62)?;
        let ones: Vec<f32> = (0..batch * hidden).map(|k| 1.0 + 0.001 * (k % 7) as f32).collect();
        let c0 = s.variable("c0", Shape::new(&[batch, hidden]), &ones)?;
        let (hs, cs) = p.lstm_layer(s, w, Some(h), Some(c0))?;
        assert_eq!(cs.dtype(), DType::F32, "the cells are fp32 at any precision");
        let mut out = with_grads_as(
            s,
            hs,
            &[
                ("proj grad", proj),
                ("w_hh grad", w_hh),
                ("h0 grad", h0),
                ("c0 grad", c0),
            ],
        )?;
        out.push(("cells", cs));
        Ok(out)
    });
}

/// 35 convolution weights of assorted shapes (two launches of
/// `convert_weights`), a bias among them, in `device`'s engine.
fn conv_weights(device: Device) -> (Engine, Vec<bumpgrad::Param>) {
    let mut engine = Engine::new(device, 64 << 20).expect("engine");
    let (_, params) = ParamStore::build(&mut engine.persistent(), 7, |pb| {
        let mut ps = Vec::new();
        for i in 0..35usize {
            let (co, ci, k) = (1 + i % 5, 1 + (i * 7) % 6, [1, 3, 7][i % 3]);
            let shape = Shape::new(&[co, ci, k, k]);
            ps.push(pb.param(&format!("w{i}"), shape, bumpgrad::nn::Init::Normal(1.0))?);
            if i == 3 {
                ps.push(pb.param("bias", Shape::new(&[co]), bumpgrad::nn::Init::Normal(1.0))?);
            }
        }
        Ok(ps)
    })
    .expect("weights");
    (engine, params)
}

/// Every weight's copy in (`dtype`, `layout`), read back: made ahead by
/// `convert_weights`, or by `convert` weight by weight.
fn weight_copies(device: Device, dtype: DType, layout: Layout, ahead: bool) -> Vec<Vec<f32>> {
    let (mut engine, params) = conv_weights(device);
    engine
        .step(|s| {
            if ahead {
                s.convert_weights(&params, dtype, layout)?;
            }
            let mut out = Vec::new();
            for p in &params {
                let y = s.param(p).convert(s, dtype, layout)?;
                let mut v = vec![0.0; p.shape().numel()];
                s.read(y, &mut v)?;
                out.push(v);
            }
            Ok(out)
        })
        .expect("copies")
}

/// The GPU's one launch per 32 weights (a table of their places, their
/// values end to end) makes the copies its `convert` makes weight by
/// weight, bit for bit, and the CPU's.
#[test]
fn weights_converted_in_one_launch_are_converts_copies_bit_for_bit() {
    let test = "convert_weights";
    for (dtype, layout) in [
        (DType::Bf16, Layout::Nhwc),
        (DType::F32, Layout::Nhwc),
        (DType::Bf16, Layout::Nchw),
    ] {
        let Some(device) = gpu(test) else { return };
        let ahead = weight_copies(device, dtype, layout, true);
        let Some(device) = gpu(test) else { return };
        let one_by_one = weight_copies(device, dtype, layout, false);
        let cpu = weight_copies(Device::cpu(1).unwrap(), dtype, layout, false);
        assert_eq!(
            ahead, one_by_one,
            "{test} {dtype:?} {layout:?}: GPU, ahead against one by one"
        );
        assert_eq!(ahead, cpu, "{test} {dtype:?} {layout:?}: GPU against the CPU");
    }
}
