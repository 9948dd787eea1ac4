//! bf16 batch norm on the GPU against fp32 (see `bf16.rs`): output,
//! gradients and running statistics of two training (or evaluation) steps,
//! the input bf16 in the bf16 run, the weight, bias and statistics fp32 in
//! both. The channels-last tests give the bf16 run its input (and
//! residual) in the step's compute layout, NHWC, as a bf16 convolution
//! leaves them, against fp32's NCHW (reads come back in NCHW order).
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
use bumpgrad::Layout;

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
    /// `AddRelu` with the residual left NCHW where the input is channels
    /// last: the op converts it to the input's layout.
    AddReluNchwResidual,
}

/// `v` as bf16 holds it (its top 16 bits, rounded), as an fp32.
fn exact(v: f32) -> f32 {
    bumpgrad::memory::bf16::from_f32(v).to_f32()
}

/// Two steps of a batch norm in `args`' mode on `device`, weight and bias
/// parameters of a store and its running statistics buffers: the second
/// step's output and gradients (through the casts, in fp32), then the
/// running statistics after both.
/// With `channels_last` the input (and the residual, but for
/// `AddReluNchwResidual`) is put in the step's compute layout.
fn bn_steps(
    device: Device,
    shape: Shape,
    args: BatchNormArgs,
    form: Form,
    channels_last: bool,
) -> Vec<(&'static str, Vec<f32>)> {
    let (c, hw) = (shape.dim(1), shape.dim(2) * shape.dim(3));
    let (mut engine, _store, (weight, bias, stats)) = bn_arena(device, c);
    let mut read = Vec::new();
    for step in 0..2u64 {
        let out = engine
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
                let layout = match channels_last {
                    true => s.compute_layout(),
                    false => Layout::Nchw,
                };
                let h = h.to_layout(s, layout)?;
                let (w, b) = (s.param(&weight), s.param(&bias));
                let r = s.variable("residual", shape, &rs)?;
                let (y, named) = match form {
                    Form::Plain => (h.batch_norm2d(s, w, b, stats, args)?, vec![]),
                    Form::Relu => (h.batch_norm2d_relu(s, w, b, stats, args)?, vec![]),
                    Form::AddRelu => {
                        let hr = r.convert(s, dtype, layout)?;
                        let y = h.batch_norm2d_add_relu(s, w, b, stats, args, hr)?;
                        (y, vec![("residual grad", r)])
                    }
                    Form::AddReluNchwResidual => {
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
                if !matches!(form, Form::ReluThenConv) {
                    assert_eq!(y.layout(), layout, "the output is in the input's layout");
                }
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
    read.extend(read_stats(&mut engine, stats));
    read
}

/// [`bn_steps`] in fp32 and in bf16 on the GPU, every tensor within
/// [`BF16_TOL`] of the scale of fp32's (the batch count exact), and some
/// bit of some tensor different: the bf16 path ran.
fn bn_in_bf16(test: &str, shape: Shape, args: BatchNormArgs, form: Form) {
    bn_in_bf16_as(test, shape, args, form, false)
}

/// [`bn_in_bf16`] with the bf16 run's input channels last (fp32's NCHW).
fn bn_nhwc_in_bf16(test: &str, shape: Shape, args: BatchNormArgs, form: Form) {
    bn_in_bf16_as(test, shape, args, form, true)
}

fn bn_in_bf16_as(test: &str, shape: Shape, args: BatchNormArgs, form: Form, channels_last: bool) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fp32) = gpu_as(test, Precision::Fp32) else {
        return;
    };
    let on_fp32 = bn_steps(fp32, shape, args, form, channels_last);
    let bf16 = gpu_as(test, Precision::Bf16).expect("the GPU opened once");
    let on_bf16 = bn_steps(bf16, shape, args, form, channels_last);
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

#[test]
fn bf16_batch_norm2d_channels_last_training_matches_fp32() {
    // 64 channels: eight per thread (16 bytes), one tile of a row; 4
    // channels: four per thread, 65536 rows in 256 runs; 96 channels: two
    // tiles of 64, the second half idle; 189 rows: a thread's last rows
    // in flight (four in a sum, two in an elementwise pass) run past the
    // block's.
    for shape in [
        Shape::new(&[8, 64, 8, 8]),
        Shape::new(&[64, 4, 32, 32]),
        Shape::new(&[16, 96, 16, 16]),
        Shape::new(&[3, 64, 7, 9]),
    ] {
        for form in [Form::Plain, Form::Relu, Form::AddRelu] {
            bn_nhwc_in_bf16(
                &format!("bf16 NHWC batch_norm2d {form:?} {shape} train"),
                shape,
                BatchNormArgs::train(),
                form,
            );
        }
    }
}

#[test]
fn bf16_batch_norm2d_channels_last_evaluation_uses_the_running_statistics() {
    for form in [Form::Plain, Form::Relu, Form::AddRelu] {
        bn_nhwc_in_bf16(
            &format!("bf16 NHWC batch_norm2d {form:?} eval"),
            Shape::new(&[4, 16, 8, 8]),
            BatchNormArgs::eval(),
            form,
        );
    }
}

#[test]
fn bf16_batch_norm2d_channels_last_on_channels_not_a_multiple_of_8_matches_fp32() {
    // Two (6), four (12) and one (5) channels per thread; planes of 9, 143
    // and 1 pixels.
    for shape in [
        Shape::new(&[8, 6, 3, 3]),
        Shape::new(&[8, 6, 13, 11]),
        Shape::new(&[6, 12, 5, 5]),
        Shape::new(&[40, 5, 1, 1]),
    ] {
        for form in [Form::Plain, Form::Relu, Form::AddRelu] {
            for args in [BatchNormArgs::train(), BatchNormArgs::eval()] {
                bn_nhwc_in_bf16(
                    &format!("bf16 NHWC batch_norm2d {form:?} {shape} training {}", args.training),
                    shape,
                    args,
                    form,
                );
            }
        }
    }
}

#[test]
fn bf16_batch_norm2d_channels_last_converts_a_residual_of_another_type_or_layout() {
    for form in [Form::AddReluFp32Residual, Form::AddReluNchwResidual] {
        bn_nhwc_in_bf16(
            &format!("bf16 NHWC batch_norm2d {form:?}"),
            Shape::new(&[4, 8, 6, 6]),
            BatchNormArgs::train(),
            form,
        );
    }
}

#[test]
fn bf16_batch_norm2d_channels_last_relu_recomputed_for_a_convolution_matches_fp32() {
    for shape in [Shape::new(&[4, 16, 10, 10]), Shape::new(&[4, 6, 7, 9])] {
        bn_nhwc_in_bf16(
            &format!("bf16 NHWC batch_norm2d relu, recomputed for conv2d {shape}"),
            shape,
            BatchNormArgs::train(),
            Form::ReluThenConv,
        );
    }
}

/// The fp32 channels-last kernels (a TF32 step's batch norm) against NCHW
/// fp32's: the same step but for the order of the per-channel sums, so
/// every tensor within 1e-5 of the scale. 16 and 64 channels take the
/// kernels' 16-byte rows (four loaded before any is summed; two before an
/// elementwise pass stores either), 6 channels two values a thread; 400
/// and 189 rows leave a thread's last group short.
#[test]
fn fp32_batch_norm2d_channels_last_matches_nchw() {
    let test = "fp32_batch_norm2d_channels_last_matches_nchw";
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for (shape, form) in [
        (Shape::new(&[4, 16, 10, 10]), Form::Plain),
        (Shape::new(&[4, 16, 10, 10]), Form::AddRelu),
        (Shape::new(&[3, 64, 7, 9]), Form::Relu),
        (Shape::new(&[3, 64, 7, 9]), Form::AddRelu),
        (Shape::new(&[8, 6, 13, 11]), Form::Relu),
    ] {
        let Some(fp32) = gpu_as(test, Precision::Fp32) else {
            return;
        };
        let nchw = bn_steps(fp32, shape, BatchNormArgs::train(), form, false);
        let tf32 = gpu_as(test, Precision::Tf32).expect("the GPU opened once");
        let nhwc = bn_steps(tf32, shape, BatchNormArgs::train(), form, true);
        assert_same_names(test, &nchw, &nhwc);
        // The sums' order differs: were NHWC's kernels not run, every bit
        // would be NCHW's.
        let differs = nchw
            .iter()
            .zip(&nhwc)
            .any(|((_, a), (_, b))| a.iter().zip(b).any(|(x, y)| x.to_bits() != y.to_bits()));
        assert!(differs, "{test}: {shape} {form:?}: NHWC gave NCHW's bits everywhere");
        for ((name, a), (_, b)) in nchw.iter().zip(&nhwc) {
            let apart = apart(a, b);
            let _ = writeln!(
                std::io::stderr(),
                "{test}: {shape} {form:?} {name}: NHWC is {apart:.2e} of the scale from NCHW"
            );
            assert!(
                apart <= 1e-5,
                "{test}: {shape} {form:?} {name}: NHWC is {apart:.2e} of the scale from NCHW (allowed 1e-5)"
            );
        }
    }
}
