//! A split of tokens cut into `B` contiguous streams, read `T` tokens at a
//! time: truncated backpropagation through time. Window `k` is, for every
//! stream, the `T` tokens that follow window `k - 1`'s, so a model that
//! keeps each stream's recurrent state from one window to the next reads
//! its stream as one long sequence.
//!
//! Layout, for a split of `n` tokens: every epoch has
//! `W = ⌊⌊(n - 1) / B⌋ / T⌋` windows; stream `b` is tokens
//! `[b·W·T, (b + 1)·W·T)` as inputs, each input's target the token after it.
//! The streams lie back to back, so together they read the first `B·W·T`
//! tokens as inputs (and token `B·W·T` as the last target). The ragged tail
//! — the last `n - B·W·T` tokens, fewer than `B·T + 1` — is never an input:
//! every window has the same shape, and each epoch reads the same tokens.

use super::TextError;

/// How a split is read window by window; see the module's layout.
#[derive(Debug, Clone, Copy)]
pub struct Windows<'a> {
    tokens: &'a [u32],
    streams: usize,
    seq_len: usize,
    count: usize,
}

impl<'a> Windows<'a> {
    /// `tokens` (the `split` named in errors) cut into `streams` streams
    /// read `seq_len` at a time. Refuses a split too short for one window.
    pub fn new(split: &'static str, tokens: &'a [u32], streams: usize, seq_len: usize) -> Result<Self, TextError> {
        if streams == 0 || seq_len == 0 {
            return Err(TextError::ZeroWindow { streams, seq_len });
        }
        let count = tokens.len().saturating_sub(1) / streams / seq_len;
        if count == 0 {
            return Err(TextError::SplitTooShort {
                split,
                tokens: tokens.len(),
                streams,
                seq_len,
                needed: streams.saturating_mul(seq_len).saturating_add(1),
            });
        }
        Ok(Windows {
            tokens,
            streams,
            seq_len,
            count,
        })
    }

    /// Windows per epoch.
    pub fn count(&self) -> usize {
        self.count
    }

    /// `[B, T]`: streams, tokens per window.
    pub fn shape(&self) -> [usize; 2] {
        [self.streams, self.seq_len]
    }

    /// Where, in the split's tokens, `stream`'s inputs of window `window`
    /// begin (its targets begin one later): what a gather on the device
    /// reads from.
    pub fn start(&self, stream: usize, window: usize) -> usize {
        (stream * self.count + window) * self.seq_len
    }

    /// Tokens never read as inputs in an epoch: the ragged tail.
    pub fn unread(&self) -> usize {
        self.tokens.len() - self.streams * self.count * self.seq_len
    }

