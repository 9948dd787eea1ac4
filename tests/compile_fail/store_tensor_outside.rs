// Smuggling a step tensor into a variable that outlives the step.
use bumpgrad::{Arena, Device, Shape, Tensor};

fn main() -> bumpgrad::Result<()> {
    let mut arena = Arena::new(Device::cpu(1)?, 1 << 16)?;
    let mut kept: Option<Tensor<'_>> = None;
    arena.step(|s| {
        kept = Some(s.input("x", Shape::new(&[1]), &[1.0])?); //~ ERROR E0521
        Ok(())
    })?;
    println!("{kept:?}");
    Ok(())
}
