//! The CPU backend's matrix product over strided views of slices.
//!
//! Every matrix product of the CPU backend over strided views goes through
//! [`matmul`], which picks the allocation-free kernel of [`super::sgemm`]
//! that fits the operands' layout. (The one other caller of the sgemm is a
//! padded convolution, whose B is a patch matrix read in place:
//! [`super::sgemm::Patches`], not a strided view.)

use super::sgemm;

/// A strided, read-only matrix over a slice: element (r, c) is
/// `data[r * row_stride + c * col_stride]`.
#[derive(Clone, Copy)]
pub struct Mat<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a> Mat<'a> {
    /// A row-major `rows × cols` matrix.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transpose, without moving data.
    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    fn fits(&self, len: usize) -> bool {
        if self.rows == 0 || self.cols == 0 {
            return true;
        }
        let last = (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride;
        last < len
    }
}

/// `dst = a · b` (or `dst += a · b` when `accumulate`), with `dst` row-major
/// `a.rows × b.cols`. Single-threaded: callers parallelise over images.
///
/// Panics if the shapes disagree or a matrix runs past its slice: both are
/// bugs in a kernel, never a consequence of user input (shapes are checked
/// when ops are recorded).
pub fn matmul(dst: &mut [f32], a: Mat<'_>, b: Mat<'_>, accumulate: bool) {
    assert_eq!(a.cols, b.rows, "matmul: inner dimensions differ");
    let (m, n, k) = (a.rows, b.cols, a.cols);
    assert!(m * n <= dst.len(), "matmul: destination too small");
    assert!(
        a.fits(a.data.len()) && b.fits(b.data.len()),
        "matmul: operand out of bounds"
    );
    if m == 0 || n == 0 {
        return;
    }
    if b.col_stride == 1 {
        sgemm::gemm_nn(
            m,
            n,
            k,
            a.data,
            a.row_stride,
            a.col_stride,
            b.data,
            b.row_stride,
            dst,
            accumulate,
        );
    } else {
        assert!(
            b.row_stride == 1 && a.col_stride == 1,
            "matmul: needs B with unit column stride, or A and Bᵀ both row-major"
        );
        sgemm::gemm_nt(m, n, k, a.data, a.row_stride, b.data, b.col_stride, dst, accumulate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: Mat<'_>, b: Mat<'_>) -> Vec<f32> {
        let mut out = vec![0.0; a.rows * b.cols];
        for r in 0..a.rows {
            for c in 0..b.cols {
                for i in 0..a.cols {
                    out[r * b.cols + c] +=
                        a.data[r * a.row_stride + i * a.col_stride] * b.data[i * b.row_stride + c * b.col_stride];
                }
            }
        }
        out
    }

    #[test]
    fn matches_naive_product_with_transposes_and_accumulation() {
        let a: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
        let b: Vec<f32> = (0..20).map(|i| (i as f32).sin()).collect();
        let (am, bm) = (Mat::rows(&a, 3, 4), Mat::rows(&b, 4, 5));
        let mut dst = vec![0.0; 15];
        matmul(&mut dst, am, bm, false);
        let want = naive(am, bm);
        for (x, y) in dst.iter().zip(&want) {
            assert!((x - y).abs() < 1e-5);
        }
        matmul(&mut dst, am, bm, true);
        for (x, y) in dst.iter().zip(&want) {
            assert!((x - 2.0 * y).abs() < 1e-4);
        }
        // aᵀ (4×3, strided) times a row-major 3×2: the strided-A path.
        let c: Vec<f32> = (0..6).map(|i| i as f32).collect();
        let (at, cm) = (am.t(), Mat::rows(&c, 3, 2));
        let mut dst2 = vec![0.0; 8];
        matmul(&mut dst2, at, cm, false);
        for (x, y) in dst2.iter().zip(naive(at, cm).iter()) {
            assert!((x - y).abs() < 1e-5);
        }
        // a (3×4) times the transpose of a row-major 2×4: the dot-product path.
        let d: Vec<f32> = (0..8).map(|i| i as f32 - 3.0).collect();
        let dt = Mat::rows(&d, 2, 4).t();
        let mut dst3 = vec![0.0; 6];
        matmul(&mut dst3, am, dt, false);
        for (x, y) in dst3.iter().zip(naive(am, dt).iter()) {
            assert!((x - y).abs() < 1e-5);
        }
    }
}
