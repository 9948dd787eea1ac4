use crate::backend::BackendError;
use rayon::prelude::*;

/// Column `tokens[n]` of `w` `[R, V]` plus `bias` into row `n` of `out`
/// `[N, R]`; every token checked before anything is written.
pub(super) fn forward(w: &[f32], bias: &[f32], tokens: &[u32], out: &mut [f32]) -> Result<(), BackendError> {
    let rows = bias.len().max(1);
    let vocab = w.len() / rows;
    check(tokens, vocab)?;
    out.par_chunks_mut(rows).zip(tokens.par_iter()).for_each(|(y, &t)| {
        let column = w[t as usize..].iter().step_by(vocab);
        y.iter_mut().zip(column.zip(bias)).for_each(|(y, (w, b))| *y = w + b);
    });
    Ok(())
}

/// `gw[r, v] = Σ gy[n, r]` over the tokens `n` equal to `v`, in the order
/// of `n`, for `gw` `[rows, V]`. Each worker owns a band of rows of `gw`
/// and walks every token, so no two workers write one element. A band's
/// sums are made in `scratch` (as large as `gw`) transposed, `[V, band]`,
/// so each token adds one contiguous run of `gy`'s row rather than one
/// element every `V` (a cache line each), then written out transposed.
pub(super) fn weight_grad(
    rows: usize,
    tokens: &[u32],
    gy: &[f32],
    gw: &mut [f32],
    scratch: &mut [f32],
) -> Result<(), BackendError> {
    let vocab = gw.len() / rows.max(1);
    check(tokens, vocab)?;
    let band = rows.div_ceil(rayon::current_num_threads()).max(1);
    let chunk = band * vocab.max(1);
    gw.par_chunks_mut(chunk)
        .zip(scratch.par_chunks_mut(chunk))
        .enumerate()
        .for_each(|(k, (part, sums))| {
            let (first, mine) = (k * band, part.len() / vocab.max(1));
            sums.fill(0.0);
            for (dy, &t) in gy.chunks_exact(rows.max(1)).zip(tokens) {
                let to = &mut sums[t as usize * mine..][..mine];
                to.iter_mut().zip(&dy[first..first + mine]).for_each(|(s, g)| *s += g);
            }
            for (r, row) in part.chunks_exact_mut(vocab.max(1)).enumerate() {
                row.iter_mut()
                    .zip(sums[r..].iter().step_by(mine))
                    .for_each(|(w, s)| *w = *s);
            }
        });
    Ok(())
}

/// `gb[r] = Σ gy[n, r]` over `n`, in order.
pub(super) fn bias_grad(gy: &[f32], gb: &mut [f32]) {
    gb.fill(0.0);
    for row in gy.chunks_exact(gb.len().max(1)) {
        gb.iter_mut().zip(row).for_each(|(b, g)| *b += g);
    }
}

/// The first token past `vocab` columns, as an error.
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
