use super::SentenceRows;
use crate::memory::Buf;
use crate::ops::cursor::StepCursor;
use crate::tensor::Shape;
use crate::Engine;

/// What a gather made: ids, classes, last rows, weights.
type Gathered = (Vec<u32>, Vec<u32>, Vec<u32>, Vec<f32>);

fn gather(
    engine: &mut Engine,
    rows: SentenceRows,
    order: Buf<u32>,
    batch: usize,
    which: impl Fn(&mut crate::Step<'_>) -> crate::Result<Buf<u32>>,
) -> crate::Result<Gathered> {
    engine.step(|s| {
        let at = which(s)?;
        let weights = s.alloc::<f32>("weights", Shape::new(&[batch]))?;
        let got = s.gather_sentences(rows, order, batch, at, weights)?;
        let mut out = (
            vec![0; rows.steps * batch],
            vec![0; batch],
            vec![0; batch],
            vec![0.0; batch],
        );
        s.backend().download(got.ids.buf, &mut out.0)?;
        s.backend().download(got.labels.buf, &mut out.1)?;
        s.backend().download(got.last.buf, &mut out.2)?;
        s.backend().download(weights, &mut out.3)?;
        Ok(out)
    })
}

#[test]
fn gathers_a_batch_of_the_order_time_major_with_ends_and_weights() {
    // A bucket of length 3: rows of lengths 3, 1, 2 and a padding row.
    let tokens = [5, 6, 7, 8, 0, 0, 9, 10, 0, 0, 0, 0];
    let (lengths, labels) = ([3u32, 1, 2, 0], [4u32, 0, 2, 0]);
    let mut engine = Engine::new(crate::Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let mut p = engine.persistent();
    let rows = SentenceRows {
        tokens: p.upload("tokens", Shape::new(&[12]), &tokens).unwrap(),
        lengths: p.upload("lengths", Shape::new(&[4]), &lengths).unwrap(),
        labels: p.upload("labels", Shape::new(&[4]), &labels).unwrap(),
        steps: 3,
    };
    // Batch 0: rows 2, 0; batch 1: row 1 and the padding row.
    let order = p.upload("order", Shape::new(&[4]), &[2u32, 0, 1, 3]).unwrap();
    let cursor = StepCursor::new(&mut p).unwrap();
    let first = (vec![9, 5, 10, 6, 0, 7], vec![2, 4], vec![2, 5], vec![1.0, 1.0]);
    let second = (vec![8, 0, 0, 0, 0, 0], vec![0, 0], vec![0, 1], vec![2.0, 0.0]);
    for (k, want) in [(0, &first), (1, &second)] {
        cursor.set(&mut engine, k as u32, 0).unwrap();
        assert_eq!(
            &gather(&mut engine, rows, order, 2, |_| Ok(cursor.buf)).unwrap(),
            want,
            "batch {k} at the cursor"
        );
        assert_eq!(
            &gather(&mut engine, rows, order, 2, |s| s.batch_index(k)).unwrap(),
            want,
            "batch {k} by index"
        );
    }
    let past = gather(&mut engine, rows, order, 2, |s| s.batch_index(2)).unwrap_err();
    assert!(past.to_string().contains("index 2"), "{past}");
    let bad_order = engine
        .persistent()
        .upload("bad order", Shape::new(&[2]), &[0u32, 4])
        .unwrap();
    let err = gather(&mut engine, rows, bad_order, 2, |s| s.batch_index(0)).unwrap_err();
    assert!(err.to_string().contains("index 4"), "{err}");
    let short = SentenceRows { steps: 4, ..rows };
    assert!(gather(&mut engine, short, order, 2, |s| s.batch_index(0)).is_err());
}
