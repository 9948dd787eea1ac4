//! Shapes of up to four dimensions, stored inline so that making a tensor
//! never touches the heap.

use std::fmt;

/// The most dimensions a tensor has: a batch of images.
pub const MAX_RANK: usize = 4;

/// A tensor's dimensions, outermost first (`[N, C, H, W]` for images), held
/// inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    dims: [usize; MAX_RANK],
    rank: u8,
}

impl Shape {
    /// Panics if more than four dimensions are given: shapes are written in
    /// code, not read from input.
    pub const fn new(dims: &[usize]) -> Self {
        assert!(dims.len() <= MAX_RANK, "bumpgrad tensors have at most 4 dimensions");
        let mut out = [1; MAX_RANK];
        let mut i = 0;
        while i < dims.len() {
            out[i] = dims[i];
            i += 1;
        }
        Self {
            dims: out,
            rank: dims.len() as u8,
        }
    }

    /// The dimensions, outermost first.
    pub fn dims(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }

    /// How many dimensions.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.dims().iter().product()
    }

    /// Dimension `i`, counted from the front.
    pub fn dim(&self, i: usize) -> usize {
        self.dims()[i]
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.dims().iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl serde::Serialize for Shape {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.dims().serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_prints() {
        let s = Shape::new(&[100, 1, 28, 28]);
        assert_eq!(s.numel(), 78_400);
        assert_eq!(s.rank(), 4);
        assert_eq!(s.to_string(), "[100, 1, 28, 28]");
        assert_eq!(Shape::new(&[]).numel(), 1);
    }
}
