//! `--precision bf16` on the GPU: each op's bf16 path against its fp32 path
//! on the same GPU, at bf16's tolerance. A body casts its inputs to
//! `s.compute_dtype()` (bf16 on a device set to bf16, else fp32) as a
//! mixed-precision model's first convolution does, so the same body runs
//! the op in both types; gradients come back through the cast, in fp32.

use super::*;
use bumpgrad::backend::Precision;
use bumpgrad::DType;

/// The tolerance of a bf16 result against fp32's, as a fraction of the
/// tensor's largest magnitude: bf16 keeps 8 significant bits, so one
/// rounding moves a value by up to 2^-9 of itself (2e-3); an op whose
/// inputs and output are each rounded once, with sums in fp32, stays within
/// a few of those, while a wrong index or a lost term moves a value by the
/// scale itself.
pub(crate) const BF16_TOL: f32 = 2e-2;

/// The GPU set to `precision`, or `None` after saying why not.
pub(crate) fn gpu_as(test: &str, precision: Precision) -> Option<Device> {
    let mut device = gpu(test)?;
    device.set_precision(precision).expect("set the precision");
    Some(device)
}

/// The largest difference between `b` and `a`, as a fraction of `a`'s
/// largest magnitude.
pub(crate) fn apart(a: &[f32], b: &[f32]) -> f32 {
    let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "all zeros proves nothing");
    let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    worst / scale
}

/// Runs `body` on the GPU in fp32 and in bf16 and holds every tensor it
/// returns to within `tol` of the scale of fp32's; returns the bf16 run's
/// tensors. At least one tensor must differ from fp32's in some bit: were
/// the bf16 path not taken, both runs would be fp32's. Every bf16
/// convolution the bf16 run's own device planned ran on the graph API.
pub(crate) fn same_in_bf16(test: &str, tol: f32, body: &Body) -> Option<Vec<(&'static str, Vec<f32>)>> {
    bf16_against_fp32(test, tol, body).map(|(on_bf16, _)| on_bf16)
}

/// [`same_in_bf16`] for a body with convolutions: at least one ran in
/// bf16, on the graph API.
pub(crate) fn same_in_bf16_with_convolutions(test: &str, tol: f32, body: &Body) {
    if let Some((_, convolutions)) = bf16_against_fp32(test, tol, body) {
        assert!(convolutions > 0, "{test}: no bf16 convolution ran");
    }
}

/// Named tensors read back from a step.
type Read = Vec<(&'static str, Vec<f32>)>;

/// [`same_in_bf16`]'s work, with the bf16 convolutions counted.
fn bf16_against_fp32(test: &str, tol: f32, body: &Body) -> Option<(Read, usize)> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let fp32 = gpu_as(test, Precision::Fp32)?;
    let on_fp32 = run(fp32, body);
    let bf16 = gpu_as(test, Precision::Bf16).expect("the GPU opened once");
    let (on_bf16, apis) = run_seeing_convolutions(bf16, body);
    assert_within_bf16(test, tol, &on_fp32, &on_bf16);
    let convolutions = assert_bf16_convolutions_on_the_graph_api(test, &apis);
    Some((on_bf16, convolutions))
}

/// Every bf16 convolution in `apis` (those the device that ran a test
/// planned) runs on cuDNN's graph API: the legacy API takes bf16 only
/// where the graph API refused it, and there a test of the bf16 path
/// would not be testing it. Returns how many bf16 convolutions there were,
/// for callers that know there must be some.
pub(crate) fn assert_bf16_convolutions_on_the_graph_api(test: &str, apis: &ConvApis) -> usize {
    use bumpgrad::backend::cuda::ConvApi;
    let mut bf16 = 0;
    for (dims, api) in apis {
        if dims.dtype == DType::Bf16 {
            assert_eq!(*api, ConvApi::Graph, "{test}: bf16 convolution {dims:?}");
            bf16 += 1;
        }
    }
    bf16
}

