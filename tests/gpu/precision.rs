//! `--precision` on the GPU: fp32 keeps matching the CPU, and tf32 really
//! runs on the tensor cores (its results differ from fp32's in the last
//! bits) while staying within TF32's rounding of them.

use super::*;
use bumpgrad::backend::cuda::{ConvApi, ConvDims};
use bumpgrad::backend::{Policy, Precision};

/// A ResNet-ish slice: a 3×3 convolution 64→64 on 8×64×16×16 (large enough
/// that cuDNN runs it on the tensor cores when TF32 is allowed), relu, and a
/// linear layer to 10 classes (a cuBLAS product), with every gradient.
fn conv_and_linear<'s>(s: &mut Step<'s>) -> bumpgrad::Result<Vec<(&'static str, Tensor<'s>)>> {
    let (xs, ws, fcs) = (
        Shape::new(&[8, 64, 16, 16]),
        Shape::new(&[64, 64, 3, 3]),
        Shape::new(&[10, 64 * 16 * 16]),
    );
    let x = s.variable("x", xs, &values(xs.numel(), 81))?;
    let w = s.variable("w", ws, &values(ws.numel(), 82))?;
    let fc = s.variable("fc", fcs, &values(fcs.numel(), 83))?;
    let conv = x.conv2d(s, w, None, Conv2dArgs { stride: 1, padding: 1 })?;
    let logits = conv.relu(s)?.flatten(s)?.linear(s, fc, None)?;
    let mut out = vec![("conv output", conv)];
    out.extend(with_grads(s, logits, &[("x grad", x), ("w grad", w), ("fc grad", fc)])?);
    Ok(out)
}

/// The GPU set to `precision`, or `None` after saying why not.
fn gpu_in(test: &str, precision: Precision) -> Option<Device> {
    let mut device = gpu(test)?;
    device.set_precision(precision).expect("set the precision");
    Some(device)
}

/// The largest difference between `b` and `a`, as a fraction of `a`'s
/// largest magnitude.
fn apart(a: &[f32], b: &[f32]) -> f32 {
    let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    worst / scale
}

#[test]
fn tf32_is_on_the_tensor_cores_and_within_its_rounding_of_fp32() {
    let test = "precision tf32";
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fp32) = gpu_in(test, Precision::Fp32) else {
        return;
    };
    let on_cpu = run(Device::cpu(1).expect("cpu"), &conv_and_linear);
    let on_fp32 = run(fp32, &conv_and_linear);
    let tf32 = gpu_in(test, Precision::Tf32).expect("the GPU opened once");
    let (on_tf32, apis) = run_seeing_convolutions(tf32, &conv_and_linear);
    // TF32 convolutions run channels last on the graph API's tensor-core
    // engines (the legacy API's NCHW TF32 kernels were 1.5× slower).
    assert!(!apis.is_empty(), "{test}: no convolution was planned");
    for (dims, api) in &apis {
        assert!(dims.nhwc, "{test}: a TF32 convolution in NCHW: {dims:?}");
        assert_eq!(*api, ConvApi::Graph, "{test}: TF32 convolution {dims:?}");
    }
    assert_same_names(test, &on_cpu, &on_fp32);
    assert_same_names(test, &on_fp32, &on_tf32);
    for ((name, cpu), ((_, fp32), (_, tf32))) in on_cpu.iter().zip(on_fp32.iter().zip(&on_tf32)) {
        // fp32 on the GPU is held to the CPU as every other GPU test is.
        assert_close(&format!("{test}: fp32 {name}"), cpu, fp32);
        // TF32 rounds each product's inputs to a 10-bit mantissa and sums
        // in fp32: 5e-2 of the tensor's scale is above that rounding and far
        // below a wrong answer. Measured on the H200: 2.9e-4 (conv output),
        // 3.9e-4 (output), 3.0e-2 (x grad: sums of products that cancel).
        let apart = apart(fp32, tf32);
        assert!(
            apart <= 5e-2,
            "{test}: {name}: tf32 is {apart:.2e} of the scale from fp32"
        );
        let _ = writeln!(
            std::io::stderr(),
            "{test}: {name}: tf32 is {apart:.2e} of the scale from fp32"
        );
    }
    // Were TF32 not really on, the forward convolution would be fp32's bit
    // for bit (the same algorithm), or another fp32 algorithm's, whose other
    // order of sums moves it by about 1e-6 of its scale. Rounding the inputs
    // to TF32 moves it far more: 2.4e-4 of its scale in a simulation of
    // these sizes (values in [-1, 1), 576-term sums, inputs rounded to
    // nearest), 12 times the bound below.
    let (fp32, tf32) = (&on_fp32[0].1, &on_tf32[0].1);
    assert!(
        fp32.iter().zip(tf32).any(|(a, b)| a.to_bits() != b.to_bits()),
        "{test}: the tf32 convolution is bit-identical to fp32's: TF32 was not used"
    );
    let apart = apart(fp32, tf32);
    assert!(
        apart > 2e-5,
        "{test}: the tf32 convolution is {apart:.2e} of the scale from fp32's: an fp32 algorithm's rounding, not TF32's"
    );
}

