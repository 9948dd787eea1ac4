use super::{ByteImages, Normalize};
use crate::tensor::Shape;

#[test]
fn gathers_and_normalises_by_index() {
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let pixels: Vec<u8> = (0..12).map(|i| i * 20).collect(); // 3 images of 1×2×2
    let mut p = engine.persistent();
    let set = ByteImages {
        pixels: p.upload("images", Shape::new(&[12]), &pixels).unwrap(),
        count: 3,
        image: Shape::new(&[1, 2, 2]),
    };
    let labels = p.upload("labels", Shape::new(&[3]), &[7u8, 8, 9]).unwrap();
    let norm = Normalize::new(0.5, 0.25);
    let (x, y) = engine
        .step(|s| {
            let x = s.gather_images(&set, &[2, 0], norm)?;
            assert_eq!(x.shape(), Shape::new(&[2, 1, 2, 2]));
            let mut out = [0.0; 8];
            s.read(x, &mut out)?;
            let l = s.gather_labels(labels, &[2, 0])?;
            let mut host = [0u32; 2];
            s.backend().download(l.buf, &mut host)?;
            Ok((out, host))
        })
        .unwrap();
    for (k, &i) in [2usize, 0].iter().enumerate() {
        for j in 0..4 {
            let want = (pixels[i * 4 + j] as f32 / 255.0 - 0.5) / 0.25;
            assert!((x[k * 4 + j] - want).abs() < 1e-5);
        }
    }
    assert_eq!(y, [9, 7]);
    let err = engine
        .step(|s| s.gather_images(&set, &[3], norm).map(|_| ()))
        .unwrap_err();
    assert!(err.to_string().contains("index 3"), "{err}");
}

#[test]
fn gather_batch_reads_the_cursors_slice_of_the_order() {
    use super::BatchAt;
    use crate::ops::cursor::StepCursor;
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let pixels: Vec<u8> = (0..20).map(|i| i * 10).collect(); // 5 images of 1×2×2
    let mut p = engine.persistent();
    let set = ByteImages {
        pixels: p.upload("images", Shape::new(&[20]), &pixels).unwrap(),
        count: 5,
        image: Shape::new(&[1, 2, 2]),
    };
    let labels = p.upload("labels", Shape::new(&[5]), &[0u8, 1, 2, 3, 4]).unwrap();
    let order = p.upload("order", Shape::new(&[5]), &[4u32, 2, 0, 3, 1]).unwrap();
    let cursor = StepCursor::new(&mut p).unwrap();
    let norm = Normalize::new(0.0, 1.0);
    let at = |len| BatchAt {
        order,
        cursor,
        stride: 2,
        len,
        offset: 0,
        step: 0,
    };
    // Step 1 of a batch-2 epoch is examples order[2..4] = [0, 3]; the same
    // images gather_images returns for those indices.
    cursor.set(&mut engine, 1, 0).unwrap();
    let (x, by_index, y) = engine
        .step(|s| {
            let (x, l) = s.gather_batch(&set, labels, at(2), norm)?;
            let by_index = s.gather_images(&set, &[0, 3], norm)?;
            let (mut a, mut b, mut host) = ([0.0; 8], [0.0; 8], [0u32; 2]);
            s.read(x, &mut a)?;
            s.read(by_index, &mut b)?;
            s.backend().download(l.buf, &mut host)?;
            Ok((a, b, host))
        })
        .unwrap();
    assert_eq!(x, by_index);
    assert_eq!(y, [0, 3]);
    // A data-parallel shard: the second example of step 1 alone.
    let shard = BatchAt {
        len: 1,
        offset: 1,
        step: 0,
        ..at(1)
    };
    let label = engine
        .step(|s| {
            let (_, l) = s.gather_batch(&set, labels, shard, norm)?;
            let mut host = [0u32; 1];
            s.backend().download(l.buf, &mut host)?;
            Ok(host[0])
        })
        .unwrap();
    assert_eq!(label, 3);
    let past = BatchAt {
        len: 2,
        offset: 1,
        step: 0,
        ..at(1)
    };
    let err = engine
        .step(|s| s.gather_batch(&set, labels, past, norm).map(|_| ()))
        .unwrap_err();
    assert!(err.to_string().contains("starting at 1"), "{err}");
    // The last, shorter step; then one past the order is an error.
    cursor.set(&mut engine, 2, 0).unwrap();
    engine
        .step(|s| s.gather_batch(&set, labels, at(1), norm).map(|_| ()))
        .unwrap();
    cursor.set(&mut engine, 3, 0).unwrap();
    let err = engine
        .step(|s| s.gather_batch(&set, labels, at(1), norm).map(|_| ()))
        .unwrap_err();
    assert!(err.to_string().contains("past the data set"), "{err}");
}

