use super::{ByteImages, Normalize};
use crate::tensor::Shape;

#[test]
fn gathers_and_normalises_by_index() {
    let mut arena = crate::Arena::new(crate::Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let pixels: Vec<u8> = (0..12).map(|i| i * 20).collect(); // 3 images of 1×2×2
    let mut p = arena.persistent();
    let set = ByteImages {
        pixels: p.upload("images", Shape::new(&[12]), &pixels).unwrap(),
        count: 3,
        image: Shape::new(&[1, 2, 2]),
    };
    let labels = p.upload("labels", Shape::new(&[3]), &[7u8, 8, 9]).unwrap();
    let norm = Normalize { mean: 0.5, std: 0.25 };
    let (x, y) = arena
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
    let err = arena
        .step(|s| s.gather_images(&set, &[3], norm).map(|_| ()))
        .unwrap_err();
    assert!(err.to_string().contains("index 3"), "{err}");
}

#[test]
fn gather_batch_reads_the_cursors_slice_of_the_order() {
    use super::BatchAt;
    use crate::ops::cursor::StepCursor;
    let mut arena = crate::Arena::new(crate::Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let pixels: Vec<u8> = (0..20).map(|i| i * 10).collect(); // 5 images of 1×2×2
    let mut p = arena.persistent();
    let set = ByteImages {
        pixels: p.upload("images", Shape::new(&[20]), &pixels).unwrap(),
        count: 5,
        image: Shape::new(&[1, 2, 2]),
    };
    let labels = p.upload("labels", Shape::new(&[5]), &[0u8, 1, 2, 3, 4]).unwrap();
    let order = p.upload("order", Shape::new(&[5]), &[4u32, 2, 0, 3, 1]).unwrap();
    let cursor = StepCursor::new(&mut p).unwrap();
    let norm = Normalize { mean: 0.0, std: 1.0 };
    let at = |len| BatchAt {
        order,
        cursor,
        stride: 2,
        len,
        offset: 0,
    };
    // Step 1 of a batch-2 epoch is examples order[2..4] = [0, 3]; the same
    // images gather_images returns for those indices.
    cursor.set(&mut arena, 1, 0).unwrap();
    let (x, by_index, y) = arena
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
        ..at(1)
    };
    let label = arena
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
        ..at(1)
    };
    let err = arena
        .step(|s| s.gather_batch(&set, labels, past, norm).map(|_| ()))
        .unwrap_err();
    assert!(err.to_string().contains("starting at 1"), "{err}");
    // The last, shorter step; then one past the order is an error.
    cursor.set(&mut arena, 2, 0).unwrap();
    arena
        .step(|s| s.gather_batch(&set, labels, at(1), norm).map(|_| ()))
        .unwrap();
    cursor.set(&mut arena, 3, 0).unwrap();
    let err = arena
        .step(|s| s.gather_batch(&set, labels, at(1), norm).map(|_| ()))
        .unwrap_err();
    assert!(err.to_string().contains("past the data set"), "{err}");
}
