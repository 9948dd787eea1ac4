// A tensor of one step used in the next: the brands of two steps differ.
use bumpgrad::{Engine, Device, Shape, Tensor};

fn main() -> bumpgrad::Result<()> {
    let mut engine = Engine::new(Device::cpu(1)?, 1 << 16)?;
    let mut carried: Vec<Tensor<'_>> = Vec::new();
    for _ in 0..2 {
        engine.step(|s| {
            if let Some(old) = carried.pop() { //~ ERROR E0521
                old.relu(s)?;
            }
            carried.push(s.input("x", Shape::new(&[1]), &[1.0])?);
            Ok(())
        })?;
    }
    Ok(())
}