/// `count` images of `[channels, rows, cols]` with distinct-looking pixels,
/// uploaded with labels `i % 10` and the identity order.
struct Fixture {
    set: ByteImages,
    labels: crate::memory::Buf<u8>,
    order: crate::memory::Buf<u32>,
    cursor: crate::ops::cursor::StepCursor,
    pixels: Vec<u8>,
}

fn fixture(engine: &mut crate::Engine, count: usize, dims: [usize; 3]) -> Fixture {
    let size = dims.iter().product::<usize>();
    let pixels: Vec<u8> = (0..count * size).map(|i| (i * 37 % 251) as u8 + 1).collect();
    let mut p = engine.persistent();
    let set = ByteImages {
        pixels: p.upload("images", Shape::new(&[pixels.len()]), &pixels).unwrap(),
        count,
        image: Shape::new(&dims),
    };
    let labels: Vec<u8> = (0..count).map(|i| (i % 10) as u8).collect();
    let order: Vec<u32> = (0..count as u32).collect();
    Fixture {
        set,
        labels: p.upload("labels", Shape::new(&[count]), &labels).unwrap(),
        order: p.upload("order", Shape::new(&[count]), &order).unwrap(),
        cursor: crate::ops::cursor::StepCursor::new(&mut p).unwrap(),
        pixels,
    }
}

fn cifar_stats() -> Normalize {
    Normalize::per_channel(&[(0.4914, 0.2470), (0.4822, 0.2435), (0.4465, 0.2616)]).unwrap()
}

/// The batch of `len` examples at the cursor's step `step` (global step
/// `global`), gathered with `augment`, read back.
fn gather(
    engine: &mut crate::Engine,
    f: &Fixture,
    (step, global): (u32, u64),
    len: usize,
    augment: Augment,
    norm: Normalize,
) -> Vec<f32> {
    f.cursor.set(engine, step, global).unwrap();
    let at = BatchAt {
        order: f.order,
        cursor: f.cursor,
        stride: len,
        len,
        offset: 0,
        step: 0,
    };
    engine
        .step(|s| {
            let (x, _) = s.gather_batch_augmented(&f.set, f.labels, at, norm, augment, 99)?;
            let mut out = vec![0.0; x.shape().numel()];
            s.read(x, &mut out)?;
            Ok(out)
        })
        .unwrap()
}

use super::{Augment, BatchAt};

