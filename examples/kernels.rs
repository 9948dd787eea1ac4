//! Per-op timings of the MNIST CNN's layers on the CPU, forward and
//! backward, at a batch of 100: `cargo run --release --example kernels -- [threads] [iterations] [layer]`.
//!
//! Each iteration runs one step: inputs are uploaded (not timed), then the op
//! forward and its backward (from an upstream gradient) are timed apart.
//! Prints the median and the minimum of each, in microseconds.

use bumpgrad::ops::conv2d::Conv2dArgs;
use bumpgrad::ops::maxpool2d::Pool2dArgs;
use bumpgrad::{Device, Engine, Shape, Step, Tensor};
use std::time::{Duration, Instant};

const N: usize = 100;

fn values(len: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state as f32 / u32::MAX as f32) * 2.0 - 1.0
        })
        .collect()
}

type Op = for<'s> fn(&mut Step<'s>, Tensor<'s>, Option<Tensor<'s>>) -> bumpgrad::Result<Tensor<'s>>;

struct Case {
    name: &'static str,
    x: &'static [usize],
    /// Whether the input wants a gradient (conv1's input does not; conv2w
    /// times conv2's weight gradient alone).
    x_grad: bool,
    w: Option<&'static [usize]>,
    op: Op,
}

fn conv<'s>(s: &mut Step<'s>, x: Tensor<'s>, w: Option<Tensor<'s>>) -> bumpgrad::Result<Tensor<'s>> {
    x.conv2d(s, w.expect("weight"), None, Conv2dArgs::default())
}

fn pool<'s>(s: &mut Step<'s>, x: Tensor<'s>, _: Option<Tensor<'s>>) -> bumpgrad::Result<Tensor<'s>> {
    x.max_pool2d(s, Pool2dArgs::new(2, 2))
}

fn relu<'s>(s: &mut Step<'s>, x: Tensor<'s>, _: Option<Tensor<'s>>) -> bumpgrad::Result<Tensor<'s>> {
    x.relu(s)
}

fn linear<'s>(s: &mut Step<'s>, x: Tensor<'s>, w: Option<Tensor<'s>>) -> bumpgrad::Result<Tensor<'s>> {
    x.linear(s, w.expect("weight"), None)
}

fn median(v: &mut [Duration]) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn main() -> bumpgrad::Result<()> {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().map_or(2, |a| a.parse().expect("threads"));
    let iterations: usize = args.next().map_or(300, |a| a.parse().expect("iterations"));
    let only = args.next();
    let cases = [
        Case {
            name: "conv1",
            x: &[N, 1, 28, 28],
            x_grad: false,
            w: Some(&[10, 1, 5, 5]),
            op: conv,
        },
        Case {
            name: "pool1",
            x: &[N, 10, 24, 24],
            x_grad: true,
            w: None,
            op: pool,
        },
        Case {
            name: "relu1",
            x: &[N, 10, 12, 12],
            x_grad: true,
            w: None,
            op: relu,
        },
        Case {
            name: "conv2",
            x: &[N, 10, 12, 12],
            x_grad: true,
            w: Some(&[20, 10, 5, 5]),
            op: conv,
        },
        Case {
            name: "conv2w",
            x: &[N, 10, 12, 12],
            x_grad: false,
            w: Some(&[20, 10, 5, 5]),
            op: conv,
        },
        Case {
            name: "pool2",
            x: &[N, 20, 8, 8],
            x_grad: true,
            w: None,
            op: pool,
        },
        Case {
            // One element: the fixed cost of an op (recording, one kernel on the pool).
            name: "tiny",
            x: &[1, 1],
            x_grad: true,
            w: None,
            op: relu,
        },
        Case {
            name: "fc1",
            x: &[N, 320],
            x_grad: true,
            w: Some(&[50, 320]),
            op: linear,
        },
    ];
    let mut engine = Engine::new(Device::cpu(threads)?, 64 << 20)?;
    println!("{threads} threads, {iterations} iterations, batch {N}; microseconds (median / min)");
    let (mut total_f, mut total_b) = (0.0, 0.0);
    for case in cases.iter().filter(|c| only.as_deref().is_none_or(|o| o == c.name)) {
        let xs = Shape::new(case.x);
        let xv = values(xs.numel(), 1);
        let wv = case.w.map(|w| values(Shape::new(w).numel(), 2));
        let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
        for _ in 0..iterations {
            let (f, b) = engine.step(|s| {
                let x = if case.x_grad {
                    s.variable("x", xs, &xv)?
                } else {
                    s.input("x", xs, &xv)?
                };
                let w = match (case.w, &wv) {
                    (Some(dims), Some(v)) => Some(s.variable("w", Shape::new(dims), v)?),
                    _ => None,
                };
                let t0 = Instant::now();
                let y = (case.op)(s, x, w)?;
                let f = t0.elapsed();
                let gv = values(y.shape().numel(), 3);
                let gy = s.input("gy", y.shape(), &gv)?;
                let t1 = Instant::now();
                s.backward_from(y, gy)?;
                Ok((f, t1.elapsed()))
            })?;
            fwd.push(f);
            bwd.push(b);
        }
        let (fm, bm) = (median(&mut fwd), median(&mut bwd));
        total_f += fm;
        total_b += bm;
        println!(
            "{:6} forward {:8.1} / {:8.1}   backward {:8.1} / {:8.1}",
            case.name,
            fm,
            fwd[0].as_secs_f64() * 1e6,
            bm,
            bwd[0].as_secs_f64() * 1e6
        );
    }
    println!(
        "total  forward {total_f:8.1}            backward {total_b:8.1}            sum {:8.1}",
        total_f + total_b
    );
    Ok(())
}
