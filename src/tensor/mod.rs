//! Tensors as handles: a shape and a [`Buf`] in the arena.
//!
//! [`Tensor<'s>`] lives in a step's region and carries the step's brand
//! `'s`, which is invariant and higher-ranked, so a step tensor cannot be
//! stored anywhere that outlives the step (see `Arena::step`). [`Param`]
//! lives in the persistent region and carries no brand: it outlives steps,
//! as does [`ByteImages`], a data set resident there (data uploads it, the
//! gather op reads it).

pub use crate::memory::{Shape, MAX_RANK};

use crate::memory::{Arena, ArenaError, Buf, Persistent};
use std::marker::PhantomData;

/// The brand: invariant in `'s`, so `Tensor<'a>` never converts to
/// `Tensor<'b>` for another step, and carries no data.
pub(crate) type Brand<'s> = PhantomData<fn(&'s ()) -> &'s ()>;

/// The unbranded core the tape stores; a [`Tensor`] adds the brand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TensorRef {
    pub id: u32,
    pub buf: Buf<f32>,
    pub shape: Shape,
    pub requires_grad: bool,
}

/// An f32 tensor made during step `'s`.
#[derive(Clone, Copy)]
pub struct Tensor<'s> {
    pub(crate) inner: TensorRef,
    pub(crate) _brand: Brand<'s>,
}

impl<'s> Tensor<'s> {
    pub(crate) fn from_ref(inner: TensorRef) -> Self {
        Self {
            inner,
            _brand: PhantomData,
        }
    }

    pub fn shape(&self) -> Shape {
        self.inner.shape
    }

    /// Whether gradients flow back through this tensor.
    pub fn requires_grad(&self) -> bool {
        self.inner.requires_grad
    }

    pub(crate) fn buf(&self) -> Buf<f32> {
        self.inner.buf
    }
}

impl std::fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor#{}{} {:?}", self.inner.id, self.inner.shape, self.inner.buf)
    }
}

/// Class labels of one batch, made during step `'s`.
#[derive(Clone, Copy, Debug)]
pub struct Labels<'s> {
    pub(crate) buf: Buf<u32>,
    pub(crate) _brand: Brand<'s>,
}

impl Labels<'_> {
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// A trainable tensor in the persistent region (a weight or a bias).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub(crate) name: &'static str,
    pub(crate) buf: Buf<f32>,
    pub(crate) shape: Shape,
}

impl Param {
    /// The name a PyTorch `state_dict` of the same model would use.
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    pub fn buf(&self) -> Buf<f32> {
        self.buf
    }
}

// Parameters are made and read through the arena's byte-level services; the
// arena itself knows no `Param`.
impl Persistent<'_> {
    /// A trainable parameter initialised to `values`.
    pub fn param(&mut self, name: &'static str, shape: Shape, values: &[f32]) -> Result<Param, ArenaError> {
        let buf = self.upload(name, shape, values)?;
        Ok(Param { name, buf, shape })
    }
}

impl Arena {
    /// Copies a parameter's values to the host (checkpoints, tests).
    pub fn read_param(&mut self, param: &Param, out: &mut [f32]) -> Result<(), ArenaError> {
        self.read_persistent(param.buf, out)
    }
}

/// Images of one shape stored as bytes in the persistent region: `count` of
/// `[channels, rows, cols]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteImages {
    pub pixels: Buf<u8>,
    pub count: usize,
    pub image: Shape,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    #[test]
    fn params_round_trip() {
        let mut arena = Arena::new(Device::cpu(1).unwrap(), 4096).unwrap();
        let p = arena
            .persistent()
            .param("fc.bias", Shape::new(&[3]), &[1.0, 2.0, 3.0])
            .unwrap();
        let mut out = [0.0; 3];
        arena.read_param(&p, &mut out).unwrap();
        assert_eq!(out, [1.0, 2.0, 3.0]);
    }
}
