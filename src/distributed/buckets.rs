//! Gradient buckets: the parameters' gradients, grouped into a few flat
//! buffers of the persistent region, each summed across the ranks by one
//! all-reduce.
//!
//! A bucket is a run of consecutive slots of the gradient slab
//! ([`ParamStore::grads`]), where backward writes each parameter's
//! gradient, so no copy precedes the sum. Buckets
//! are filled in the order backward produces gradients (the reverse of the
//! model's parameter order), and a bucket's sum is queued as soon as
//! backward has produced all of it, while backward goes on with the layers
//! below: on a GPU the sum runs on NCCL's stream beside those kernels. The
//! optimizer waits for all sums ([`Buckets::finish`]).
//!
//! Each parameter must be used once per step (true of our models): a
//! bucket is queued when each of its parameters has a gradient, so a later
//! contribution to one of them would miss the sum.

use crate::memory::Buf;
use crate::nn::ParamStore;
use crate::tensor::Param;
use crate::Step;
use crate::{Error, Result};

/// At most this many buckets (a bit mask tracks which were queued).
pub const MAX_BUCKETS: usize = 64;

pub struct Buckets {
    buckets: Vec<Bucket>,
}

struct Bucket {
    /// Its slice of the gradient slab.
    buf: Buf<f32>,
    /// Its parameters, in backward's order.
    params: Vec<Param>,
}

/// Which buckets of the current step are queued (bit i: bucket i).
#[derive(Debug, Default, Clone, Copy)]
pub struct Queued(u64);

impl Buckets {
    /// Buckets of at most `cap_bytes` (a larger parameter gets one of its
    /// own), each a run of consecutive slots of `store`'s gradient slab,
    /// taken in the order backward fills them (the reverse of the model's).
    pub fn new(store: &ParamStore, cap_bytes: usize) -> Result<Self> {
        let cap = cap_bytes / 4;
        let mut groups: Vec<Vec<Param>> = Vec::new();
        let mut fill = 0;
        for param in store.params().rev() {
            // The slot with its padding, at most (slots start 512 bytes past
            // a 1 KiB boundary: up to 256 elements apart).
            let len = param.shape().numel().next_multiple_of(256);
            match groups.last_mut() {
                Some(group) if fill + len <= cap => group.push(param),
                _ => {
                    groups.push(vec![param]);
                    fill = 0;
                }
            }
            fill += len;
        }
        if groups.len() > MAX_BUCKETS {
            return Err(Error::Config(format!(
                "{} gradient buckets of {cap_bytes} bytes: more than the {MAX_BUCKETS} a step can sum",
                groups.len()
            )));
        }
        let grads = store.grads();
        let buckets = groups
            .into_iter()
            .map(|params| {
                let (first, last) = (params[params.len() - 1], params[0]);
                let buf = store.span(grads, &first, &last)?;
                Ok(Bucket { buf, params })
            })
            .collect::<Result<_>>()?;
        Ok(Self { buckets })
    }

    /// The buckets, each as its parameters' names and its bytes.
    pub fn layout(&self, store: &ParamStore) -> Vec<(Vec<String>, usize)> {
        self.buckets
            .iter()
            .map(|b| {
                (
                    b.params.iter().map(|p| store.name(p).to_string()).collect(),
                    b.buf.bytes(),
                )
            })
            .collect()
    }

    /// The buckets' slices of the gradient slab, in the order their sums
    /// are queued.
    pub fn bufs(&self) -> Vec<Buf<f32>> {
        self.buckets.iter().map(|b| b.buf).collect()
    }

    /// Queues the sum of each bucket whose gradients are all produced, in
    /// bucket order (every rank must queue its sums in the same order).
    /// Call after each node of backward.
    pub fn queue_ready(&self, s: &mut Step<'_>, _store: &ParamStore, queued: &mut Queued) -> Result<()> {
        for (i, bucket) in self.buckets.iter().enumerate() {
            if queued.0 & (1 << i) != 0 {
                continue;
            }
            if !bucket.params.iter().all(|param| s.has_param_grad(param)) {
                // A later bucket must wait for this one, whose sum comes first.
                return Ok(());
            }
            s.uses(&[bucket.buf.into()]).all_reduce_sum(bucket.buf)?;
            queued.0 |= 1 << i;
        }
        Ok(())
    }

    /// Queues any sum not queued yet and orders every sum before what
    /// follows (the optimizer). A parameter backward gave no gradient would
    /// be summed from its slot's stale value: that is refused.
    pub fn finish(&self, s: &mut Step<'_>, store: &ParamStore, queued: &mut Queued) -> Result<()> {
        for bucket in &self.buckets {
            if let Some(param) = bucket.params.iter().find(|p| !s.has_param_grad(p)) {
                return Err(Error::Config(format!(
                    "data-parallel training needs a gradient for every parameter, and backward gave {} none",
                    store.name(param)
                )));
            }
        }
        self.queue_ready(s, store, queued)?;
        Ok(s.backend().join_collectives()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::MnistCnn;
    use crate::nn::Input;
    use crate::{Device, Engine};

    fn layout(cap: usize) -> Vec<(Vec<String>, usize)> {
        let mut engine = Engine::new(Device::cpu(1).unwrap(), 4 << 20).unwrap();
        let input = Input {
            example: MnistCnn::INPUT,
            classes: 10,
        };
        let choice = MnistCnn::choice();
        let (store, _) = ParamStore::build(&mut engine.persistent(), 1, |pb| choice.build(input, pb)).unwrap();
        let buckets = Buckets::new(&store, cap).unwrap();
        let grads = store.grads().byte_range();
        let mut end = grads.end;
        for b in &buckets.buckets {
            // Each bucket: a slice of the gradient slab holding exactly its
            // parameters' slots, below the bucket before it.
            let range = b.buf.byte_range();
            assert!(range.start >= grads.start && range.end <= end && range.start % 256 == 0);
            for param in &b.params {
                let slot = param.grad().byte_range();
                assert!(
                    slot.start >= range.start && slot.end <= range.end,
                    "{}",
                    store.name(param)
                );
            }
            end = range.start;
        }
        buckets.layout(&store)
    }

    #[test]
    fn buckets_follow_backwards_order_and_their_cap() {
        let names = |l: Vec<(Vec<String>, usize)>| l.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
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
        // From conv1.weight's slot to fc2.bias's last element: 21,810
        // values, each slot starting 512 bytes past a 1 KiB boundary.
        assert_eq!(one[0].1, (256 + 5120 + 16128 + 256 + 512 + 10) * 4);
    }
}