/// Every tensor of `on_bf16` within `tol` of the scale of `on_fp32`'s (the
/// same names, in order), each distance printed, and some bit of some
/// tensor different: were the bf16 path not taken, both would be fp32's.
pub(crate) fn assert_within_bf16(
    test: &str,
    tol: f32,
    on_fp32: &[(&'static str, Vec<f32>)],
    on_bf16: &[(&'static str, Vec<f32>)],
) {
    assert_same_names(test, on_fp32, on_bf16);
    for ((name, a), (_, b)) in on_fp32.iter().zip(on_bf16) {
        assert_eq!(a.len(), b.len(), "{test}: {name}: lengths differ");
        assert!(
            b.iter().all(|v| v.is_finite()),
            "{test}: {name}: bf16 gave a non-finite value"
        );
        let apart = apart(a, b);
        let _ = writeln!(
            std::io::stderr(),
            "{test}: {name}: bf16 is {apart:.2e} of the scale from fp32"
        );
        assert!(
            apart <= tol,
            "{test}: {name}: bf16 is {apart:.2e} of the scale from fp32 (allowed {tol:.0e})"
        );
    }
    let differs = on_fp32
        .iter()
        .zip(on_bf16)
        .any(|((_, a), (_, b))| a.iter().zip(b).any(|(x, y)| x.to_bits() != y.to_bits()));
    assert!(
        differs,
        "{test}: bf16 gave fp32's bits everywhere: the bf16 path did not run"
    );
}

/// A variable of `shape` (fp32, so its gradient comes back in fp32) and
/// the same values in the step's compute type, which the op under test
/// reads.
pub(crate) fn input<'s>(
    s: &mut Step<'s>,
    name: &'static str,
    shape: Shape,
    seed: u64,
) -> bumpgrad::Result<(Tensor<'s>, Tensor<'s>)> {
    let x = s.variable(name, shape, &values(shape.numel(), seed))?;
    let dtype = s.compute_dtype();
    let cast = x.cast(s, dtype)?;
    Ok((x, cast))
}

/// `y` and the gradient of `sum(y * gy)` with respect to each input, for a
/// `y` of either type and layout (the upstream gradient is cast to `y`'s
/// type and layout). Asserts
/// that `y` is of the step's compute type: the op kept bf16 in bf16.
pub(crate) fn with_grads_as<'s>(
    s: &mut Step<'s>,
    y: Tensor<'s>,
    inputs: &[(&'static str, Tensor<'s>)],
) -> bumpgrad::Result<Vec<(&'static str, Tensor<'s>)>> {
    assert_eq!(
        y.dtype(),
        s.compute_dtype(),
        "the op's output is of the step's compute type"
    );
    let gy = s.input("upstream grad", y.shape(), &values(y.shape().numel(), 99))?;
    let gy = gy.convert(s, y.dtype(), y.layout())?;
    let grads = s.backward_from(y, gy)?;
    let mut out = vec![("output", y)];
    for &(name, t) in inputs {
        out.push((name, s.grad(&grads, t).expect("gradient")));
    }
    Ok(out)
}

#[test]
fn relu_in_bf16_is_fp32s_rounded() {
    same_in_bf16("bf16 relu", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[3, 5, 7, 9]), 1)?;
        let y = h.relu(s)?;
        with_grads_as(s, y, &[("x grad", x)])
    });
}

/// Channels last, as a bf16 step's activations are: relu keeps the layout,
/// and a bf16 ResNet-ish slice (convolution, relu, add, strided
/// convolution with bias) matches fp32's NCHW one.
#[test]
fn a_channels_last_slice_in_bf16_matches_fp32() {
    same_in_bf16_with_convolutions("bf16 channels-last slice", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[4, 16, 12, 12]), 21)?;
        let layout = s.compute_layout();
        let h = h.to_layout(s, layout)?;
        let w1 = s.variable("w1", Shape::new(&[16, 16, 3, 3]), &values(16 * 16 * 9, 22))?;
        let w2 = s.variable("w2", Shape::new(&[8, 16, 3, 3]), &values(8 * 16 * 9, 23))?;
        let b2 = s.variable("b2", Shape::new(&[8]), &values(8, 24))?;
        let a = h.relu(s)?;
        assert_eq!(a.layout(), layout);
        let c = h.conv2d(s, w1, None, Conv2dArgs { stride: 1, padding: 1 })?;
        let sum = a.add(s, c)?;
        let y = sum.conv2d(s, w2, Some(b2), Conv2dArgs { stride: 2, padding: 1 })?;
        assert_eq!(y.layout(), layout);
        with_grads_as(
            s,
            y,
            &[("x grad", x), ("w1 grad", w1), ("w2 grad", w2), ("b2 grad", b2)],
        )
    });
}

