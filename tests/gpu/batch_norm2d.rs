//! batch_norm2d on the GPU gives the CPU's output, gradients and running
//! statistics, in training and in evaluation.

use super::*;
use bumpgrad::nn::Init;
use bumpgrad::ops::batch_norm2d::{BatchNormArgs, RunningStats};
use bumpgrad::Param;

/// An arena on `device` (step region poisoned) holding a batch norm's
/// weight and bias parameters for `c` channels and its running statistics
/// buffers, the statistics set to values of their own so that evaluation
/// visibly uses them.
pub(crate) fn bn_arena(device: Device, c: usize) -> (Engine, ParamStore, (Param, Param, RunningStats)) {
    let mut engine = Engine::new(device, 64 << 20).expect("arena");
    engine.arena_mut().set_poison_step(true);
    let (store, parts) = ParamStore::build(&mut engine.persistent(), 3, |pb| {
        let bn = pb.pp("bn");
        let channels = Shape::new(&[c]);
        Ok((
            bn.param("weight", channels, Init::UniformFanIn(1))?,
            bn.param("bias", channels, Init::UniformFanIn(1))?,
            RunningStats {
                mean: bn.buffer("running_mean", channels, Init::Constant(0.0))?,
                var: bn.buffer("running_var", channels, Init::Constant(1.0))?,
                batches: bn.buffer("num_batches_tracked", Shape::new(&[]), Init::Constant(0.0))?,
            },
        ))
    })
    .expect("store");
    let stats = parts.2;
    engine
        .write_persistent(stats.mean.buf(), &values(c, 50))
        .expect("write");
    let var: Vec<f32> = values(c, 51).iter().map(|v| 0.5 + v.abs()).collect();
    engine.write_persistent(stats.var.buf(), &var).expect("write");
    (engine, store, parts)
}

/// The running statistics as they are in the arena, by name.
pub(crate) fn read_stats(engine: &mut Engine, stats: RunningStats) -> Vec<(&'static str, Vec<f32>)> {
    [
        ("running_mean", stats.mean),
        ("running_var", stats.var),
        ("num_batches_tracked", stats.batches),
    ]
    .into_iter()
    .map(|(name, p)| {
        let mut host = vec![0.0; p.shape().numel()];
        engine.read_persistent(p.buf(), &mut host).expect("read");
        (name, host)
    })
    .collect()
}

/// Two steps of a batch norm in `args`' mode on `device`, weight and bias
/// parameters of a store and its running statistics buffers: the second
/// step's output and gradients, then the running statistics after both.
fn bn_steps(device: Device, shape: Shape, args: BatchNormArgs, form: Form) -> Vec<(&'static str, Vec<f32>)> {
    let (c, hw) = (shape.dim(1), shape.dim(2) * shape.dim(3));
    let (mut engine, _store, (weight, bias, stats)) = bn_arena(device, c);
    let mut read = Vec::new();
    for step in 0..2u64 {
        let out = engine
            .step(|s| {
                // Each channel with a mean and a spread of its own.
                let xs: Vec<f32> = values(shape.numel(), 60 + step)
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let ch = ((i / hw) % c) as f32;
                        v * (1.0 + ch) + 3.0 * ch - 4.0
                    })
                    .collect();
                let x = s.variable("x", shape, &xs)?;
                let (w, b) = (s.param(&weight), s.param(&bias));
                let r = s.variable("residual", shape, &values(shape.numel(), 70 + step))?;
                let (y, named) = match form {
                    Form::Plain => (x.batch_norm2d(s, w, b, stats, args)?, vec![]),
                    Form::Relu => (x.batch_norm2d_relu(s, w, b, stats, args)?, vec![]),
                    Form::AddRelu => (
                        x.batch_norm2d_add_relu(s, w, b, stats, args, r)?,
                        vec![("residual grad", r)],
                    ),
                };
                let mut wanted = vec![("x grad", x), ("weight grad", w), ("bias grad", b)];
                wanted.extend(named);
                let named = with_grads(s, y, &wanted)?;
                read_all(s, named)
            })
            .expect("step");
        if step == 1 {
            read.extend(out);
        }
    }
    read.extend(read_stats(&mut engine, stats));
    read
}

/// Plain batch norm, or fused with a relu, or with a residual and a relu.
#[derive(Clone, Copy, Debug)]
enum Form {
    Plain,
    Relu,
    AddRelu,
}

fn bn_same_on_both(test: &str, shape: Shape, args: BatchNormArgs) {
    bn_form_on_both(test, shape, args, Form::Plain)
}

fn bn_form_on_both(test: &str, shape: Shape, args: BatchNormArgs, form: Form) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu(test) else { return };
    let on_cpu = bn_steps(Device::cpu(1).expect("cpu"), shape, args, form);
    let on_gpu = bn_steps(gpu, shape, args, form);
    assert_same_names(test, &on_cpu, &on_gpu);
    for ((name, c), (_, g)) in on_cpu.iter().zip(&on_gpu) {
        match *name {
            // A count: exact, and 0 (all zeros) in evaluation.
            "num_batches_tracked" => {
                let want = if args.training { 2.0 } else { 0.0 };
                assert_eq!((c[0], g[0]), (want, want), "{test}: {name} on the CPU and the GPU");
            }
            _ => assert_close(&format!("{test}: {name}"), c, g),
        }
    }
}

#[test]
fn batch_norm2d_training_matches_the_cpu() {
    // 1144 values per channel: every thread of a channel's block sums several.
    bn_same_on_both(
        "batch_norm2d train",
        Shape::new(&[8, 6, 13, 11]),
        BatchNormArgs::train(),
    );
}

#[test]
fn batch_norm2d_training_on_many_values_per_channel_matches_the_cpu() {
    // 16384 values per channel, one pixel per plane in the second: the f32
    // trees against the CPU's f64 sums, and planes of one value.
    let args = BatchNormArgs {
        momentum: 0.3,
        ..BatchNormArgs::train()
    };
    bn_same_on_both("batch_norm2d train, large", Shape::new(&[16, 3, 32, 32]), args);
    bn_same_on_both("batch_norm2d train, 1×1 planes", Shape::new(&[40, 5, 1, 1]), args);
}

#[test]
fn batch_norm2d_evaluation_matches_the_cpu() {
    bn_same_on_both("batch_norm2d eval", Shape::new(&[8, 6, 13, 11]), BatchNormArgs::eval());
}

#[test]
fn batch_norm2d_fused_with_relu_and_residual_matches_the_cpu() {
    for form in [Form::Relu, Form::AddRelu] {
        for args in [BatchNormArgs::train(), BatchNormArgs::eval()] {
            let test = format!("batch_norm2d {form:?} training {}", args.training);
            // Odd planes (one value per thread) and planes of 4k values (four).
            bn_form_on_both(&test, Shape::new(&[8, 6, 13, 11]), args, form);
            bn_form_on_both(&test, Shape::new(&[4, 5, 8, 8]), args, form);
        }
    }
}

#[test]
fn batch_norm2d_splits_wide_channels_into_runs_and_matches_the_cpu() {
    // 65536 values per channel: 16 runs of 4096; 11951: 3 uneven runs, a
    // run starting mid-plane.
    for (shape, form) in [
        (Shape::new(&[64, 4, 32, 32]), Form::Plain),
        (Shape::new(&[37, 3, 17, 19]), Form::Relu),
        (Shape::new(&[64, 4, 32, 32]), Form::AddRelu),
    ] {
        bn_form_on_both(
            &format!("batch_norm2d {form:?} {shape}"),
            shape,
            BatchNormArgs::train(),
            form,
        );
    }
}
