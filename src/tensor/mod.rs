//! Tensors as handles: a shape and a [`Buf`] in the arena.
//!
//! [`Tensor<'s>`] lives in a step's region and carries the step's brand
//! `'s`, which is invariant and higher-ranked, so a step tensor cannot be
//! stored anywhere that outlives the step (see `Engine::step`). [`Param`]
//! lives in the persistent region and carries no brand: it outlives steps,
//! as does [`ByteImages`], a data set resident there (data uploads it, the
//! gather op reads it). The persistent region is filled through
//! [`Persistent`], the one place a handle is made with its first values.

mod persistent;

pub use crate::base::{Layout, Shape, MAX_RANK};
pub use persistent::Persistent;

use crate::base::{Buf, DType, FloatBuf};
use std::marker::PhantomData;

/// The brand: invariant in `'s`, so `Tensor<'a>` never converts to
/// `Tensor<'b>` for another step, and carries no data.
pub(crate) type Brand<'s> = PhantomData<fn(&'s ()) -> &'s ()>;

/// The unbranded core the tape stores; a [`Tensor`] adds the brand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TensorRef {
    pub id: u32,
    pub buf: FloatBuf,
    pub shape: Shape,
    pub requires_grad: bool,
    pub layout: Layout,
}

/// A tensor made during step `'s`: fp32, or bf16 in a mixed-precision step.
#[derive(Clone, Copy)]
pub struct Tensor<'s> {
    pub(crate) inner: TensorRef,
    pub(crate) _brand: Brand<'s>,
}

impl TensorRef {
    pub fn dtype(&self) -> DType {
        self.buf.dtype()
    }
}

impl<'s> Tensor<'s> {
    pub(crate) fn from_ref(inner: TensorRef) -> Self {
        Self {
            inner,
            _brand: PhantomData,
        }
    }

    /// Its shape.
    pub fn shape(&self) -> Shape {
        self.inner.shape
    }

    /// Whether gradients flow back through this tensor.
    pub fn requires_grad(&self) -> bool {
        self.inner.requires_grad
    }

    /// Its element type.
    pub fn dtype(&self) -> DType {
        self.inner.buf.dtype()
    }

    /// How its elements lie in memory.
    pub fn layout(&self) -> Layout {
        self.inner.layout
    }

    pub(crate) fn buf(&self) -> FloatBuf {
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
    /// How many labels.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// A tensor of a model in the persistent region (a weight, a bias, or a
/// non-trainable buffer), as a [`crate::nn::ParamStore`] hands it out: its
/// values, and the slot of the gradient slab backward writes its gradient
/// into. Its name is the store's ([`crate::nn::ParamStore::name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    /// The entry's position in its store.
    pub(crate) index: u32,
    pub(crate) buf: Buf<f32>,
    /// Empty for a buffer, which gets no gradient.
    pub(crate) grad: Buf<f32>,
    pub(crate) shape: Shape,
}

impl Param {
    /// Its shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Where its values are.
    pub fn buf(&self) -> Buf<f32> {
        self.buf
    }

    /// Where backward writes its gradient.
    pub fn grad(&self) -> Buf<f32> {
        self.grad
    }
}

/// Images of one shape stored as bytes in the persistent region: `count` of
/// `[channels, rows, cols]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteImages {
    /// The pixel values, image after image.
    pub pixels: Buf<u8>,
    /// How many images.
    pub count: usize,
    /// One image's shape: `[channels, rows, cols]`.
    pub image: Shape,
}
