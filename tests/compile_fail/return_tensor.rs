// A tensor returned from the step would point into memory the reset reuses.
use bumpgrad::{Engine, Device, Shape};

fn main() -> bumpgrad::Result<()> {
    let mut engine = Engine::new(Device::cpu(1)?, 1 << 16)?;
    let kept = engine.step(|s| s.input("x", Shape::new(&[1]), &[1.0]))?; //~ ERROR lifetime may not live long enough
    println!("{kept:?}");
    Ok(())
}
