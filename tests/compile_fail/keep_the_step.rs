// The step itself cannot escape either.
use bumpgrad::{Arena, Device};

fn main() -> bumpgrad::Result<()> {
    let mut arena = Arena::new(Device::cpu(1)?, 1 << 16)?;
    let mut escaped = None;
    arena.step(|s| {
        escaped = Some(s); //~ ERROR E0521
        Ok(())
    })?;
    Ok(())
}