/// Switching one runtime's precision moves its later steps to plans made
/// for the other math (each policy has its own): fp32 after tf32 on one
/// device gives fp32's results again.
#[test]
fn fp32_after_tf32_on_one_gpu_is_fp32_again() {
    let test = "precision tf32 then fp32";
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(device) = gpu_in(test, Precision::Tf32) else {
        return;
    };
    let mut engine = Engine::new(device, 64 << 20).expect("arena");
    let conv = |engine: &mut Engine| {
        engine
            .step(|s| {
                let out = conv_and_linear(s)?;
                let mut host = vec![0.0; out[0].1.shape().numel()];
                s.read(out[0].1, &mut host)?;
                Ok(host)
            })
            .expect("step")
    };
    let tf32 = conv(&mut engine);
    let back = Policy {
        precision: Precision::Fp32,
        ..engine.runtime().policy()
    };
    engine.runtime_mut().set_policy(back).expect("back to fp32");
    assert_eq!(engine.runtime().policy().precision, Precision::Fp32);
    let fp32 = conv(&mut engine);
    // The convolution's tf32 plan is kept, and fp32's made beside it: TF32
    // channels last through the graph API, fp32 in NCHW through either.
    let plans = engine.runtime().convolution_apis();
    assert_eq!(plans.len(), 2, "{test}: {plans:?}");
    let (tf32_plan, fp32_plan) = (&plans[0], &plans[1]);
    let shape = |d: &ConvDims| (d.n, d.c, d.h, d.w, d.f, d.kh, d.kw, d.stride, d.padding, d.dtype);
    assert_eq!(
        shape(&tf32_plan.0),
        shape(&fp32_plan.0),
        "{test}: one shape, planned under each policy"
    );
    assert!(tf32_plan.0.nhwc && !fp32_plan.0.nhwc, "{test}: {plans:?}");
    assert_eq!(tf32_plan.1, ConvApi::Graph, "{test}: TF32 runs the graph API's engines");
    assert!(
        matches!(fp32_plan.1, ConvApi::Either { .. }),
        "{test}: fp32 runs either API's FMA candidates: {plans:?}"
    );
    let on_cpu = run(Device::cpu(1).expect("cpu"), &|s| {
        Ok(conv_and_linear(s)?.into_iter().take(1).collect())
    });
    assert_close(&format!("{test}: fp32 after tf32"), &on_cpu[0].1, &fp32);
    assert!(
        fp32.iter().zip(&tf32).any(|(a, b)| a.to_bits() != b.to_bits()),
        "{test}: the first run was not TF32, so this proves nothing"
    );
}
