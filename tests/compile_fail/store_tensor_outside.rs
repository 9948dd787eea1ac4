// Smuggling a step tensor into a variable that outlives the step.
use bumpgrad::{Engine, Device, Shape, Tensor};

fn main() -> bumpgrad::Result<()> {
    let mut engine = Engine::new(Device::cpu(1)?, 1 << 16)?;
    let mut kept: Option<Tensor<'_>> = None;
    engine.step(|s| {
        kept = Some(s.input("x", Shape::new(&[1]), &[1.0])?); //~ ERROR E0521
        Ok(())
    })?;
    println!("{kept:?}");
    Ok(())
}
