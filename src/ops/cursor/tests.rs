use super::*;
use crate::backend::Device;
use crate::Engine;

#[test]
fn finish_step_records_losses_and_advances_the_cursor() {
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let mut p = engine.persistent();
    let cursor = StepCursor::new(&mut p).unwrap();
    let losses = p.zeros::<f32>("losses", Shape::new(&[3])).unwrap();
    cursor.set(&mut engine, 1, u32::MAX as u64).unwrap();
    for value in [2.5f32, 7.0, 9.0] {
        engine
            .step(|s| {
                let loss = s.input("loss", Shape::new(&[1]), &[value])?;
                s.finish_step(loss, losses, cursor)
            })
            .unwrap();
    }
    let mut read = [0.0; 3];
    engine.read_persistent(losses, &mut read).unwrap();
    // Slot 0 was never this epoch's; the third step ran past the slots.
    assert_eq!(read, [0.0, 2.5, 7.0]);
    // The global step carries across 32 bits.
    assert_eq!(cursor.get(&mut engine).unwrap(), (4, u32::MAX as u64 + 3));
}

#[test]
fn step_seeds_differ_by_step_and_base() {
    assert_ne!(step_seed(1, 0), step_seed(1, 1));
    assert_ne!(step_seed(1, 0), step_seed(2, 0));
    assert_eq!(step_seed(42, 7), step_seed(42, 7));
}
