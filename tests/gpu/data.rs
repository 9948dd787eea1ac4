//! The data path on the GPU: 3-channel images gathered with per-channel
//! normalisation, and training batches augmented (crop after zero padding,
//! flip) with the draws taken on the device from the step cursor, equal to
//! the CPU's for several steps and for a data-parallel shard.

use super::*;
use bumpgrad::ops::cursor::StepCursor;
use bumpgrad::ops::gather::{Augment, BatchAt, ByteImages};

/// CIFAR-10's statistics, as the data set carries them.
fn cifar_norm() -> Normalize {
    Normalize::per_channel(bumpgrad::data::cifar::NORMALIZE).expect("three channels")
}

/// Test images gathered by index, then four augmented training batches
/// (steps 0 to 2 of the epoch at global steps 40 to 42, and the second half
/// of step 2 as a shard), each read back.
fn augmented_batches(device: Device) -> Vec<(&'static str, Vec<f32>)> {
    let mut engine = Engine::new(device, 16 << 20).expect("arena");
    engine.arena_mut().set_poison_step(true);
    let mut p = engine.persistent();
    let (count, dims) = (40usize, [3usize, 8, 6]);
    let size: usize = dims.iter().product();
    let pixels: Vec<u8> = (0..count * size).map(|i| (i * 37 % 253) as u8 + 1).collect();
    let images = ByteImages {
        pixels: p
            .upload("images", Shape::new(&[count * size]), &pixels)
            .expect("upload"),
        count,
        image: Shape::new(&dims),
    };
    let labels: Vec<u8> = (0..count).map(|i| (i % 10) as u8).collect();
    let labels = p.upload("labels", Shape::new(&[count]), &labels).expect("upload");
    let order: Vec<u32> = (0..count).map(|i| (i * 13 % count) as u32).collect();
    let order = p.upload("order", Shape::new(&[count]), &order).expect("upload");
    let cursor = StepCursor::new(&mut p).expect("cursor");
    let augment = Augment { crop: 3, flip: true };
    let mut read = Vec::new();
    let test = engine
        .step(|s| {
            let x = s.gather_images(&images, &[5, 0, 39, 7], cifar_norm())?;
            let mut host = vec![0.0; x.shape().numel()];
            s.read(x, &mut host)?;
            Ok(host)
        })
        .expect("step");
    read.push(("test batch", test));
    // Every step's whole batch of 12; the cursor says which step.
    let at = BatchAt {
        order,
        cursor,
        stride: 12,
        len: 12,
        offset: 0,
        step: 0,
    };
    let names = ["step 0", "step 1", "step 2"];
    for (step, name) in names.into_iter().enumerate() {
        cursor.set(&mut engine, step as u32, 40 + step as u64).expect("cursor");
        let batch = engine
            .step(|s| {
                let (x, _) = s.gather_batch_augmented(&images, labels, at, cifar_norm(), augment, 77)?;
                let mut host = vec![0.0; x.shape().numel()];
                s.read(x, &mut host)?;
                Ok(host)
            })
            .expect("step");
        read.push((name, batch));
    }
    // The same step without augmentation: four pixels a thread on the GPU.
    let batch = engine
        .step(|s| {
            let (x, _) = s.gather_batch(&images, labels, at, cifar_norm())?;
            let mut host = vec![0.0; x.shape().numel()];
            s.read(x, &mut host)?;
            Ok(host)
        })
        .expect("step");
    read.push(("step 2 unaugmented", batch));
    let shard = BatchAt {
        order,
        cursor,
        stride: 12,
        len: 5,
        offset: 7,
        step: 0,
    };
    let batch = engine
        .step(|s| {
            let (x, _) = s.gather_batch_augmented(&images, labels, shard, cifar_norm(), augment, 77)?;
            let mut host = vec![0.0; x.shape().numel()];
            s.read(x, &mut host)?;
            Ok(host)
        })
        .expect("step");
    read.push(("shard of step 2", batch));
    read
}

#[test]
fn augmented_three_channel_batches_match_the_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu("augmented_batches") else { return };
    let on_cpu = augmented_batches(Device::cpu(1).expect("cpu"));
    let on_gpu = augmented_batches(gpu);
    assert_same_names("augmented_batches", &on_cpu, &on_gpu);
    for ((name, c), (_, g)) in on_cpu.iter().zip(&on_gpu) {
        assert_close(&format!("augmented_batches: {name}"), c, g);
    }
}

/// An order entry past the data set gathers a NaN image on the GPU (the
/// loss turns NaN and training stops naming the step), through the
/// augmenting kernel and the four-pixel one alike.
#[test]
fn an_index_past_the_data_set_gathers_a_nan_image_on_the_gpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu("index_past_the_data_set") else {
        return;
    };
    let mut engine = Engine::new(gpu, 16 << 20).expect("arena");
    let mut p = engine.persistent();
    let pixels: Vec<u8> = (0..4 * 16).map(|i| i as u8).collect();
    let images = ByteImages {
        pixels: p.upload("images", Shape::new(&[4 * 16]), &pixels).expect("upload"),
        count: 4,
        image: Shape::new(&[1, 4, 4]),
    };
    let labels = p.upload("labels", Shape::new(&[4]), &[0u8, 1, 2, 3]).expect("upload");
    let order = p.upload("order", Shape::new(&[4]), &[0u32, 9, 2, 3]).expect("upload");
    let cursor = StepCursor::new(&mut p).expect("cursor");
    let at = BatchAt {
        order,
        cursor,
        stride: 4,
        len: 4,
        offset: 0,
        step: 0,
    };
    for augment in [Augment::NONE, Augment { crop: 1, flip: true }] {
        let batch = engine
            .step(|s| {
                let (x, _) = s.gather_batch_augmented(&images, labels, at, Normalize::new(0.2, 0.5), augment, 3)?;
                let mut host = vec![0.0; x.shape().numel()];
                s.read(x, &mut host)?;
                Ok(host)
            })
            .expect("step");
        for (i, image) in batch.chunks(16).enumerate() {
            let nan = image.iter().filter(|v| v.is_nan()).count();
            assert_eq!(nan, if i == 1 { 16 } else { 0 }, "{augment:?}: image {i} is {image:?}");
        }
    }
}
