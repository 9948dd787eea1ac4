// A tensor returned from the step would point into memory the reset reuses.
use bumpgrad::{Arena, Device, Shape};

fn main() -> bumpgrad::Result<()> {
    let mut arena = Arena::new(Device::cpu(1)?, 1 << 16)?;
    let kept = arena.step(|s| s.input("x", Shape::new(&[1]), &[1.0]))?; //~ ERROR lifetime may not live long enough
    println!("{kept:?}");
    Ok(())
}
