//! A safe, bounds-checked front for the `gemm` crate's strided matrix product.
//!
//! Every matrix product of the CPU backend goes through [`matmul`]; it checks
//! that each strided matrix lies inside its slice, which is what makes the one
//! `unsafe` call below sound.

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
/// `a.rows × b.cols`. `threads > 1` lets gemm split the work on the current
/// rayon pool; kernels that already run one product per thread pass 1.
///
/// Panics if the shapes disagree or a matrix runs past its slice: both are
/// bugs in a kernel, never a consequence of user input (shapes are checked
/// when ops are recorded).
pub fn matmul(dst: &mut [f32], a: Mat<'_>, b: Mat<'_>, accumulate: bool, threads: usize) {
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
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: every index gemm touches is (r, c) with r < rows and c < cols
    // of its matrix; `fits` checked that the largest such offset is inside
    // each slice, and `dst` holds m·n row-major elements. `dst` is a `&mut`
    // and so does not alias `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.data.as_ptr(),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr(),
            b.col_stride as isize,
            b.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
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
        matmul(&mut dst, am, bm, false, 1);
        let want = naive(am, bm);
        for (x, y) in dst.iter().zip(&want) {
            assert!((x - y).abs() < 1e-5);
        }
        matmul(&mut dst, am, bm, true, 2);
        for (x, y) in dst.iter().zip(&want) {
            assert!((x - 2.0 * y).abs() < 1e-4);
        }
        // aᵀ is 4×3: multiply by a 3×2 matrix read transposed from 2×3 data.
        let c: Vec<f32> = (0..6).map(|i| i as f32).collect();
        let (at, ct) = (am.t(), Mat::rows(&c, 2, 3).t());
        let mut dst2 = vec![0.0; 8];
        matmul(&mut dst2, at, ct, false, 1);
        for (x, y) in dst2.iter().zip(naive(at, ct).iter()) {
            assert!((x - y).abs() < 1e-5);
        }
    }
}