#[test]
fn each_channel_is_normalised_with_its_own_statistics() {
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let f = fixture(&mut engine, 3, [3, 2, 2]);
    let stats = [(0.4914f32, 0.2470f32), (0.4822, 0.2435), (0.4465, 0.2616)];
    let norm = cifar_stats();
    let x = engine
        .step(|s| {
            let x = s.gather_images(&f.set, &[2, 0], norm)?;
            let mut out = vec![0.0; 24];
            s.read(x, &mut out)?;
            Ok(out)
        })
        .unwrap();
    for (k, &i) in [2usize, 0].iter().enumerate() {
        for c in 0..3 {
            for j in 0..4 {
                let (mean, std) = stats[c];
                let want = (f.pixels[i * 12 + c * 4 + j] as f32 / 255.0 - mean) / std;
                let got = x[k * 12 + c * 4 + j];
                assert!((got - want).abs() < 1e-5, "image {i} channel {c}: {got} vs {want}");
            }
        }
    }
    // The batch gather normalises the same way.
    let batch = gather(&mut engine, &f, (0, 0), 3, Augment::NONE, norm);
    let by_index = engine
        .step(|s| {
            let x = s.gather_images(&f.set, &[0, 1, 2], norm)?;
            let mut out = vec![0.0; 36];
            s.read(x, &mut out)?;
            Ok(out)
        })
        .unwrap();
    assert_eq!(batch, by_index);
    // Statistics for another number of channels are refused.
    let mnist = Normalize::per_channel(&[(0.1307, 0.3081)]).unwrap();
    let err = engine
        .step(|s| s.gather_images(&f.set, &[0], mnist).map(|_| ()))
        .unwrap_err();
    assert!(err.to_string().contains("3 channels"), "{err}");
    assert!(Normalize::per_channel(&[]).is_err());
    assert!(Normalize::per_channel(&[(0.0, 1.0); 5]).is_err());
}

#[test]
fn one_channel_statistics_are_the_single_mean_and_std_bit_for_bit() {
    let one = Normalize::per_channel(&[(0.1307, 0.3081)]).unwrap();
    let bits = |(a, b): (f32, f32)| (a.to_bits(), b.to_bits());
    assert_eq!(
        bits(one.scale_shift(0)),
        bits(Normalize::new(0.1307, 0.3081).scale_shift(0))
    );
    assert_eq!(
        bits(one.scale_shift(0)),
        bits((1.0 / (255.0 * 0.3081f32), 0.1307f32 / 0.3081))
    );
}

/// The augmented image by the definition: pad with `crop` zero pixels,
/// take the window at `(dy, dx)`, mirror it, normalise.
fn reference(
    src: &[u8],
    [c, h, w]: [usize; 3],
    crop: usize,
    (dy, dx, flip): (usize, usize, bool),
    norm: Normalize,
) -> Vec<f32> {
    let (ph, pw) = (h + 2 * crop, w + 2 * crop);
    let mut padded = vec![0u8; c * ph * pw];
    for ch in 0..c {
        for y in 0..h {
            for x in 0..w {
                padded[ch * ph * pw + (y + crop) * pw + x + crop] = src[ch * h * w + y * w + x];
            }
        }
    }
    let mut out = vec![0.0; c * h * w];
    for ch in 0..c {
        let (scale, shift) = norm.scale_shift(ch);
        for y in 0..h {
            for x in 0..w {
                let cropped = |x: usize| padded[ch * ph * pw + (y + dy) * pw + x + dx];
                let p = if flip { cropped(w - 1 - x) } else { cropped(x) };
                out[ch * h * w + y * w + x] = p as f32 * scale - shift;
            }
        }
    }
    out
}

#[test]
fn augmented_images_are_the_padded_crop_flipped_as_drawn() {
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let dims = [3, 5, 6];
    let size = 90;
    let f = fixture(&mut engine, 16, dims);
    let norm = cifar_stats();
    let (step, global) = (0u32, 7u64);
    for augment in [
        Augment { crop: 2, flip: true },
        Augment { crop: 2, flip: false },
        Augment { crop: 0, flip: true },
    ] {
        let x = gather(&mut engine, &f, (step, global), 16, augment, norm);
        let seed = crate::ops::cursor::step_seed(99, global);
        let mut flips = 0;
        for j in 0..16 {
            let draw = augment.draw(seed, j as u64);
            flips += usize::from(draw.2);
            let want = reference(&f.pixels[j * size..][..size], dims, augment.crop, draw, norm);
            assert_eq!(&x[j * size..][..size], &want[..], "{augment} image {j} drew {draw:?}");
        }
        if augment.flip {
            assert!((1..16).contains(&flips), "{augment}: {flips} of 16 flipped");
        }
    }
}

