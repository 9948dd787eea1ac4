//! A batch norm made again in backward writes over the recomputed input it
//! reads where nothing else can read that copy (`Step::may_overwrite`), and
//! only there: the gradients are the bits of the step that keeps every
//! output, whichever way the chain shares its tensors.

use super::tests::running_stats;
use super::BatchNormArgs;
use crate::ops::conv2d::Conv2dArgs;
use crate::ops::gradcheck::{engine, values};
use crate::tensor::Shape;

/// Which tensors of [`run`]'s chain have other readers.
#[derive(Clone, Copy, Debug)]
struct Chain {
    /// The convolution's output `y` also feeds the block's shortcut (a
    /// plain batch norm): two recipes read it.
    shared: bool,
    /// A second convolution reads `y`, and its backward (which runs first)
    /// makes `y` again outside any chain, a copy later readers share.
    side: bool,
}

/// `z = conv(bn_add_relu(bn_relu(y), r)) [+ conv'(y)]`, `y = conv(x)`, `r`
/// the shortcut (`x`, or `bn(y)` where `shared`): the bits of the output
/// and of every gradient, and what the step's buffers were, with `y` and
/// the block output recomputed in backward, chains remade for each reader
/// (`dropped`), or with every output kept.
fn run(chain: Chain, dropped: bool) -> (Vec<Vec<u32>>, Vec<&'static str>) {
    let mut engine = engine();
    let stats: Vec<_> = (0..3)
        .map(|_| running_stats(&mut engine, &[0.0; 2], &[1.0; 2]))
        .collect();
    if dropped {
        // Candidates in forward order: y, the block output, z, the side's.
        engine.set_recomputed(&[0, 1], true);
    }
    let image = Shape::new(&[2, 2, 4, 4]);
    let kernel = Shape::new(&[2, 2, 3, 3]);
    let same = Conv2dArgs { stride: 1, padding: 1 };
    let args = BatchNormArgs::train();
    let bits = engine
        .planned_step(0, |s| {
            let x = s.variable("x", image, &values(image.numel(), 70, -1.0, 1.0))?;
            let w1 = s.variable("w1", kernel, &values(kernel.numel(), 71, -0.5, 0.5))?;
            let w2 = s.variable("w2", kernel, &values(kernel.numel(), 72, -0.5, 0.5))?;
            let w3 = s.variable("w3", kernel, &values(kernel.numel(), 73, -0.5, 0.5))?;
            let scale = s.variable("scale", Shape::new(&[2]), &[1.5, -0.7])?;
            let shift = s.variable("shift", Shape::new(&[2]), &[0.1, 0.2])?;
            let y = x.conv2d(s, w1, None, same)?;
            let a = y.batch_norm2d_relu(s, scale, shift, stats[0], args)?;
            let r = match chain.shared {
                true => y.batch_norm2d(s, scale, shift, stats[1], args)?,
                false => x,
            };
            let out = a.batch_norm2d_add_relu(s, scale, shift, stats[2], args, r)?;
            let mut z = out.conv2d(s, w2, None, same)?;
            if chain.side {
                let side = y.conv2d(s, w3, None, same)?;
                z = z.add(s, side)?;
            }
            let upstream = s.input("gz", image, &values(image.numel(), 74, -1.0, 1.0))?;
            let grads = s.backward_from(z, upstream)?;
            let mut all = Vec::new();
            for t in [z, x, w1, w2, scale, shift] {
                let t = match t.inner.id == z.inner.id {
                    true => t,
                    false => s.grad(&grads, t).expect("a gradient"),
                };
                let mut v = vec![0.0f32; t.shape().numel()];
                s.read(t, &mut v)?;
                all.push(v.iter().map(|f| f.to_bits()).collect());
            }
            Ok(all)
        })
        .expect("step");
    let made = engine.arena().plans()[0].bufs.iter().map(|b| b.what).collect();
    (bits, made)
}

const RELU_AGAIN: &str = "batch-norm relu output, recomputed";
const BLOCK_AGAIN: &str = "batch-norm + residual relu output, recomputed";

#[test]
fn a_batch_norm_made_again_writes_over_a_copy_no_one_else_reads() {
    let chains = [
        Chain {
            shared: false,
            side: false,
        },
        Chain {
            shared: true,
            side: false,
        },
        Chain {
            shared: false,
            side: true,
        },
    ];
    for chain in chains {
        let (kept, _) = run(chain, false);
        let (again, made) = run(chain, true);
        assert!(kept == again, "{chain:?}: recomputed in place, the same bits as kept");
        assert!(made.contains(&"conv2d output, recomputed"), "{chain:?}: {made:?}");
        // The block output always takes the place of the relu'd batch norm
        // it is made from: only its own recipe reads that one.
        assert!(!made.contains(&BLOCK_AGAIN), "{chain:?}: {made:?}");
        // The relu'd batch norm takes y's place only where y has no other
        // reader: not where the shortcut reads it too, not where it is the
        // copy the side convolution's backward made for everyone.
        let own_buffer = chain.shared || chain.side;
        assert_eq!(made.contains(&RELU_AGAIN), own_buffer, "{chain:?}: {made:?}");
    }
}
