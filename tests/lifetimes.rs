//! The borrow checker enforces the arena's promise: a step tensor cannot be
//! kept past its reset, and the persistent region cannot be touched while a
//! step runs. Each file under `compile_fail/` must be refused by rustc.

#[test]
fn step_tensors_cannot_outlive_their_step() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
    t.pass("tests/compile_pass/*.rs");
}
