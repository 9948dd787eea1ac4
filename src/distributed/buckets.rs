//! Gradient buckets: the parameters' gradients, grouped into a few flat
//! buffers of the persistent region, each summed across the ranks by one
//! all-reduce.
//!
//! Backward writes each parameter's gradient straight into its slot of a
//! bucket (see [`Step::grad_into`]), so no copy precedes the sum. Buckets
//! are filled in the order backward produces gradients (the reverse of the
//! model's parameter order), and a bucket's sum is queued as soon as
//! backward has produced all of it, while backward goes on with the layers
//! below: on a GPU the sum runs on NCCL's stream beside those kernels. The
//! optimizer waits for all sums ([`Buckets::finish`]).
//!
//! Each parameter must be used once per step (true of our models): a
//! bucket is queued when each of its parameters has a gradient, so a later
//! contribution to one of them would miss the sum.

use crate::autograd::Step;
use crate::memory::{Buf, Persistent};
use crate::tensor::{Param, Shape};
use crate::{Error, Result};

/// Elements each slot starts on a multiple of (256 bytes, the arena's
/// alignment), so every gradient is as aligned as a buffer of its own.
const SLOT_ALIGN: usize = 64;

/// At most this many buckets (a bit mask tracks which were queued).
pub const MAX_BUCKETS: usize = 64;

pub struct Buckets {
    buckets: Vec<Bucket>,
}

struct Bucket {
    buf: Buf<f32>,
    /// Each parameter and its slot in `buf`.
    slots: Vec<(Param, Buf<f32>)>,
}

/// Which buckets of the current step are queued (bit i: bucket i).
#[derive(Debug, Default, Clone, Copy)]
pub struct Queued(u64);

impl Buckets {
    /// Buckets of at most `cap_bytes` (a larger parameter gets one of its
    /// own) for `params`, given in the model's order.
    pub fn new(params: &[Param], p: &mut Persistent<'_>, cap_bytes: usize) -> Result<Self> {
        let cap = cap_bytes / 4;
        let mut groups: Vec<Vec<Param>> = Vec::new();
        let mut fill = 0;
        for param in params.iter().rev() {
            let len = slot_len(param);
            match groups.last_mut() {
                Some(group) if fill + len <= cap => group.push(*param),
                _ => {
                    groups.push(vec![*param]);
                    fill = 0;
                }
            }
            fill += len;
        }
        if groups.len() > MAX_BUCKETS {
            return Err(Error::Config(format!(
                "{} gradient buckets of {cap_bytes} bytes; pass a larger --bucket-kib (at most {MAX_BUCKETS} buckets)",
                groups.len()
            )));
        }
        let mut buckets = Vec::with_capacity(groups.len());
        for group in groups {
            let total = group.iter().map(slot_len).sum();
            let buf = p.zeros::<f32>("gradient bucket", Shape::new(&[total]))?;
            let mut at = 0;
            let mut slots = Vec::with_capacity(group.len());
            for param in group {
                let n = param.shape().numel();
                let slot = buf
                    .slice(at, n)
                    .ok_or(Error::Config("internal error: a gradient slot past its bucket".into()))?;
                slots.push((param, slot));
                at += slot_len(&param);
            }
            buckets.push(Bucket { buf, slots });
        }
        Ok(Self { buckets })
    }

    /// The buckets, each as its parameters' names and its bytes.
    pub fn layout(&self) -> Vec<(Vec<&'static str>, usize)> {
        self.buckets
            .iter()
            .map(|b| (b.slots.iter().map(|(p, _)| p.name()).collect(), b.buf.bytes()))
            .collect()
    }

    /// The buckets' buffers, in the order their sums are queued.
    pub fn bufs(&self) -> Vec<Buf<f32>> {
        self.buckets.iter().map(|b| b.buf).collect()
    }

    /// Points every parameter's gradient at its slot. Call in each step
    /// before backward.
    pub fn direct(&self, s: &mut Step<'_>) -> Result<()> {
        for bucket in &self.buckets {
            for (param, slot) in &bucket.slots {
                s.grad_into(param, *slot)?;
            }
        }
        Ok(())
    }

    /// Queues the sum of each bucket whose gradients are all produced, in
    /// bucket order (every rank must queue its sums in the same order).
    /// Call after each node of backward.
    pub fn queue_ready(&self, s: &mut Step<'_>, queued: &mut Queued) -> Result<()> {
        for (i, bucket) in self.buckets.iter().enumerate() {
            if queued.0 & (1 << i) != 0 {
                continue;
            }
            if !bucket.slots.iter().all(|(param, _)| s.has_param_grad(param)) {
                // A later bucket must wait for this one, whose sum comes first.
                return Ok(());
            }
            s.uses(&[bucket.buf.into()]).all_reduce_sum(bucket.buf)?;
            queued.0 |= 1 << i;
        }
        Ok(())
    }

    /// Queues any sum not queued yet and orders every sum before what
    /// follows (the optimizer). A parameter backward gave no gradient gets
    /// its slot's stale value: that is refused.
    pub fn finish(&self, s: &mut Step<'_>, queued: &mut Queued) -> Result<()> {
        for bucket in &self.buckets {
            if let Some((param, _)) = bucket.slots.iter().find(|(p, _)| !s.has_param_grad(p)) {
                return Err(Error::Config(format!(
                    "data-parallel training needs a gradient for every parameter, and backward gave {} none",
                    param.name()
                )));
            }
        }
        self.queue_ready(s, queued)?;
        Ok(s.backend().join_collectives()?)
    }
}

/// Elements a parameter's slot spans, up to where the next slot starts.
fn slot_len(param: &Param) -> usize {
    param.shape().numel().next_multiple_of(SLOT_ALIGN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::MnistCnn;
    use crate::{Arena, Device};

    fn layout(cap: usize) -> Vec<(Vec<&'static str>, usize)> {
        let mut arena = Arena::new(Device::cpu(1).unwrap(), 4 << 20).unwrap();
        let mut p = arena.persistent();
        let model = MnistCnn::init(&mut p, 1).unwrap();
        let buckets = Buckets::new(&model.params(), &mut p, cap).unwrap();
        for b in &buckets.buckets {
            let mut end = b.buf.offset();
            for (param, slot) in &b.slots {
                // Each slot: its parameter's size, 256-byte aligned, after the last.
                assert_eq!(slot.len(), param.shape().numel());
                assert!(slot.offset() >= end && slot.offset() % 256 == 0, "{}", param.name());
                end = slot.byte_range().end;
            }
            assert!(end <= b.buf.byte_range().end);
        }
        buckets.layout()
    }

    #[test]
    fn buckets_follow_backwards_order_and_their_cap() {
        let names = |l: Vec<(Vec<&'static str>, usize)>| l.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(
            names(layout(4 << 10)),
            vec![
                vec!["fc2.bias", "fc2.weight", "fc1.bias"],
                vec!["fc1.weight"],
                vec!["conv2.weight"],
                vec!["conv1.weight"],
            ]
        );
        let one = layout(1 << 20);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].0.len(), 6);
        // 21,840 values, each slot rounded up to 64.
        assert_eq!(one[0].1, (64 + 512 + 64 + 16000 + 5056 + 256) * 4);
    }
}
