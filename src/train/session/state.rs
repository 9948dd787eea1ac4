//! What a checkpoint holds of a session, read out, written back, resumed.

use super::Session;
use crate::checkpoint::{optimizer_state_name, Checkpoint, NamedTensor};
use crate::memory::Buf;
use crate::tensor::Shape;
use crate::train::checkpoints::{self, CheckpointPolicy, Position};
use crate::{Error, Result};
use std::path::PathBuf;

impl Session {
    /// Every tensor a checkpoint holds, each with its persistent buffer:
    /// the model's parameters and buffers by their `state_dict` names, then
    /// the optimizer's state per parameter (`optimizer.<name>.<state>`).
    fn checkpointed(&self) -> Vec<(String, Shape, Buf<f32>)> {
        let mut out = Vec::new();
        self.store
            .visit(&mut |entry, param| out.push((entry.name.clone(), entry.shape, param.buf())));
        for (state, slab) in self.optimizer.state() {
            for param in self.store.params() {
                if let Some(slot) = self.store.slot_in(slab, &param) {
                    out.push((
                        optimizer_state_name(self.store.name(&param), state),
                        param.shape(),
                        slot,
                    ));
                }
            }
        }
        out
    }

    /// The model's tensors and the optimizer's state, read from the arena
    /// and named as PyTorch's `state_dict`s name them.
    pub fn state_tensors(&mut self) -> Result<Vec<NamedTensor>> {
        let mut out = Vec::new();
        for (name, shape, buf) in self.checkpointed() {
            let mut values = vec![0.0; shape.numel()];
            self.engine.read_persistent(buf, &mut values)?;
            out.push(NamedTensor::new(name, shape.dims(), values));
        }
        Ok(out)
    }

    /// Writes a checkpoint of the session at `at`.
    pub fn save(&mut self, policy: &CheckpointPolicy, at: Position, config_json: &str) -> Result<PathBuf> {
        let tensors = self.state_tensors()?;
        let ckpt = checkpoints::make(
            tensors,
            at,
            self.steps_done,
            self.seed,
            config_json.to_string(),
            &self.fingerprint,
        );
        checkpoints::write(policy, &ckpt)
    }

    /// Loads a checkpoint's parameters, momentum and step count; returns
    /// where its run stood. Every tensor is checked before any is written,
    /// so a refused checkpoint leaves the session as it was.
    pub fn resume(&mut self, ckpt: &Checkpoint) -> Result<Position> {
        let at = checkpoints::position(ckpt, self.seed, &self.fingerprint)?;
        self.load_state(&ckpt.tensors, ckpt.step)?;
        Ok(at)
    }

    /// Writes the model's parameters and buffers from `tensors` (named as
    /// [`Session::state_tensors`] names them), leaving the optimizer's
    /// state as it is: what evaluating a checkpoint needs, whatever
    /// optimizer wrote it. Checks every tensor before it writes any.
    pub fn load_model(&mut self, tensors: &[NamedTensor]) -> Result<()> {
        let mut writes = Vec::new();
        self.store
            .visit(&mut |entry, param| writes.push((entry.name.clone(), entry.shape, param.buf())));
        let mut found = Vec::with_capacity(writes.len());
        for (name, shape, buf) in writes {
            match tensors.iter().find(|t| t.name == name) {
                Some(t) if t.shape == shape.dims() => found.push((buf, t)),
                Some(t) => {
                    return Err(Error::Config(format!(
                    "the checkpoint's {name} is {:?}, the model's is {shape}: it was written by another model or width",
                    t.shape
                )))
                }
                None => {
                    return Err(Error::Config(format!(
                        "the checkpoint has no {name}: it was written by another model"
                    )))
                }
            }
        }
        for (buf, t) in found {
            self.engine.write_persistent(buf, &t.values)?;
        }
        Ok(())
    }

    /// Writes `tensors` (named as [`Session::state_tensors`] names them:
    /// every one the session holds must be there, in its shape) into the
    /// parameters, buffers and optimizer state, and counts `steps_done`
    /// steps as run (the learning rate and dropout of the next step follow
    /// from it). Checks every tensor before it writes any.
    pub fn load_state(&mut self, tensors: &[NamedTensor], steps_done: u64) -> Result<()> {
        let find = |name: &str| tensors.iter().find(|t| t.name == name);
        let writes = self.checkpointed();
        for (name, shape, _) in &writes {
            match find(name) {
                Some(t) if t.shape == shape.dims() => {}
                Some(t) => {
                    return Err(Error::Config(format!(
                        "cannot resume: the checkpoint's {name} is {:?}, the model's is {shape}",
                        t.shape
                    )))
                }
                None => return Err(Error::Config(format!("cannot resume: the checkpoint has no {name}"))),
            }
        }
        for (name, _, buf) in &writes {
            if let Some(t) = find(name) {
                self.engine.write_persistent(*buf, &t.values)?;
            }
        }
        self.steps_done = steps_done;
        Ok(())
    }
}
