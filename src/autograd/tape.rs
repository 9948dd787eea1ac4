//! The tape: what a step recorded, in order, and the gradients backward
//! produced. It lives on the host; between steps the arena keeps it as
//! opaque host state (see `scope.rs`), and each step clears it, never frees
//! it: after the first step its vectors have the capacity they need and
//! recording allocates nothing.

use super::Recorded;
use crate::memory::{Buf, FloatBuf};
use crate::tensor::TensorRef;

/// A tensor a memory budget may have backward recompute: what it is, what
/// keeping it holds, and what recomputing it costs (the multiply-adds and
/// the bytes its op reads and writes again).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Candidate {
    pub what: &'static str,
    pub bytes: usize,
    pub multiply_adds: u64,
    pub bytes_moved: u64,
    /// Seconds making it again takes by the device's own timings, where
    /// it has them: a GPU's timed convolution forward (the algorithm it
    /// runs, as two halves where it does). Else the cost model prices the
    /// multiply-adds and bytes.
    pub timed_seconds: Option<f64>,
    /// The candidates (by number) recomputing it reads, directly or through
    /// outputs backward always recomputes (a batch norm's relu'd output): a
    /// dropped one among them is made again when this one is, so the two
    /// drops chain. Known in steps that record.
    pub reads: Vec<u32>,
    /// Times the step made it again in backward (0 when kept; 1 when
    /// dropped, unless chains are remade for each reader). Counted by
    /// planning's dry steps.
    pub remade: u32,
}

/// The nodes are `N`, the op registry's (see [`Recorded`]): small and
/// `Copy`, so backward copies one out of the tape before running it.
#[derive(Debug)]
pub(crate) struct Tape<N: Recorded> {
    pub(crate) nodes: Vec<N>,
    /// Gradient of each tensor of the step, by tensor id.
    pub(crate) grads: Vec<Option<FloatBuf>>,
    /// Parameters used in the step: (parameter buffer, its slot in the
    /// gradient slab, tensor id). Backward writes a parameter's gradient
    /// into its slot, where the optimizer and the data-parallel sums read it.
    pub(crate) leaves: Vec<(Buf<f32>, Buf<f32>, u32)>,
    pub(crate) next_id: u32,
    pub(crate) recording: bool,
    /// Tensors backward recomputes rather than keeps, by tensor id, and how
    /// (batch-norm outputs, the relu'd ones always: their inputs are kept
    /// anyway; under a memory budget convolution and block outputs too)...
    pub(crate) recipes: Vec<(u32, N::Recipe)>,
    /// ...and those recomputed so far in this backward, by tensor id, so
    /// that a second reader gets the same buffer.
    pub(crate) recomputed: Vec<(u32, FloatBuf)>,
    /// Candidates for recomputation under a memory budget (convolution and
    /// block outputs, in forward order) this step has seen: the bytes each keeps
    /// and the multiply-adds recomputing it costs...
    pub(crate) candidates: Vec<Candidate>,
    /// ...and, sorted, those to recompute in backward rather than keep. Set
    /// between steps (see `Arena::set_recomputed`); kept by `clear`.
    pub(crate) dropped: Vec<u32>,
    /// Whether a tensor made again only to make another is let go once
    /// that one is made (shared by the recomputation's own steps) rather
    /// than kept for its own readers, who make it again in turn: more
    /// recomputation, and a chain of drops no longer held all at once in
    /// backward. Set and kept as `dropped` is.
    pub(crate) transient_chains: bool,
    /// Each candidate's tensor id and number, in steps that plan.
    pub(crate) candidate_ids: Vec<(u32, u32)>,
    /// For each tensor backward may recompute, by tensor id, the candidates
    /// reading its value may need made again: itself, if a candidate, or
    /// those its recipe reads.
    pub(crate) sources: Vec<(u32, Vec<u32>)>,
    /// Recomputations under way (each may need another first).
    pub(crate) recompute_depth: u32,
    /// Where in `recomputed` the chain under way began: the tensors after
    /// it were made again inside that chain.
    pub(crate) chain_from: usize,
    /// The gradient backward started from: the caller's, never written over.
    pub(crate) seed: Option<FloatBuf>,
    /// Copies made ahead of their use, by the memory each copies (a
    /// mixed-precision step's weights, converted in one launch): the op
    /// that would make one takes it instead (see [`Prepared`]).
    pub(crate) prepared: Vec<Prepared>,
}

/// A copy of the tensor in `of` made ahead of its first use; `taken` once
/// an op has used it (and recorded what backward needs). By memory, not
/// tensor id: a parameter asked for twice with gradients off is two
/// tensors over one buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Prepared {
    pub(crate) of: FloatBuf,
    pub(crate) copy: TensorRef,
    pub(crate) taken: bool,
}

impl<N: Recorded> Default for Tape<N> {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            grads: Vec::new(),
            leaves: Vec::new(),
            next_id: 0,
            recording: true,
            recipes: Vec::new(),
            recomputed: Vec::new(),
            candidates: Vec::new(),
            dropped: Vec::new(),
            transient_chains: false,
            candidate_ids: Vec::new(),
            sources: Vec::new(),
            recompute_depth: 0,
            chain_from: 0,
            seed: None,
            prepared: Vec::new(),
        }
    }
}

impl<N: Recorded> Tape<N> {
    /// The candidates reading any of `tensors` in backward may need made
    /// again (see `sources`), sorted.
    pub(crate) fn sources_of(&self, tensors: impl IntoIterator<Item = u32>) -> Vec<u32> {
        let mut all: Vec<u32> = tensors
            .into_iter()
            .filter_map(|id| self.sources.iter().find(|(t, _)| *t == id))
            .flat_map(|(_, from)| from.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Registers where a recomputable tensor's value comes from (once:
    /// a candidate is itself).
    pub(crate) fn add_source(&mut self, id: u32, how: &N::Recipe) {
        if !self.sources.iter().any(|(t, _)| *t == id) {
            let from = self.sources_of(N::reads(how).into_iter().flatten());
            self.sources.push((id, from));
        }
    }

    pub(crate) fn clear(&mut self) {
        self.nodes.clear();
        self.grads.clear();
        self.leaves.clear();
        self.next_id = 0;
        self.recording = true;
        self.recipes.clear();
        self.recomputed.clear();
        self.candidates.clear();
        self.candidate_ids.clear();
        self.sources.clear();
        self.recompute_depth = 0;
        self.chain_from = 0;
        self.seed = None;
        self.prepared.clear();
    }
}
