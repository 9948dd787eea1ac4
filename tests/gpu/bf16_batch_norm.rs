//! bf16 batch norm on the GPU against fp32 (see `bf16.rs`): output,
//! gradients and running statistics of two training (or evaluation) steps,
//! the input bf16 in the bf16 run, the weight, bias and statistics fp32 in
//! both.
//!
//! The inputs are values bf16 holds exactly, as a mixed-precision model's
//! batch norm reads a bf16 convolution's output: both runs then normalise
//! the same values with the same statistics, and a relu passes the same
//! values. Inputs rounded in one run only would move a pre-activation near
//! 0 across it now and then, and that value's gradient by the scale itself.

use super::batch_norm2d::{bn_arena, read_stats};
use super::bf16::*;
use super::*;
use bumpgrad::backend::Precision;
use bumpgrad::ops::batch_norm2d::BatchNormArgs;

/// What follows the batch norm under test.
#[derive(Clone, Copy, Debug)]
enum Form {
    Plain,
    Relu,
    AddRelu,
    /// `AddRelu` with the residual left fp32 in the bf16 run: mixed user
    /// code, the op casts it.
    AddReluFp32Residual,
    /// `Relu`, read by a convolution: its weight gradient reads the output
    /// recomputed from the input rather than kept.
    ReluThenConv,
}

/// `v` as bf16 holds it (its top 16 bits, rounded), as an fp32.
fn exact(v: f32) -> f32 {
    bumpgrad::memory::bf16::from_f32(v).to_f32()
}

/// Two steps of a batch norm in `args`' mode on `device`, weight and bias
/// parameters of a store and its running statistics buffers: the second
/// step's output and gradients (through the casts, in fp32), then the
/// running statistics after both.
fn bn_steps(device: Device, shape: Shape, args: BatchNormArgs, form: Form) -> Vec<(&'static str, Vec<f32>)> {
    let (c, hw) = (shape.dim(1), shape.dim(2) * shape.dim(3));
    let (mut arena, _store, (weight, bias, stats)) = bn_arena(device, c);
    let mut read = Vec::new();
    for step in 0..2u64 {
        let out = arena
            .step(|s| {
                let dtype = s.compute_dtype();
                // Each channel with a mean and a spread of its own.
                let xs: Vec<f32> = values(shape.numel(), 60 + step)
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let ch = ((i / hw) % c) as f32;
                        exact(v * (1.0 + ch) + 0.5 * ch - 1.0)
                    })
                    .collect();
                let rs: Vec<f32> = values(shape.numel(), 70 + step).into_iter().map(exact).collect();
                let x = s.variable("x", shape, &xs)?;
                let h = x.cast(s, dtype)?;
                let (w, b) = (s.param(&weight), s.param(&bias));
                let r = s.variable("residual", shape, &rs)?;
                let (y, named) = match form {
                    Form::Plain => (h.batch_norm2d(s, w, b, stats, args)?, vec![]),
                    Form::Relu => (h.batch_norm2d_relu(s, w, b, stats, args)?, vec![]),
                    Form::AddRelu => {
                        let hr = r.cast(s, dtype)?;
                        let y = h.batch_norm2d_add_relu(s, w, b, stats, args, hr)?;
                        (y, vec![("residual grad", r)])
                    }
                    Form::AddReluFp32Residual => {
                        let y = h.batch_norm2d_add_relu(s, w, b, stats, args, r)?;
                        (y, vec![("residual grad", r)])
                    }
                    Form::ReluThenConv => {
                        let filters = Shape::new(&[4, c, 3, 3]);
                        let k = s.variable("conv weight", filters, &values(filters.numel(), 80))?;
                        let a = h.batch_norm2d_relu(s, w, b, stats, args)?;
                        let y = a.conv2d(s, k, None, Conv2dArgs { stride: 1, padding: 1 })?;
                        (y, vec![("conv weight grad", k)])
                    }
                };
                let mut wanted = vec![("x grad", x), ("weight grad", w), ("bias grad", b)];
                wanted.extend(named);
                let named = with_grads_as(s, y, &wanted)?;
                read_all(s, named)
            })
            .expect("step");
        if step == 1 {
            read.extend(out);
        }
    }
    read.extend(read_stats(&mut arena, stats));
    read
}

