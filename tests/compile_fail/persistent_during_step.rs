// The persistent region grows only between steps: during one, the step
// holds the arena.
use bumpgrad::{Arena, Device, Shape};

fn main() -> bumpgrad::Result<()> {
    let mut arena = Arena::new(Device::cpu(1)?, 1 << 16)?;
    arena.step(|_s| { //~ ERROR E0499
        arena.persistent().alloc::<f32>("w", Shape::new(&[4]))?;
        Ok(())
    })?;
    Ok(())
}