/// A bf16 convolution is channels last (cuDNN's fast bf16 layout): its
/// NCHW input and fp32 weight are converted on the way in, and its output
/// reads back as fp32's.
#[test]
fn conv2d_in_bf16_runs_on_the_tensor_cores_within_bf16s_rounding() {
    same_in_bf16_with_convolutions("bf16 conv2d", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[8, 64, 16, 16]), 3)?;
        let w = s.variable("w", Shape::new(&[64, 64, 3, 3]), &values(64 * 64 * 9, 4))?;
        let y = h.conv2d(s, w, None, Conv2dArgs { stride: 1, padding: 1 })?;
        assert_eq!(y.layout(), s.compute_layout(), "channels last in bf16, NCHW in fp32");
        with_grads_as(s, y, &[("x grad", x), ("w grad", w)])
    });
}

#[test]
fn conv2d_with_bias_and_stride_in_bf16_matches_fp32() {
    same_in_bf16_with_convolutions("bf16 conv2d+bias", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[3, 5, 9, 9]), 5)?;
        let w = s.variable("w", Shape::new(&[4, 5, 3, 3]), &values(180, 6))?;
        let b = s.variable("b", Shape::new(&[4]), &values(4, 7))?;
        let y = h.conv2d(s, w, Some(b), Conv2dArgs { stride: 2, padding: 1 })?;
        with_grads_as(s, y, &[("x grad", x), ("w grad", w), ("b grad", b)])
    });
}

#[test]
fn linear_in_bf16_matches_fp32() {
    same_in_bf16("bf16 linear", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[64, 512]), 8)?;
        let w = s.variable("w", Shape::new(&[10, 512]), &values(5120, 9))?;
        let b = s.variable("b", Shape::new(&[10]), &values(10, 10))?;
        let y = h.linear(s, w, Some(b))?;
        with_grads_as(s, y, &[("x grad", x), ("w grad", w), ("b grad", b)])
    });
}

/// The loss of bf16 logits is fp32 (as under autocast), and the logits'
/// gradient comes back in bf16.
#[test]
fn cross_entropy_of_bf16_logits_is_an_fp32_loss() {
    same_in_bf16("bf16 cross-entropy", BF16_TOL, &|s| {
        let (x, h) = input(s, "logits", Shape::new(&[37, 10]), 11)?;
        let labels: Vec<u32> = (0..37).map(|i| (i * 7 % 10) as u32).collect();
        let labels = s.labels(&labels)?;
        let loss = h.cross_entropy(
            s,
            labels,
            CrossEntropyArgs {
                label_smoothing: 0.1,
                ..CrossEntropyArgs::default()
            },
        )?;
        assert_eq!(loss.dtype(), DType::F32, "the loss is fp32 whatever the logits");
        let grads = s.backward(loss)?;
        let gx = s.grad(&grads, x).expect("gradient");
        Ok(vec![("loss", loss), ("logits grad", gx)])
    });
}

/// A bf16 tensor used twice gets both gradients, added in bf16
/// (`add_assign_bf16`).
#[test]
fn a_bf16_tensor_used_twice_accumulates_both_gradients() {
    same_in_bf16_with_convolutions("bf16 used twice", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[4, 8, 6, 6]), 12)?;
        let w = s.variable("w", Shape::new(&[8, 8, 3, 3]), &values(576, 13))?;
        let a = h.relu(s)?;
        let b = h.conv2d(s, w, None, Conv2dArgs { stride: 1, padding: 1 })?;
        let y = a.add(s, b)?;
        with_grads_as(s, y, &[("x grad", x), ("w grad", w)])
    });
}

