//! Typed handles to ranges of an arena.
//!
//! A [`Buf<T>`] is an offset and an element count, nothing more: it does not
//! borrow the arena, so the same handle means the same bytes on the CPU and on
//! a GPU. Whether a handle may still be used is decided by the lifetime of the
//! tensor that carries it, never by the handle itself.

pub use half::bf16;
use std::marker::PhantomData;

/// Every allocation starts on this boundary, as cudaMalloc guarantees, so any
/// kernel or library (vector loads, cuDNN, cuBLAS) can use any buffer.
pub const ALIGN: usize = 256;

/// Rounds `bytes` up to the arena's alignment.
pub const fn align_up(bytes: usize) -> usize {
    bytes.div_ceil(ALIGN) * ALIGN
}

/// The element types an arena holds. Every bit pattern of each is a valid
/// value, which is what lets the backend hand out views of zeroed memory.
pub trait Element: Copy + Send + Sync + Default + 'static {
    /// Size of one element in bytes.
    const SIZE: usize = std::mem::size_of::<Self>();
    /// Name used in reports and errors.
    const NAME: &'static str;
    /// The value's bits, widened to 32 (how a GPU memset writes it).
    fn bit_pattern(self) -> u32;
}

impl Element for f32 {
    const NAME: &'static str = "f32";
    fn bit_pattern(self) -> u32 {
        self.to_bits()
    }
}
impl Element for u32 {
    const NAME: &'static str = "u32";
    fn bit_pattern(self) -> u32 {
        self
    }
}
impl Element for u8 {
    const NAME: &'static str = "u8";
    fn bit_pattern(self) -> u32 {
        self as u32
    }
}
impl Element for bf16 {
    const NAME: &'static str = "bf16";
    fn bit_pattern(self) -> u32 {
        self.to_bits() as u32
    }
}

/// The float types a tensor holds: fp32, and bf16 for the activations and
/// gradients of a mixed-precision step (its values are fp32's top 16 bits,
/// rounded to nearest even, so a conversion is a shift one way and one
/// rounding the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit IEEE floats: parameters, optimizer state, and every tensor of an
    /// fp32 step.
    #[default]
    F32,
    /// bfloat16: fp32's top 16 bits, for a mixed-precision step's activations
    /// and gradients.
    Bf16,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::Bf16 => 2,
        }
    }

    /// The name reports print: the element's ([`Element::NAME`]).
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => f32::NAME,
            Self::Bf16 => bf16::NAME,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A buffer of one of the float types: what a tensor's values are, which
/// type being decided by the op that made them (see [`DType`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatBuf {
    /// fp32 values.
    F32(Buf<f32>),
    /// bf16 values.
    Bf16(Buf<bf16>),
}

impl Default for FloatBuf {
    fn default() -> Self {
        Self::F32(Buf::default())
    }
}

impl From<Buf<f32>> for FloatBuf {
    fn from(b: Buf<f32>) -> Self {
        Self::F32(b)
    }
}
impl From<Buf<bf16>> for FloatBuf {
    fn from(b: Buf<bf16>) -> Self {
        Self::Bf16(b)
    }
}

impl FloatBuf {
    /// The type it holds.
    pub const fn dtype(&self) -> DType {
        match self {
            Self::F32(_) => DType::F32,
            Self::Bf16(_) => DType::Bf16,
        }
    }

    /// Bytes from the arena's start.
    pub const fn offset(&self) -> usize {
        match self {
            Self::F32(b) => b.offset(),
            Self::Bf16(b) => b.offset(),
        }
    }

    /// Number of elements.
    pub const fn len(&self) -> usize {
        match self {
            Self::F32(b) => b.len(),
            Self::Bf16(b) => b.len(),
        }
    }

    /// Whether it holds no element.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes covered, without alignment padding.
    pub const fn bytes(&self) -> usize {
        self.len() * self.dtype().size()
    }

    /// The fp32 buffer, if that is what it holds.
    pub const fn f32(&self) -> Option<Buf<f32>> {
        match self {
            Self::F32(b) => Some(*b),
            Self::Bf16(_) => None,
        }
    }

    /// The same bytes seen as `count` elements starting `first` elements in.
    pub fn slice(&self, first: usize, count: usize) -> Option<Self> {
        match self {
            Self::F32(b) => b.slice(first, count).map(Self::F32),
            Self::Bf16(b) => b.slice(first, count).map(Self::Bf16),
        }
    }
}

/// A handle a kernel of element type `T` can take: a `Buf<T>` always, a
/// [`FloatBuf`] when it holds `T` (a kernel handed the other float type
/// gets `None`, which its backend reports rather than misreading bytes).
pub trait Typed<T> {
    /// The buffer as a `Buf<T>`, or `None` if it holds another type.
    fn typed(self) -> Option<Buf<T>>;
}
impl<T> Typed<T> for Buf<T> {
    fn typed(self) -> Option<Buf<T>> {
        Some(self)
    }
}
impl Typed<f32> for FloatBuf {
    fn typed(self) -> Option<Buf<f32>> {
        self.f32()
    }
}
impl Typed<bf16> for FloatBuf {
    fn typed(self) -> Option<Buf<bf16>> {
        match self {
            Self::Bf16(b) => Some(b),
            Self::F32(_) => None,
        }
    }
}

/// `len` elements of `T` starting `offset` bytes into an arena.
pub struct Buf<T> {
    offset: usize,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

impl<T> Clone for Buf<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Buf<T> {}
/// The empty buffer at offset 0 (a filler for fixed-size tables).
impl<T> Default for Buf<T> {
    fn default() -> Self {
        Self {
            offset: 0,
            len: 0,
            _element: PhantomData,
        }
    }
}
impl<T> PartialEq for Buf<T> {
    fn eq(&self, other: &Self) -> bool {
        self.offset == other.offset && self.len == other.len
    }
}
impl<T> Eq for Buf<T> {}
impl<T: Element> std::fmt::Debug for Buf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buf<{}>[{}+{}]", T::NAME, self.offset, self.len)
    }
}

impl<T: Element> Buf<T> {
    pub(crate) const fn new(offset: usize, len: usize) -> Self {
        Self {
            offset,
            len,
            _element: PhantomData,
        }
    }

    /// Byte offset from the start of the arena.
    pub const fn offset(&self) -> usize {
        self.offset
    }

    /// Number of elements.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes covered, without alignment padding.
    pub const fn bytes(&self) -> usize {
        self.len * T::SIZE
    }

    /// The byte range covered, for overlap checks.
    pub const fn byte_range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len * T::SIZE
    }

    /// The same bytes seen as `count` elements starting `first` elements in.
    /// Used by kernels that address one image or one row of a batch.
    pub fn slice(&self, first: usize, count: usize) -> Option<Self> {
        (first.checked_add(count)? <= self.len).then(|| Self::new(self.offset + first * T::SIZE, count))
    }
}