/// [`bn_steps`] in fp32 and in bf16 on the GPU, every tensor within
/// [`BF16_TOL`] of the scale of fp32's (the batch count exact), and some
/// bit of some tensor different: the bf16 path ran.
fn bn_in_bf16(test: &str, shape: Shape, args: BatchNormArgs, form: Form) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fp32) = gpu_as(test, Precision::Fp32) else {
        return;
    };
    let on_fp32 = bn_steps(fp32, shape, args, form);
    let bf16 = gpu_as(test, Precision::Bf16).expect("the GPU opened once");
    let on_bf16 = bn_steps(bf16, shape, args, form);
    // The batch count is a count: exact in both, then left out of the
    // comparison at bf16's tolerance.
    let counted = |run: &[(&'static str, Vec<f32>)]| -> Vec<(&'static str, Vec<f32>)> {
        run.iter()
            .filter(|(name, _)| *name != "num_batches_tracked")
            .cloned()
            .collect()
    };
    let want = if args.training { 2.0 } else { 0.0 };
    for run in [&on_fp32, &on_bf16] {
        let batches = run.iter().find(|(name, _)| *name == "num_batches_tracked");
        assert_eq!(batches.map(|(_, v)| v[0]), Some(want), "{test}: num_batches_tracked");
    }
    assert_within_bf16(test, BF16_TOL, &counted(&on_fp32), &counted(&on_bf16));
}

#[test]
fn bf16_batch_norm2d_training_matches_fp32_with_weight_and_bias_grads() {
    // Planes of 144 values (four per thread in bn_apply), then 65536 values
    // per channel: 16 runs of 4096.
    for shape in [Shape::new(&[8, 6, 12, 12]), Shape::new(&[64, 4, 32, 32])] {
        bn_in_bf16(
            &format!("bf16 batch_norm2d train {shape}"),
            shape,
            BatchNormArgs::train(),
            Form::Plain,
        );
    }
}

#[test]
fn bf16_batch_norm2d_sums_runs_of_whole_vectors_as_fp32_sums_values() {
    // 11840 values per channel: bf16 runs of 3948 (fp32's 3947 rounded up
    // to whole vectors of 4), starting mid-plane; then planes of 4 values,
    // one run of 160.
    for (shape, form) in [
        (Shape::new(&[37, 3, 16, 20]), Form::Plain),
        (Shape::new(&[37, 3, 16, 20]), Form::AddRelu),
        (Shape::new(&[40, 5, 2, 2]), Form::Relu),
    ] {
        bn_in_bf16(
            &format!("bf16 batch_norm2d {form:?} {shape} in runs"),
            shape,
            BatchNormArgs::train(),
            form,
        );
    }
}

#[test]
fn bf16_batch_norm2d_relu_training_matches_fp32() {
    bn_in_bf16(
        "bf16 batch_norm2d relu train",
        Shape::new(&[4, 5, 8, 8]),
        BatchNormArgs::train(),
        Form::Relu,
    );
}

#[test]
fn bf16_batch_norm2d_add_relu_training_matches_fp32_with_the_residual_grad() {
    bn_in_bf16(
        "bf16 batch_norm2d add relu train",
        Shape::new(&[4, 5, 8, 8]),
        BatchNormArgs::train(),
        Form::AddRelu,
    );
}

#[test]
fn bf16_batch_norm2d_evaluation_uses_the_running_statistics_as_fp32_does() {
    for form in [Form::Plain, Form::Relu, Form::AddRelu] {
        bn_in_bf16(
            &format!("bf16 batch_norm2d {form:?} eval"),
            Shape::new(&[4, 5, 8, 8]),
            BatchNormArgs::eval(),
            form,
        );
    }
}

#[test]
fn bf16_batch_norm2d_on_planes_not_a_multiple_of_4_matches_fp32() {
    // 143 and 1 values per plane: one value per thread in every kernel.
    for shape in [Shape::new(&[8, 6, 13, 11]), Shape::new(&[40, 5, 1, 1])] {
        for form in [Form::Plain, Form::Relu, Form::AddRelu] {
            for args in [BatchNormArgs::train(), BatchNormArgs::eval()] {
                bn_in_bf16(
                    &format!("bf16 batch_norm2d {form:?} {shape} training {}", args.training),
                    shape,
                    args,
                    form,
                );
            }
        }
    }
}

#[test]
fn bf16_batch_norm2d_add_relu_casts_an_fp32_residual_to_the_inputs_type() {
    bn_in_bf16(
        "bf16 batch_norm2d add relu, fp32 residual",
        Shape::new(&[4, 5, 8, 8]),
        BatchNormArgs::train(),
        Form::AddReluFp32Residual,
    );
}

#[test]
fn bf16_batch_norm2d_relu_recomputed_for_a_convolution_matches_fp32() {
    for shape in [Shape::new(&[4, 6, 10, 10]), Shape::new(&[4, 6, 7, 9])] {
        bn_in_bf16(
            &format!("bf16 batch_norm2d relu, recomputed for conv2d {shape}"),
            shape,
            BatchNormArgs::train(),
            Form::ReluThenConv,
        );
    }
}
