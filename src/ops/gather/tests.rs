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