/// A bf16 tensor read by two convolutions: the first gradient to arrive is
/// written, the second is added by cuDNN itself (its `beta = 1`, a graph
/// of its own to cuDNN's graph API). The tensor is in the step's compute
/// layout already, as a ResNet block's input is: one that is not reaches
/// each convolution through a conversion of its own.
#[test]
fn a_bf16_tensor_read_by_two_convolutions_gets_both_input_gradients() {
    same_in_bf16_with_convolutions("bf16 read by two convolutions", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[4, 16, 8, 8]), 14)?;
        let (dtype, layout) = (s.compute_dtype(), s.compute_layout());
        let h = h.convert(s, dtype, layout)?;
        let w1 = s.variable("w1", Shape::new(&[16, 16, 3, 3]), &values(16 * 16 * 9, 15))?;
        let w2 = s.variable("w2", Shape::new(&[16, 16, 1, 1]), &values(16 * 16, 16))?;
        let a = h.conv2d(s, w1, None, Conv2dArgs { stride: 1, padding: 1 })?;
        let b = h.conv2d(s, w2, None, Conv2dArgs { stride: 1, padding: 0 })?;
        let y = a.add(s, b)?;
        with_grads_as(s, y, &[("x grad", x), ("w1 grad", w1), ("w2 grad", w2)])
    });
}

/// A network trained in bf16 against the same run in fp32, on the GPU:
/// the bf16 step is captured as one graph and runs on its plan to the byte
/// (its high-water is the plan's peak), the plan keeps the activations in
/// bf16 (the most bytes at the peak are bf16's, and the peak is well below
/// fp32's), the persistent region is fp32's to the byte (master weights,
/// gradients and momentum stay fp32), and the losses follow fp32's epoch
/// by epoch, the last epoch's accuracy too. An early epoch's accuracy is
/// noise: a narrow network's running statistics still move fast (on the
/// H200 the two runs' first-epoch losses agreed to 0.2% while their test
/// accuracies were 51% and 71%).
fn trains_in_bf16_as_in_fp32(test: &str, cfg: TrainConfig, loss_tol: f64, accuracy_tol: f64) {
    use bumpgrad::train::{memory_report, Pipeline};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_probe) = gpu(test) else { return };
    drop(_probe);
    let bf16 = {
        let mut cfg = cfg.clone();
        cfg.device.precision = Precision::Bf16;
        cfg
    };
    let (fp32_plan, _) = memory_report(&cfg).expect("fp32 plan");
    let (bf16_plan, _) = memory_report(&bf16).expect("bf16 plan");
    let _ = writeln!(
        std::io::stderr(),
        "{test}: step peak fp32 {} ({:?}), bf16 {} ({:?})",
        fp32_plan.plan_peak_bytes,
        fp32_plan.step_peak_by_type,
        bf16_plan.plan_peak_bytes,
        bf16_plan.step_peak_by_type
    );
    assert_eq!(
        bf16_plan.step_peak_by_type[0].element, "bf16",
        "{:?}",
        bf16_plan.step_peak_by_type
    );
    assert!(
        (bf16_plan.plan_peak_bytes as f64) < 0.65 * fp32_plan.plan_peak_bytes as f64,
        "{test}: bf16 step {} against fp32's {}",
        bf16_plan.plan_peak_bytes,
        fp32_plan.plan_peak_bytes
    );
    assert_eq!(bf16_plan.persistent_by_type, fp32_plan.persistent_by_type);
    let (mut session, info) = Pipeline::open(&bf16, None).and_then(Pipeline::build).expect("prepare");
    let planned = training_plan_peak(&info);
    let mut seen = Collect(Vec::new());
    let on_bf16: Vec<EpochReport> = (1..=bf16.run.epochs)
        .map(|e| session.epoch(e, &mut seen).expect("epoch"))
        .collect();
    let on_fp32 = train_on(&cfg);
    for (b, f) in on_bf16.iter().zip(&on_fp32) {
        let _ = writeln!(
            std::io::stderr(),
            "{test}: epoch {}: loss bf16 {:.4} fp32 {:.4}, accuracy bf16 {:.4} fp32 {:.4}, ms/step bf16 {:.2} fp32 {:.2}",
            b.epoch,
            b.train_loss,
            f.train_loss,
            b.test_accuracy,
            f.test_accuracy,
            1e3 * b.seconds / b.steps as f64,
            1e3 * f.seconds / f.steps as f64
        );
        assert!(b.graph, "{test}: the bf16 step is captured");
        assert_eq!(b.precision, Precision::Bf16);
        assert_eq!(
            b.arena.step_high_water_bytes, planned,
            "{test}: epoch {} left its plan",
            b.epoch
        );
    }
    let (b, f) = (on_bf16.last().expect("epochs"), on_fp32.last().expect("epochs"));
    assert!(
        (b.test_accuracy - f.test_accuracy).abs() <= accuracy_tol,
        "{test}, last epoch: accuracy bf16 {} vs fp32 {}",
        b.test_accuracy,
        f.test_accuracy
    );
    assert_same_losses(&format!("{test}: bf16 vs fp32"), &on_fp32, &on_bf16, loss_tol);
    let convolutions = assert_bf16_convolutions_on_the_graph_api(test, &session.engine().runtime().convolution_apis());
    assert!(convolutions > 0, "{test}: the bf16 run planned no bf16 convolution");
}

