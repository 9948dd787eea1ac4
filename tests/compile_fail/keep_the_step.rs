// The step itself cannot escape either.
use bumpgrad::{Engine, Device};

fn main() -> bumpgrad::Result<()> {
    let mut engine = Engine::new(Device::cpu(1)?, 1 << 16)?;
    let mut escaped = None;
    engine.step(|s| {
        escaped = Some(s); //~ ERROR E0521
        Ok(())
    })?;
    Ok(())
}