#[test]
fn draws_vary_by_image_and_by_step_and_repeat() {
    let augment = Augment { crop: 4, flip: true };
    let seed = |step| crate::ops::cursor::step_seed(5, step);
    let draws = |step| (0..64).map(|j| augment.draw(seed(step), j)).collect::<Vec<_>>();
    let first = draws(0);
    assert_eq!(first, draws(0));
    assert_ne!(first, draws(1));
    let distinct: std::collections::HashSet<_> = first.iter().collect();
    assert!(distinct.len() > 30, "{} distinct draws of 64", distinct.len());
    assert!(first.iter().all(|&(dy, dx, _)| dy <= 8 && dx <= 8));
    assert!(first.iter().any(|&(dy, _, _)| dy == 0) || first.iter().any(|&(dy, _, _)| dy == 8));
    // Through the op: another global step gathers other pixels, the same
    // step the same ones.
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let f = fixture(&mut engine, 8, [3, 8, 8]);
    let a = gather(&mut engine, &f, (0, 3), 8, augment, cifar_stats());
    let b = gather(&mut engine, &f, (0, 3), 8, augment, cifar_stats());
    let c = gather(&mut engine, &f, (0, 4), 8, augment, cifar_stats());
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn no_augmentation_leaves_the_batch_as_it_was() {
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let f = fixture(&mut engine, 4, [3, 4, 4]);
    let norm = cifar_stats();
    let plain = gather(&mut engine, &f, (0, 9), 4, Augment::NONE, norm);
    let by_index = engine
        .step(|s| {
            let x = s.gather_images(&f.set, &[0, 1, 2, 3], norm)?;
            let mut out = vec![0.0; 192];
            s.read(x, &mut out)?;
            Ok(out)
        })
        .unwrap();
    assert_eq!(plain, by_index);
}

#[test]
fn a_data_parallel_shard_draws_as_the_whole_batch_does() {
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let f = fixture(&mut engine, 6, [3, 4, 4]);
    let augment = Augment { crop: 2, flip: true };
    let whole = gather(&mut engine, &f, (0, 2), 6, augment, cifar_stats());
    let shard = BatchAt {
        order: f.order,
        cursor: f.cursor,
        stride: 6,
        len: 3,
        offset: 3,
        step: 0,
    };
    let second = engine
        .step(|s| {
            let (x, _) = s.gather_batch_augmented(&f.set, f.labels, shard, cifar_stats(), augment, 99)?;
            let mut out = vec![0.0; 144];
            s.read(x, &mut out)?;
            Ok(out)
        })
        .unwrap();
    assert_eq!(&whole[144..], &second[..]);
}

#[test]
fn augmentation_parses_prints_and_refuses() {
    for (text, want) in [
        ("none", Augment::NONE),
        ("crop4", Augment { crop: 4, flip: false }),
        ("flip", Augment { crop: 0, flip: true }),
        ("crop4,flip", Augment { crop: 4, flip: true }),
    ] {
        assert_eq!(text.parse::<Augment>(), Ok(want));
        assert_eq!(want.to_string(), text);
    }
    assert_eq!("flip,crop4".parse::<Augment>(), Ok(Augment { crop: 4, flip: true }));
    for bad in [
        "",
        "crop",
        "crop0",
        "crop4,crop4",
        "flip,flip",
        "rotate",
        "none,flip",
        "crop-1",
    ] {
        assert!(bad.parse::<Augment>().is_err(), "{bad}");
    }
    // A crop padding wider than the image is a shape error, not a panic.
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let f = fixture(&mut engine, 2, [1, 3, 3]);
    let at = BatchAt {
        order: f.order,
        cursor: f.cursor,
        stride: 2,
        len: 2,
        offset: 0,
        step: 0,
    };
    let wide = Augment { crop: 4, flip: false };
    let err = engine
        .step(|s| {
            s.gather_batch_augmented(&f.set, f.labels, at, Normalize::new(0.0, 1.0), wide, 1)
                .map(|_| ())
        })
        .unwrap_err();
    assert!(err.to_string().contains("crop padding"), "{err}");
}