    /// Writes window `window`'s inputs and targets, each `[B, T]` row-major
    /// (row `b` is stream `b`).
    pub fn fill(&self, window: usize, inputs: &mut [u32], targets: &mut [u32]) -> Result<(), TextError> {
        if window >= self.count {
            return Err(TextError::NoSuchWindow {
                index: window,
                count: self.count,
            });
        }
        let size = self.streams * self.seq_len;
        if inputs.len() != size || targets.len() != size {
            return Err(TextError::WindowBuffers {
                streams: self.streams,
                seq_len: self.seq_len,
                inputs: inputs.len(),
                targets: targets.len(),
            });
        }
        let rows = inputs
            .chunks_exact_mut(self.seq_len)
            .zip(targets.chunks_exact_mut(self.seq_len));
        for (stream, (input, target)) in rows.enumerate() {
            let start = self.start(stream, window);
            input.copy_from_slice(&self.tokens[start..start + self.seq_len]);
            target.copy_from_slice(&self.tokens[start + 1..start + 1 + self.seq_len]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: usize) -> Vec<u32> {
        (0..n as u32).collect()
    }

    fn window(w: &Windows<'_>, k: usize) -> (Vec<u32>, Vec<u32>) {
        let [b, t] = w.shape();
        let (mut inputs, mut targets) = (vec![u32::MAX; b * t], vec![u32::MAX; b * t]);
        w.fill(k, &mut inputs, &mut targets).unwrap();
        (inputs, targets)
    }

    #[test]
    fn windows_of_a_small_split() {
        // 23 tokens, 2 streams, windows of 4: ⌊22 / 2 / 4⌋ = 2 windows;
        // stream 0 reads 0..8, stream 1 reads 8..16; 16..23 are the tail.
        let tokens = ramp(23);
        let w = Windows::new("training", &tokens, 2, 4).unwrap();
        assert_eq!((w.count(), w.unread()), (2, 7));
        assert_eq!(
            window(&w, 0),
            (vec![0, 1, 2, 3, 8, 9, 10, 11], vec![1, 2, 3, 4, 9, 10, 11, 12])
        );
        assert_eq!(
            window(&w, 1),
            (vec![4, 5, 6, 7, 12, 13, 14, 15], vec![5, 6, 7, 8, 13, 14, 15, 16])
        );
    }

    #[test]
    fn each_stream_carries_over_from_window_to_window() {
        for (n, streams, seq_len) in [(1000, 3, 7), (129, 4, 8), (4097, 16, 16), (50, 1, 49)] {
            let tokens: Vec<u32> = (0..n).map(|i| (i * 7919 % 65) as u32).collect();
            let w = Windows::new("training", &tokens, streams, seq_len).unwrap();
            let mut read = vec![Vec::new(); streams];
            let mut last_target: Vec<Option<u32>> = vec![None; streams];
            for k in 0..w.count() {
                let (inputs, targets) = window(&w, k);
                for b in 0..streams {
                    let row = b * seq_len..(b + 1) * seq_len;
                    // The next window starts where the last one's targets
                    // ended, and targets are the inputs shifted by one.
                    if let Some(t) = last_target[b] {
                        assert_eq!(inputs[row.start], t, "n {n}, window {k}, stream {b}");
                    }
                    assert_eq!(inputs[row.start + 1..row.end], targets[row.start..row.end - 1]);
                    last_target[b] = Some(targets[row.end - 1]);
                    read[b].extend_from_slice(&inputs[row]);
                }
            }
            // Streams are contiguous and back to back: together the first
            // B·W·T tokens, each once.
            assert_eq!(read.concat(), tokens[..streams * w.count() * seq_len], "n {n}");
            assert_eq!(w.unread(), n - streams * w.count() * seq_len);
            assert!(
                w.unread() < streams * seq_len + 1,
                "n {n}: a whole window was left unread"
            );
        }
    }

    #[test]
    fn the_last_target_is_in_the_split() {
        // Exactly B·T + 1 tokens: one window whose last target is the last token.
        let tokens = ramp(3 * 5 + 1);
        let w = Windows::new("validation", &tokens, 3, 5).unwrap();
        assert_eq!((w.count(), w.unread()), (1, 1));
        assert_eq!(*window(&w, 0).1.last().unwrap(), 15);
    }

    #[test]
    fn too_short_or_empty_windows_are_refused() {
        let tokens = ramp(3 * 5);
        match Windows::new("validation", &tokens, 3, 5) {
            Err(TextError::SplitTooShort { tokens, needed, .. }) => assert_eq!((tokens, needed), (15, 16)),
            other => panic!("expected SplitTooShort, got {other:?}"),
        }
        let message = Windows::new("validation", &[], 64, 128).unwrap_err().to_string();
        assert!(
            message.contains("validation split has 0 tokens") && message.contains("8193"),
            "{message}"
        );
        for (streams, seq_len) in [(0, 4), (4, 0)] {
            let err = Windows::new("training", &tokens, streams, seq_len).unwrap_err();
            assert!(matches!(err, TextError::ZeroWindow { .. }), "{err:?}");
        }
    }

    #[test]
    fn bad_window_requests_are_errors() {
        let tokens = ramp(100);
        let w = Windows::new("training", &tokens, 2, 10).unwrap();
        let (mut a, mut b) = (vec![0; 20], vec![0; 20]);
        let err = w.fill(w.count(), &mut a, &mut b).unwrap_err();
        assert!(matches!(err, TextError::NoSuchWindow { index: 4, count: 4 }), "{err:?}");
        let err = w.fill(0, &mut a[..19], &mut b).unwrap_err();
        assert!(matches!(err, TextError::WindowBuffers { inputs: 19, .. }), "{err:?}");
    }
}
