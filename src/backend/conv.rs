//! A convolution's geometry, one type for every device: the op checks a
//! convolution's shapes once and makes one ([`ConvDims::new`]); the CPU
//! kernels loop over it, and cuDNN describes and plans by it (a plan per
//! distinct value, so stride and padding are part of the cache key).

use crate::base::DType;
use std::fmt;

/// A convolution's sizes: input `[n, c, h, w]`, filters `[f, c, kh, kw]`,
/// the same stride and zero padding in both directions, and the output's
/// rows and columns they make.
#[derive(Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ConvDims {
    /// Images in the batch.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Input rows.
    pub h: usize,
    /// Input columns.
    pub w: usize,
    /// Filters: output channels.
    pub f: usize,
    /// Filter rows.
    pub kh: usize,
    /// Filter columns.
    pub kw: usize,
    /// The step between output positions, in both directions.
    pub stride: usize,
    /// Zeros added on every side.
    pub padding: usize,
    /// The type of input, filters and output (the sums are fp32 in both).
    pub dtype: DType,
    /// Input, filters and output channels last (NHWC, filters KRSC), as a
    /// TF32 or bf16 step keeps them; else NCHW (filters KCRS).
    pub nhwc: bool,
    /// Output rows and columns, made by `new` from the sizes above (kept,
    /// as the CPU kernels read them in their inner loops).
    #[serde(skip)]
    oh: usize,
    #[serde(skip)]
    ow: usize,
}

impl ConvDims {
    /// The geometry of input `[n, c, h, w]` and filters `[f, kh, kw]` (over
    /// the input's `c` channels). Output sizes are PyTorch's,
    /// `(h + 2·padding − kh) / stride + 1`; zero where the kernel does not
    /// fit the padded input (no output position) or the stride is 0.
    pub fn new(
        [n, c, h, w]: [usize; 4],
        [f, kh, kw]: [usize; 3],
        stride: usize,
        padding: usize,
        dtype: DType,
        nhwc: bool,
    ) -> Self {
        let len = |d: usize, k: usize| match (d + 2 * padding).checked_sub(k) {
            Some(room) if stride > 0 => room / stride + 1,
            _ => 0,
        };
        Self {
            n,
            c,
            h,
            w,
            f,
            kh,
            kw,
            stride,
            padding,
            dtype,
            nhwc,
            oh: len(h, kh),
            ow: len(w, kw),
        }
    }

    /// Output rows.
    #[inline]
    pub fn oh(&self) -> usize {
        self.oh
    }

    /// Output columns.
    #[inline]
    pub fn ow(&self) -> usize {
        self.ow
    }

    /// Output rows and columns.
    pub fn output_hw(&self) -> (usize, usize) {
        (self.oh, self.ow)
    }

    /// Rows of the patch matrix: one per filter weight.
    #[inline]
    pub fn k(&self) -> usize {
        self.c * self.kh * self.kw
    }

    /// Columns of the patch matrix: one per output pixel.
    #[inline]
    pub fn p(&self) -> usize {
        self.oh * self.ow
    }

    /// Elements of the input, `n·c·h·w`.
    pub fn input_len(&self) -> usize {
        self.n * self.c * self.h * self.w
    }

    /// Elements of the filters, `f·c·kh·kw`.
    pub fn filter_len(&self) -> usize {
        self.f * self.c * self.kh * self.kw
    }

    /// Elements of the output, `n·f·oh·ow`.
    pub fn output_len(&self) -> usize {
        self.n * self.f * self.p()
    }
}

/// The sizes, as given to `new` (the output's follow from them).
impl fmt::Debug for ConvDims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConvDims")
            .field("n", &self.n)
            .field("c", &self.c)
            .field("h", &self.h)
            .field("w", &self.w)
            .field("f", &self.f)
            .field("kh", &self.kh)
            .field("kw", &self.kw)
            .field("stride", &self.stride)
            .field("padding", &self.padding)
            .field("dtype", &self.dtype)
            .field("nhwc", &self.nhwc)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::ConvDims;
    use crate::base::DType;

    #[test]
    fn a_kernel_larger_than_its_input_has_no_output() {
        let dims = |kh, kw| ConvDims::new([2, 1, 4, 5], [3, kh, kw], 1, 0, DType::F32, false);
        assert_eq!(dims(5, 5).output_len(), 0);
        assert_eq!(dims(4, 6).output_len(), 0);
        assert_eq!(dims(9, 3).output_len(), 0);
        assert_eq!(dims(3, 11).output_len(), 0);
        assert_eq!(dims(4, 5).output_len(), 2 * 3);
        assert_eq!(dims(3, 3).output_len(), 2 * 3 * 2 * 3);
    }

    #[test]
    fn output_sizes_follow_pytorch_with_stride_and_padding() {
        let dims =
            |kh, kw, stride, padding| ConvDims::new([2, 1, 7, 8], [3, kh, kw], stride, padding, DType::F32, false);
        assert_eq!(dims(3, 3, 1, 1).output_hw(), (7, 8));
        assert_eq!(dims(3, 3, 2, 1).output_hw(), (4, 4));
        assert_eq!(dims(1, 1, 2, 0).output_hw(), (4, 4));
        assert_eq!(dims(7, 7, 2, 3).output_hw(), (4, 4));
        assert_eq!(dims(9, 10, 1, 1).output_hw(), (1, 1));
        assert_eq!(dims(10, 3, 1, 1).output_len(), 0);
        assert_eq!(dims(3, 3, 0, 1).output_len(), 0);
        assert_eq!(dims(3, 3, 2, 1).output_len(), 2 * 3 * 4 * 4);
    }

    /// What the run's report says of a convolution (its JSON and the
    /// message naming one) is its sizes as before the output's were kept.
    #[test]
    fn the_kept_output_sizes_are_not_reported() {
        let d = ConvDims::new([2, 1, 7, 8], [3, 3, 3], 2, 1, DType::F32, false);
        let json = serde_json::to_value(d).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["c", "dtype", "f", "h", "kh", "kw", "n", "nhwc", "padding", "stride", "w"]
        );
        assert!(!format!("{d:?}").contains("oh"), "{d:?}");
    }
}
