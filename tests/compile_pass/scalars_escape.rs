// What may leave a step: plain values (a loss), never tensors.
use bumpgrad::{Engine, Device, Shape};

fn main() -> bumpgrad::Result<()> {
    let mut engine = Engine::new(Device::cpu(1)?, 1 << 16)?;
    let loss: f32 = engine.step(|s| {
        let x = s.input("x", Shape::new(&[1]), &[3.0])?;
        let y = x.relu(s)?;
        s.scalar(y)
    })?;
    assert_eq!(loss, 3.0);
    Ok(())
}