#[test]
fn a_resnet18_trains_on_mnist_in_bf16_as_in_fp32() {
    use bumpgrad::models::{Depth, ResNet};
    // Deterministic convolutions in both runs, so that what parts them is
    // the precision alone, the same every run: with timed (atomic)
    // algorithms two runs of one precision part too, and an accuracy
    // bound would hold their noise as well.
    let cfg = {
        let mut cfg = TrainConfig::default();
        cfg.device.request = DeviceRequest::Cuda;
        cfg.run.model = ResNet::choice(Depth::R18, 0.25);
        cfg.run.data_dir = data_dir();
        cfg.run.epochs = 2;
        cfg.run.batch = 128;
        cfg.run.lr = 0.05;
        cfg.device.deterministic = true;
        cfg
    };
    // The whole of MNIST: on 8,000 images the last epoch's test accuracy
    // still swung by 9 points between two runs whose losses agreed to 2%.
    // The losses within 8% and the last accuracy within 2 points: the first
    // epoch's average is the early descent, which any rounding moves.
    // Measured with this configuration on an H100
    // (bench/results/bn-kernels-2026-12-06-h100.txt, seeds 42 and 1-5, two
    // builds whose batch-norm sums differ only in their order): bf16 apart
    // from fp32 by 0.0-6.3% in the first epoch and 0.2-4.2% in the second,
    // the last accuracy by up to 1.8 points; fp32's own first epoch
    // 0.407-0.453 and last accuracy 96.8-98.5% from seed to seed.
    trains_in_bf16_as_in_fp32("bf16 resnet18 mnist", cfg, 0.08, 0.02);
}

#[test]
fn a_squeezenet_trains_in_bf16_as_in_fp32() {
    use bumpgrad::models::SqueezeNet;
    let cfg = {
        let mut cfg = TrainConfig::default();
        cfg.device.request = DeviceRequest::Cuda;
        cfg.run.model = SqueezeNet::choice(0.5);
        cfg.run.data_dir = "synthetic:cifar10:2048".into();
        cfg.run.epochs = 2;
        cfg.run.batch = 128;
        cfg.run.lr = 0.02;
        cfg
    };
    // Random labels: the accuracy is noise around 10%.
    trains_in_bf16_as_in_fp32("bf16 squeezenet", cfg, 0.03, 0.05);
}
