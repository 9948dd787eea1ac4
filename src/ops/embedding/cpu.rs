use crate::backend::BackendError;
use rayon::prelude::*;

/// Row `tokens[n]` of `table` into row `n` of `out`, rows of `dim`; every
/// token checked before anything is written.
pub(super) fn forward(table: &[f32], tokens: &[u32], dim: usize, out: &mut [f32]) -> Result<(), BackendError> {
    let vocab = table.len() / dim.max(1);
    check(tokens, vocab)?;
    out.par_chunks_mut(dim.max(1))
        .zip(tokens.par_iter())
        .for_each(|(row, &t)| row.copy_from_slice(&table[t as usize * dim..][..dim]));
    Ok(())
}

/// `grad[v] = Σ gy[n]` over the tokens `n` equal to `v`, in the order of
/// `n` (the GPU's order: the same sums), added to what `grad` holds when
/// `add`. Each worker owns a band of rows and walks every token, so no two
/// workers write one row.
pub(super) fn backward(
    tokens: &[u32],
    gy: &[f32],
    dim: usize,
    grad: &mut [f32],
    add: bool,
) -> Result<(), BackendError> {
    let vocab = grad.len() / dim.max(1);
    check(tokens, vocab)?;
    let band = vocab.div_ceil(rayon::current_num_threads()).max(1);
    grad.par_chunks_mut(band * dim.max(1))
        .enumerate()
        .for_each(|(b, rows)| {
            if !add {
                rows.fill(0.0);
            }
            let first = b * band;
            for (n, &t) in tokens.iter().enumerate() {
                let Some(v) = (t as usize).checked_sub(first).filter(|&v| v < band) else {
                    continue;
                };
                let (dst, src) = (&mut rows[v * dim..][..dim], &gy[n * dim..][..dim]);
                dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
            }
        });
    Ok(())
}

/// The first token past a table of `vocab` rows, as an error.
fn check(tokens: &[u32], vocab: usize) -> Result<(), BackendError> {
    match tokens.iter().position(|&t| t as usize >= vocab) {
        Some(index) => Err(BackendError::Token {
            index,
            token: tokens[index],
            vocab,
        }),
        None => Ok(()),
    }
}
