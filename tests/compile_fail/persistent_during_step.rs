// The persistent region grows only between steps: during one, the step
// holds the arena.
use bumpgrad::{Engine, Device, Shape};

fn main() -> bumpgrad::Result<()> {
    let mut engine = Engine::new(Device::cpu(1)?, 1 << 16)?;
    engine.step(|_s| { //~ ERROR E0499
        engine.persistent().alloc::<f32>("w", Shape::new(&[4]))?;
        Ok(())
    })?;
    Ok(())
}
