use super::TokenWindows;
use crate::memory::Buf;
use crate::ops::cursor::StepCursor;
use crate::tensor::Shape;
use crate::Engine;

fn ids(
    engine: &mut Engine,
    split: TokenWindows,
    which: impl Fn(&mut crate::Step<'_>) -> crate::Result<Buf<u32>>,
) -> crate::Result<(Vec<u32>, Vec<u32>)> {
    let n = split.streams * split.steps;
    engine.step(|s| {
        let at = which(s)?;
        let (x, y) = s.gather_window(split, at)?;
        let (mut a, mut b) = (vec![0u32; n], vec![0u32; n]);
        s.backend().download(x.buf, &mut a)?;
        s.backend().download(y.buf, &mut b)?;
        Ok((a, b))
    })
}

#[test]
fn gathers_the_hosts_windows_time_major_at_the_cursor_and_at_an_index() {
    // 101 tokens, 3 streams, windows of 4: ⌊100 / 3 / 4⌋ = 8 windows.
    let tokens: Vec<u32> = (0..101).map(|i| (i * 7 % 13) as u32).collect();
    let count = 8;
    let mut engine = Engine::new(crate::Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let mut p = engine.persistent();
    let split = TokenWindows {
        tokens: p.upload("tokens", Shape::new(&[tokens.len()]), &tokens).unwrap(),
        streams: 3,
        steps: 4,
        count,
    };
    let cursor = StepCursor::new(&mut p).unwrap();
    for k in 0..count {
        // Stream b's window k starts at (b·W + k)·T: data::text::Windows'
        // layout, here time-major (element t·B + b).
        let at = |i: usize| (i % 3 * count + k) * 4 + i / 3;
        let want: (Vec<u32>, Vec<u32>) = (0..12).map(|i| (tokens[at(i)], tokens[at(i) + 1])).unzip();
        cursor.set(&mut engine, k as u32, 0).unwrap();
        assert_eq!(
            ids(&mut engine, split, |_| Ok(cursor.buf)).unwrap(),
            want,
            "window {k} at the cursor"
        );
        assert_eq!(
            ids(&mut engine, split, |s| s.window_index(k)).unwrap(),
            want,
            "window {k} by index"
        );
    }
    let past = ids(&mut engine, split, |s| s.window_index(count)).unwrap_err();
    assert!(past.to_string().contains(&format!("{count}")), "{past}");
    let short = TokenWindows {
        count: count + 1,
        ..split
    };
    let err = ids(&mut engine, short, |s| s.window_index(0)).unwrap_err();
    assert!(err.to_string().contains("split of at least"), "{err}");
}

#[test]
fn a_state_carried_out_comes_back_in_without_a_gradient() {
    let mut engine = Engine::new(crate::Device::cpu(2).unwrap(), 1 << 16).unwrap();
    let state = engine.persistent().zeros::<f32>("state", Shape::new(&[6])).unwrap();
    let shape = Shape::new(&[2, 3]);
    engine
        .step(|s| {
            let x = s.variable("x", shape, &[1.0, -2.0, 3.0, 4.5, 5.0, 0.25])?;
            x.carry_out(s, state)
        })
        .unwrap();
    let back = engine
        .step(|s| {
            let y = s.carried_in(state, shape)?;
            assert!(!y.requires_grad());
            let mut out = vec![0.0; 6];
            s.read(y, &mut out)?;
            assert!(s.carried_in(state, Shape::new(&[3, 3])).is_err());
            assert!(y.carry_out(s, state.slice(0, 5).unwrap()).is_err());
            Ok(out)
        })
        .unwrap();
    assert_eq!(back, [1.0, -2.0, 3.0, 4.5, 5.0, 0.25]);
}
