//! The vocabulary every layer shares, below all of them: typed handles to
//! ranges of an arena ([`Buf`], [`FloatBuf`]) and the element types they
//! hold ([`DType`], [`Element`]), shapes ([`Shape`]) and layouts
//! ([`Layout`]), and byte sizes ([`ByteSize`]). Plain values only: nothing
//! here allocates, runs a kernel or knows a device, so the memory layer and
//! the runtime both use it without using each other.

mod buf;
mod layout;
mod shape;
mod size;

pub use buf::{align_up, bf16, Buf, DType, Element, FloatBuf, Typed, ALIGN};
pub use layout::Layout;
pub use shape::{Shape, MAX_RANK};
pub use size::{ByteSize, SizeParseError};
