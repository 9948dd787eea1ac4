//! conv2d with stride and padding: cuDNN (its descriptor built from the
//! stride and padding, one plan per geometry) gives the CPU's output and
//! every gradient, with and without a bias, for ResNet's geometries and the
//! MNIST CNN's 5×5 valid one.

use super::*;

/// One geometry: a name, the input and weight shapes, stride and padding.
type Geometry = (&'static str, [usize; 4], [usize; 4], usize, usize);

/// Small, odd sizes, so that a stride leaves the last rows and columns unread.
const GEOMETRIES: [Geometry; 6] = [
    ("1x1 s1 p0", [3, 5, 9, 7], [6, 5, 1, 1], 1, 0),
    ("1x1 s2 p0", [3, 5, 9, 7], [6, 5, 1, 1], 2, 0),
    ("3x3 s1 p1", [3, 4, 11, 9], [5, 4, 3, 3], 1, 1),
    ("3x3 s2 p1", [3, 4, 11, 9], [5, 4, 3, 3], 2, 1),
    ("7x7 s2 p3", [2, 3, 15, 13], [4, 3, 7, 7], 2, 3),
    ("5x5 s1 p0", [2, 3, 12, 11], [4, 3, 5, 5], 1, 0),
];

fn compare(bias: bool) {
    for (i, (name, xs, ws, stride, padding)) in (0u64..).zip(GEOMETRIES) {
        let test = format!("conv2d {name}{}", if bias { " + bias" } else { "" });
        same_on_both(&test, &move |s| {
            let (xs, ws) = (Shape::new(&xs), Shape::new(&ws));
            let x = s.variable("x", xs, &values(xs.numel(), 40 + i))?;
            let w = s.variable("w", ws, &values(ws.numel(), 50 + i))?;
            let args = Conv2dArgs { stride, padding };
            if bias {
                let b = s.variable("b", Shape::new(&[ws.dim(0)]), &values(ws.dim(0), 60 + i))?;
                let y = x.conv2d(s, w, Some(b), args)?;
                with_grads(s, y, &[("x grad", x), ("w grad", w), ("b grad", b)])
            } else {
                let y = x.conv2d(s, w, None, args)?;
                with_grads(s, y, &[("x grad", x), ("w grad", w)])
            }
        });
    }
}

#[test]
fn strided_padded_conv2d_matches_the_cpu_without_bias() {
    compare(false);
}

#[test]
fn strided_padded_conv2d_matches_the_cpu_with_bias() {
    compare(true);
}

/// Two geometries that differ only in stride or padding in one step: each
/// must get its own cuDNN plan (a plan cache keyed without them would hand
/// the second the first's descriptors and the output sizes would not match).
#[test]
fn convolutions_differing_only_in_stride_or_padding_match_the_cpu_in_one_step() {
    same_on_both("conv2d plans per stride and padding", &|s| {
        let x = s.variable("x", Shape::new(&[2, 3, 9, 9]), &values(2 * 3 * 81, 70))?;
        let w = s.variable("w", Shape::new(&[4, 3, 3, 3]), &values(108, 71))?;
        let mut out = Vec::new();
        for (name, stride, padding) in [("s1 p0", 1, 0), ("s1 p1", 1, 1), ("s2 p1", 2, 1), ("s2 p0", 2, 0)] {
            let y = x.conv2d(s, w, None, Conv2dArgs { stride, padding })?;
            out.push((name, y));
        }
        Ok(out)
    });
}

/// A convolution run as two halves of its batch (what a memory budget
/// chooses for a pass it holds below its fastest workspace) computes what
/// the whole batch does: the output, and the gradients of the input and
/// the filters, each also where it adds to a gradient already there (the
/// filters read twice, the input read by a convolution and a residual).
#[test]
fn a_convolution_run_as_two_halves_of_its_batch_matches_the_cpu() {
    let test = "conv2d in two halves of the batch";
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu(test) else { return };
    let body: &Body = &|s| {
        let (xs, ws) = (Shape::new(&[64, 4, 9, 7]), Shape::new(&[4, 4, 3, 3]));
        let x = s.variable("x", xs, &values(xs.numel(), 80))?;
        let w = s.variable("w", ws, &values(ws.numel(), 81))?;
        let same = Conv2dArgs { stride: 1, padding: 1 };
        let y = x.conv2d(s, w, None, same)?;
        let z = y.conv2d(s, w, None, same)?.add(s, x)?;
        with_grads(s, z, &[("x grad", x), ("w grad", w)])
    };
    let on_cpu = run(Device::cpu(1).expect("cpu"), body);
    let mut engine = Engine::new(gpu, 64 << 20).expect("arena");
    engine.arena_mut().set_poison_step(true);
    let step = |engine: &mut Engine| {
        engine
            .step(|s| {
                let outputs = body(s)?;
                read_all(s, outputs)
            })
            .expect("step")
    };
    let whole = step(&mut engine);
    // One shape, three passes, each now two halves.
    assert_eq!(engine.runtime().halve_convolutions(), 3, "{test}");
    let halves = step(&mut engine);
    for (run, on_gpu) in [("whole", &whole), ("halves", &halves)] {
        assert_same_names(test, &on_cpu, on_gpu);
        for ((name, c), (_, g)) in on_cpu.iter().zip(on_gpu) {
            assert_close(&format!("{test}, {run}: {name}"), c, g);
        }
    }
}

/// The valid fp32 convolutions our own kernels run (`ops/conv2d/direct.rs`)
/// match the CPU, deterministic (every pass ours) and not (the forward and
/// weight gradient ours; `direct.rs`'s `chosen`): filter and
/// channel counts that leave a partial group of four, a batch whose weight
/// gradient is summed in groups and one summed whole, filters 3 and 5 wide
/// (a thread sums a row of taps) and 4 (a thread per tap), the MNIST CNN's
/// second convolution at batch 100, and an input read by two convolutions
/// (the second adds to its gradient).
#[test]
fn direct_valid_convolutions_match_the_cpu() {
    const SHAPES: [Geometry; 5] = [
        (
            "direct 3x3, 6 channels, 5 filters, batch 70",
            [70, 6, 9, 8],
            [5, 6, 3, 3],
            1,
            0,
        ),
        (
            "direct 5x5, 1 channel, 10 filters, batch 1",
            [1, 1, 28, 28],
            [10, 1, 5, 5],
            1,
            0,
        ),
        (
            "direct 5x5, the MNIST CNN's conv2 at batch 100",
            [100, 10, 12, 12],
            [20, 10, 5, 5],
            1,
            0,
        ),
        (
            "direct 2x4, 3 channels, 9 filters, batch 5",
            [5, 3, 7, 11],
            [9, 3, 2, 4],
            1,
            0,
        ),
        (
            "direct 4x3, 2 channels, 6 filters, batch 40",
            [40, 2, 9, 7],
            [6, 2, 4, 3],
            1,
            0,
        ),
    ];
    for deterministic in [true, false] {
        for (i, (name, xs, ws, stride, padding)) in (0u64..).zip(SHAPES) {
            same_on_both_as(name, Some(deterministic), &move |s| {
                let (xs, ws) = (Shape::new(&xs), Shape::new(&ws));
                let x = s.variable("x", xs, &values(xs.numel(), 90 + i))?;
                let w = s.variable("w", ws, &values(ws.numel(), 95 + i))?;
                let y = x.conv2d(s, w, None, Conv2dArgs { stride, padding })?;
                with_grads(s, y, &[("x grad", x), ("w grad", w)])
            });
        }
        same_on_both_as("direct: one input, two convolutions", Some(deterministic), &|s| {
            let x = s.variable("x", Shape::new(&[4, 3, 10, 10]), &values(1200, 110))?;
            let w1 = s.variable("w1", Shape::new(&[6, 3, 3, 3]), &values(162, 111))?;
            let w2 = s.variable("w2", Shape::new(&[6, 3, 3, 3]), &values(162, 112))?;
            let y1 = x.conv2d(s, w1, None, Conv2dArgs::default())?;
            let y2 = x.conv2d(s, w2, None, Conv2dArgs::default())?;
            let y = y1.add(s, y2)?;
            with_grads(s, y, &[("x grad", x), ("w1 grad", w1), ("w2 grad", w2)])
        });
    }
}
