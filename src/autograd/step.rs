//! A step: the scope in which tensors exist. It hands out step-region memory,
//! records ops on the tape, and runs backward. It is assembled from its parts
//! (the engine does it, `engine.rs`): the runtime its kernels run on, the
//! arena its buffers are placed by, the tape, its compute policy (a copy of
//! the runtime's) and whether it runs or only plans.

use super::tape::{Candidate, Prepared, Tape};
use super::Recorded;
use crate::backend::{Backend, Mode, Policy, Runtime};
use crate::memory::{Arena, Buf, DType, Element, FloatBuf, Touch};
use crate::tensor::{Brand, Labels, Layout, Param, Shape, Tensor, TensorRef};
use crate::{Error, Result};
use std::marker::PhantomData;

/// What the buffer backward starts from is called in a step's trace: the
/// moment it is made, forward is done and nothing is recomputed yet (the
/// memory budget's bound reads the plan there).
pub const GRADIENT_SEED: &str = "gradient seed";

/// One step of work on an arena. `'s` brands every tensor made here; `N`
/// is what its tape holds, the op registry's node set (users name this
/// type as `bumpgrad::Step<'s>`, the step over the crate's ops).
pub struct Step<'s, N: Recorded> {
    runtime: &'s mut Runtime,
    memory: &'s mut Arena,
    tape: &'s mut Tape<N>,
    policy: Policy,
    mode: Mode,
    _brand: Brand<'s>,
}

/// Proof that backward ran in step `'s`; look gradients up through the step.
#[derive(Debug)]
pub struct Grads<'s> {
    _brand: Brand<'s>,
}

impl<'s, N: Recorded> Step<'s, N> {
    pub(crate) fn new(
        runtime: &'s mut Runtime,
        memory: &'s mut Arena,
        tape: &'s mut Tape<N>,
        policy: Policy,
        mode: Mode,
    ) -> Self {
        Self {
            runtime,
            memory,
            tape,
            policy,
            mode,
            _brand: PhantomData,
        }
    }

    /// Raw step-region memory, released at the reset. Crate-only: outside
    /// code gets step memory as branded tensors, never as bare handles.
    pub(crate) fn alloc<T: Element>(&mut self, what: &'static str, shape: Shape) -> Result<Buf<T>> {
        Ok(self.memory.alloc_step(what, shape)?)
    }

    /// A step buffer of `dtype`: a tensor's values or a gradient.
    pub(crate) fn alloc_float(&mut self, what: &'static str, shape: Shape, dtype: DType) -> Result<FloatBuf> {
        Ok(self.memory.alloc_step_float(what, shape, dtype)?)
    }

    /// A step buffer of `t`'s shape and type (its gradient, a copy).
    pub(crate) fn alloc_like(&mut self, what: &'static str, t: &TensorRef) -> Result<FloatBuf> {
        self.alloc_float(what, t.shape, t.dtype())
    }

    /// How this step computes (see [`Policy`]): its copy, made when the
    /// step was assembled.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The type convolutions and matrix products compute in: bf16 under
    /// `--precision bf16` (see [`crate::backend::Precision`]), else fp32.
    pub fn compute_dtype(&self) -> DType {
        self.policy.activations()
    }

    /// The layout convolutions take their 4-D inputs in: channels last in
    /// a TF32 or bf16 step (see [`Layout`]), else NCHW.
    pub fn compute_layout(&self) -> Layout {
        self.policy.layout()
    }

    pub(crate) fn backend(&mut self) -> &mut Backend {
        self.runtime.backend()
    }

    /// The op about to run takes `seconds()` beyond the fastest algorithm
    /// the device timed for it (a workspace held down): the step's plan
    /// counts it.
    pub(crate) fn note_slower(&mut self, seconds: impl FnOnce() -> f64) {
        self.memory.note_slower(seconds);
    }

    /// The buffer this step allocated last carries `tag` in the step's
    /// plan (see [`crate::memory::StepPlan::tags`]).
    pub(crate) fn tag_last(&mut self, tag: u32) {
        self.memory.tag_last_step(tag);
    }

    /// Declares every buffer the op's next kernels read or write, and hands
    /// out the backend to run them. The declarations are the step's liveness
    /// (what the memory plan is made from); the CPU backend refuses a kernel
    /// that touches anything undeclared, so they cannot fall behind. Ops
    /// reach it through their one launch helper (`Step::launch`, in
    /// `ops/launch.rs`), which matches on the backend it hands out.
    pub(crate) fn uses(&mut self, touches: &[Touch]) -> &mut Backend {
        self.memory.record_uses(touches);
        self.runtime
            .declare(touches.iter().map(|t| (t.offset, t.offset + t.bytes)));
        self.runtime.backend()
    }

    /// Worker threads of the device (sizes per-thread scratch).
    pub fn threads(&mut self) -> usize {
        self.runtime.threads()
    }

    /// Whether ops are being recorded for backward.
    pub fn grad_enabled(&mut self) -> bool {
        self.tape.recording
    }

    /// Turns recording off (evaluation) or on for the rest of the step.
    pub fn set_grad_enabled(&mut self, on: bool) {
        self.tape.recording = on;
    }

    fn next_id(&mut self) -> u32 {
        let tape = &mut *self.tape;
        let id = tape.next_id;
        tape.next_id += 1;
        id
    }

    /// A new tensor in the step region whose gradient is wanted when any of
    /// `inputs` wants one and the step records; of the first input's type.
    pub(crate) fn output(&mut self, what: &'static str, shape: Shape, inputs: &[&Tensor<'s>]) -> Result<Tensor<'s>> {
        let dtype = inputs.first().map_or(DType::F32, |t| t.dtype());
        self.output_of(what, shape, dtype, inputs)
    }

    /// [`Step::output`] of type `dtype`.
    /// An output of 4-D `shape` takes the first input's layout (elementwise
    /// ops keep it); any other is row-major.
    pub(crate) fn output_of(
        &mut self,
        what: &'static str,
        shape: Shape,
        dtype: DType,
        inputs: &[&Tensor<'s>],
    ) -> Result<Tensor<'s>> {
        let layout = match inputs.first() {
            Some(t) if shape.rank() == 4 && t.shape().rank() == 4 => t.layout(),
            _ => Layout::Nchw,
        };
        self.output_as(what, shape, dtype, layout, inputs)
    }

    /// [`Step::output`] of type `dtype` and layout `layout`.
    pub(crate) fn output_as(
        &mut self,
        what: &'static str,
        shape: Shape,
        dtype: DType,
        layout: Layout,
        inputs: &[&Tensor<'s>],
    ) -> Result<Tensor<'s>> {
        let requires_grad = self.grad_enabled() && inputs.iter().any(|t| t.requires_grad());
        let buf = self.alloc_float(what, shape, dtype)?;
        let id = self.next_id();
        let layout = if shape.rank() == 4 { layout } else { Layout::Nchw };
        Ok(Tensor::from_ref(TensorRef {
            id,
            buf,
            shape,
            requires_grad,
            layout,
        }))
    }

    /// A tensor over existing memory (a reshape), with a fresh id.
    pub(crate) fn alias(&mut self, buf: impl Into<FloatBuf>, shape: Shape, requires_grad: bool) -> Tensor<'s> {
        self.alias_as(buf, shape, Layout::Nchw, requires_grad)
    }

    /// [`Step::alias`] in `layout` (a gradient of a channels-last tensor).
    pub(crate) fn alias_as(
        &mut self,
        buf: impl Into<FloatBuf>,
        shape: Shape,
        layout: Layout,
        requires_grad: bool,
    ) -> Tensor<'s> {
        let buf = buf.into();
        let id = self.next_id();
        Tensor::from_ref(TensorRef {
            id,
            buf,
            shape,
            requires_grad,
            layout,
        })
    }

    /// Puts an op's node on the tape (when the step records): anything the
    /// registry turns into one of its nodes (an op's `Saved`).
    pub(crate) fn record(&mut self, node: impl Into<N>) {
        let tape = &mut *self.tape;
        if tape.recording {
            tape.nodes.push(node.into());
        }
    }

    /// Registers how backward can make `t` again (when the step records):
    /// the ops that read `t` in backward through [`Step::saved`] then get a
    /// recomputed copy, so `t` itself dies when forward is done with it.
    pub(crate) fn recomputable(&mut self, t: &TensorRef, how: impl Into<N::Recipe>) {
        let how = how.into();
        let planning = self.mode == Mode::Plan;
        let tape = &mut *self.tape;
        if tape.recording {
            tape.recipes.push((t.id, how));
            if planning {
                tape.add_source(t.id, &how);
            }
        }
    }

    /// Counts `t` as a candidate for recomputation under a memory budget (a
    /// convolution's output, a block's) whose recomputation reads `inputs`,
    /// and says whether the step is to recompute it in backward rather than
    /// keep it. `cost.reads` is filled in here, in a step that plans: only
    /// planning asks, and a step that runs allocates nothing on the heap.
    /// Whether this is a planning step (nothing runs): what only planning
    /// reads, such as a candidate's price, is worked out only then.
    pub(crate) fn planning(&self) -> bool {
        self.mode == Mode::Plan
    }

    pub(crate) fn drops_next_candidate(
        &mut self,
        t: &TensorRef,
        inputs: [Option<&TensorRef>; 2],
        mut cost: Candidate,
    ) -> bool {
        let planning = self.mode == Mode::Plan;
        let tape = &mut *self.tape;
        let i = tape.candidates.len() as u32;
        if tape.recording && planning {
            cost.reads = tape.sources_of(inputs.into_iter().flatten().map(|x| x.id));
            tape.sources.push((t.id, vec![i]));
            tape.candidate_ids.push((t.id, i));
        }
        tape.candidates.push(cost);
        tape.recording && tape.dropped.binary_search(&i).is_ok()
    }

    /// Keeps `copy`, a copy of `of` made ahead of its use (a step's weights
    /// converted in one launch), for the op that would make it.
    pub(crate) fn prepare(&mut self, of: &TensorRef, copy: &TensorRef) {
        self.tape.prepared.push(Prepared {
            of: of.buf,
            copy: *copy,
            taken: false,
        });
    }

    /// The copy of `of` in `dtype` and `layout` made ahead of its use, if
    /// one was, and whether this is its first use: the op that takes it
    /// first records it for backward, where making it would have.
    pub(crate) fn take_prepared(&mut self, of: &TensorRef, dtype: DType, layout: Layout) -> Option<(TensorRef, bool)> {
        let p = self
            .tape
            .prepared
            .iter_mut()
            .find(|p| p.of == of.buf && p.copy.buf.dtype() == dtype && p.copy.layout == layout)?;
        let first = !p.taken;
        p.taken = true;
        Some((p.copy, first))
    }

    /// Whether backward makes `t` again rather than keep it.
    pub(crate) fn is_dropped(&self, t: &TensorRef) -> bool {
        self.tape.recipes.iter().any(|(id, _)| *id == t.id)
    }

    /// Whether a recomputation that has just read `t` through
    /// [`Step::saved`] may write its own output over `t`'s buffer: `t` was
    /// made again inside this chain only to make another (chains remade for
    /// each reader, so no reader outside the chain shares that copy: each
    /// makes its own), and no other recipe reads `t` (so nothing later in
    /// the chain does). Then the chain holds one buffer where it held two:
    /// ResNet-18's least budgeted step held a conv output and the relu'd
    /// batch norm made from it side by side at its peak.
    pub(crate) fn may_overwrite(&self, t: &TensorRef) -> bool {
        let tape = &*self.tape;
        let readers = tape
            .recipes
            .iter()
            .filter(|(_, how)| N::reads(how).contains(&Some(t.id)))
            .count();
        let made_in_chain =
            tape.recompute_depth > 0 && tape.recomputed[tape.chain_from..].iter().any(|(id, _)| *id == t.id);
        tape.transient_chains && made_in_chain && readers == 1
    }

    /// Whether reading `t` in backward costs nothing: kept, or made again
    /// already.
    pub(crate) fn at_hand(&self, t: &TensorRef) -> bool {
        !self.is_dropped(t) || self.tape.recomputed.iter().any(|(id, _)| *id == t.id)
    }

    /// The value of `t` an op saved for backward, read in backward: `t`'s
    /// own buffer, or, when `t` is recomputable, a copy made the first time
    /// backward asks (and shared by later readers). Ops that read a saved
    /// input through this let the memory plan reuse its bytes in between.
    pub(crate) fn saved(&mut self, t: &TensorRef) -> Result<FloatBuf> {
        let tape = &*self.tape;
        if let Some(&(_, buf)) = tape.recomputed.iter().find(|(id, _)| *id == t.id) {
            return Ok(buf);
        }
        let Some(&(_, how)) = tape.recipes.iter().find(|(id, _)| *id == t.id) else {
            return Ok(t.buf);
        };
        // A recomputation reads tensors made before the one it makes, so a
        // chain is never longer than the recipes: longer is a recipe that
        // reads what it makes, refused rather than recursed into.
        if self.tape.recompute_depth as usize >= self.tape.recipes.len() {
            return Err(crate::backend::BackendError::Internal("a recomputation that needs its own output").into());
        }
        // With transient chains, what a recomputation makes on the way is
        // shared within it and let go after: its own readers make it again.
        let nested = self.tape.recompute_depth > 0;
        let made_before = self.tape.recomputed.len();
        if !nested {
            self.tape.chain_from = made_before;
        }
        self.tape.recompute_depth += 1;
        self.memory.begin_recompute();
        let buf = N::recompute(how, self);
        self.memory.end_recompute();
        self.tape.recompute_depth -= 1;
        let buf = buf?;
        let tape = &mut *self.tape;
        if let Some(&(_, i)) = tape.candidate_ids.iter().find(|(id, _)| *id == t.id) {
            tape.candidates[i as usize].remade += 1;
        }
        if !nested && tape.transient_chains {
            tape.recomputed.truncate(made_before);
        }
        tape.recomputed.push((t.id, buf));
        Ok(buf)
    }

    /// A parameter held fixed in this step: read, never given a gradient,
    /// so backward leaves its gradient unmade and the optimizer, which
    /// updates what has one, leaves it as it is (frozen word vectors).
    pub fn param_fixed(&mut self, param: &Param) -> Tensor<'s> {
        self.alias(param.buf, param.shape, false)
    }

    /// A parameter seen from this step: same memory, gradient tracked. Asked
    /// for twice, it is the same tensor, so the gradients of both uses meet.
    /// Asked for after backward, it is still that tensor, so its gradient
    /// can be looked up with [`Step::grad`].
    pub fn param(&mut self, param: &Param) -> Tensor<'s> {
        let known = self
            .tape
            .leaves
            .iter()
            .find(|(b, _, _)| *b == param.buf)
            .map(|&(_, _, id)| id);
        if let Some(id) = known {
            return Tensor::from_ref(TensorRef {
                id,
                buf: param.buf.into(),
                shape: param.shape,
                requires_grad: true,
                layout: Layout::Nchw,
            });
        }
        let requires_grad = self.grad_enabled();
        let t = self.alias(param.buf, param.shape, requires_grad);
        if requires_grad {
            self.tape.leaves.push((param.buf, param.grad, t.inner.id));
        }
        t
    }

    /// Host values copied into the step region, as an input (no gradient).
    pub fn input(&mut self, what: &'static str, shape: Shape, values: &[f32]) -> Result<Tensor<'s>> {
        self.upload(what, shape, values, false)
    }

    /// Host values copied into the step region as a variable whose gradient
    /// backward computes (for gradient checks and experiments).
    pub fn variable(&mut self, what: &'static str, shape: Shape, values: &[f32]) -> Result<Tensor<'s>> {
        let requires_grad = self.grad_enabled();
        self.upload(what, shape, values, requires_grad)
    }

    fn upload(&mut self, what: &'static str, shape: Shape, values: &[f32], requires_grad: bool) -> Result<Tensor<'s>> {
        if values.len() != shape.numel() {
            return Err(Error::shape(what, format!("{} values for shape {shape}", values.len())));
        }
        let buf = self.alloc(what, shape)?;
        self.copy_in(buf, values)?;
        Ok(self.alias(buf, shape, requires_grad))
    }

    /// Copies host values into `buf`, a step buffer (declared, as a kernel's).
    pub(crate) fn copy_in<T: Element>(&mut self, buf: Buf<T>, values: &[T]) -> Result<()> {
        Ok(self.uses(&[buf.into()]).upload(buf, values)?)
    }

    /// Class labels copied into the step region.
    pub fn labels(&mut self, values: &[u32]) -> Result<Labels<'s>> {
        let buf = self.alloc("labels", Shape::new(&[values.len()]))?;
        self.copy_in(buf, values)?;
        Ok(Labels {
            buf,
            _brand: PhantomData,
        })
    }

    /// Labels already in the step region (made by a gather kernel).
    pub(crate) fn labels_from(&mut self, buf: Buf<u32>) -> Labels<'s> {
        Labels {
            buf,
            _brand: PhantomData,
        }
    }

    /// Copies a tensor to the host; `out` must hold exactly its elements,
    /// in fp32 and NCHW order whatever the tensor's type and layout.
    pub fn read(&mut self, t: Tensor<'s>, out: &mut [f32]) -> Result<()> {
        match t.inner.buf {
            FloatBuf::F32(buf) => self.uses(&[buf.into()]).download(buf, out)?,
            FloatBuf::Bf16(buf) => {
                let mut bits = vec![crate::memory::bf16::ZERO; out.len()];
                self.uses(&[buf.into()]).download(buf, &mut bits)?;
                out.iter_mut().zip(bits).for_each(|(o, b)| *o = b.to_f32());
            }
        }
        if t.layout() == Layout::Nhwc {
            let d = t.shape();
            let (c, hw) = (d.dim(1), d.dim(2) * d.dim(3));
            let nhwc = out.to_vec();
            for (i, v) in out.iter_mut().enumerate() {
                let (n, ch, p) = (i / (c * hw), i / hw % c, i % hw);
                *v = nhwc[(n * hw + p) * c + ch];
            }
        }
        Ok(())
    }

    /// The value of a one-element tensor (a loss).
    pub fn scalar(&mut self, t: Tensor<'s>) -> Result<f32> {
        if t.shape().numel() != 1 {
            return Err(Error::shape(
                "scalar",
                format!("a one-element tensor, got {}", t.shape()),
            ));
        }
        let mut out = [0.0];
        self.read(t, &mut out)?;
        Ok(out[0])
    }

    /// Reverse-mode differentiation of a one-element `loss`.
    pub fn backward(&mut self, loss: Tensor<'s>) -> Result<Grads<'s>> {
        self.backward_with(loss, &mut |_| Ok(()))
    }

    /// [`Step::backward`], calling `after_node` after each recorded op's
    /// backward: data-parallel training starts the sum of a gradient bucket
    /// as soon as backward has produced all of it.
    pub fn backward_with(
        &mut self,
        loss: Tensor<'s>,
        after_node: &mut dyn FnMut(&mut Step<'s, N>) -> Result<()>,
    ) -> Result<Grads<'s>> {
        if loss.shape().numel() != 1 {
            return Err(Error::shape(
                "backward",
                format!("a one-element loss, got {} (use backward_from)", loss.shape()),
            ));
        }
        if loss.dtype() != DType::F32 {
            return Err(Error::shape("backward", format!("an f32 loss, got {}", loss.dtype())));
        }
        let seed = self.alloc::<f32>(GRADIENT_SEED, loss.shape())?;
        self.uses(&[seed.into()]).fill(seed, 1.0)?;
        self.backward_seeded(loss, seed.into(), after_node)
    }

    /// Memory for a gradient contribution to `t`: its slot of the gradient
    /// slab when `t` is a parameter that has no gradient yet, else a new
    /// step buffer. A first contribution is kept as is (see
    /// [`Step::accumulate`]), so it may be written in place.
    pub(crate) fn grad_buffer(&mut self, t: &TensorRef, what: &'static str) -> Result<FloatBuf> {
        let tape = &*self.tape;
        let first = tape.grads.get(t.id as usize).is_some_and(|g| g.is_none());
        if let Some(grad) = self.param_slot(t).filter(|_| first) {
            return Ok(grad.into());
        }
        self.alloc_like(what, t)
    }

    /// Where an op adds its share of `t`'s gradient, and whether to add:
    /// the gradient backward holds for `t` so far, when it has one (so a
    /// product accumulates into it in place, `beta = 1`, rather than into
    /// a buffer of its own that [`Step::accumulate`] then adds: the same
    /// sum, without a buffer of `t`'s size per use and without reading
    /// it twice); else a buffer as [`Step::grad_buffer`] gives, to be
    /// handed to [`Step::accumulate`].
    pub(crate) fn grad_into(&mut self, t: &TensorRef, what: &'static str) -> Result<(FloatBuf, bool)> {
        match self.tape.grads.get(t.id as usize).copied().flatten() {
            Some(existing) => Ok((existing, true)),
            None => Ok((self.grad_buffer(t, what)?, false)),
        }
    }

    /// Whether backward has produced a gradient for `param` so far in this
    /// step (then it is in `param`'s gradient slot).
    pub fn has_param_grad(&mut self, param: &Param) -> bool {
        let tape = &*self.tape;
        let Some(&(_, _, id)) = tape.leaves.iter().find(|(b, _, _)| *b == param.buf) else {
            return false;
        };
        tape.grads.get(id as usize).is_some_and(|g| g.is_some())
    }

    /// Reverse-mode differentiation of any tensor `y` against the upstream
    /// gradient `grad_y` (same shape): computes vector–Jacobian products.
    pub fn backward_from(&mut self, y: Tensor<'s>, grad_y: Tensor<'s>) -> Result<Grads<'s>> {
        if y.shape() != grad_y.shape() {
            return Err(Error::shape(
                "backward_from",
                format!(
                    "gradient of shape {} for a tensor of shape {}",
                    grad_y.shape(),
                    y.shape()
                ),
            ));
        }
        if y.dtype() != grad_y.dtype() || y.layout() != grad_y.layout() {
            return Err(Error::shape(
                "backward_from",
                format!(
                    "a {} {:?} gradient for a {} {:?} tensor",
                    grad_y.dtype(),
                    grad_y.layout(),
                    y.dtype(),
                    y.layout()
                ),
            ));
        }
        self.backward_seeded(y, grad_y.inner.buf, &mut |_| Ok(()))
    }

    fn backward_seeded(
        &mut self,
        y: Tensor<'s>,
        seed: FloatBuf,
        after_node: &mut dyn FnMut(&mut Step<'s, N>) -> Result<()>,
    ) -> Result<Grads<'s>> {
        if !y.requires_grad() {
            return Err(Error::NoGradient);
        }
        let tape = &mut *self.tape;
        tape.recording = false;
        let n = tape.next_id as usize;
        tape.grads.clear();
        tape.grads.resize(n, None);
        tape.grads[y.inner.id as usize] = Some(seed);
        tape.seed = Some(seed);
        let mut i = self.tape.nodes.len();
        while i > 0 {
            i -= 1;
            let node = self.tape.nodes[i];
            node.backward(self)?;
            after_node(self)?;
        }
        Ok(Grads { _brand: PhantomData })
    }

    /// The gradient reaching `t`'s output during backward, if any.
    pub(crate) fn grad_of(&mut self, t: &TensorRef) -> Option<FloatBuf> {
        self.tape.grads.get(t.id as usize).copied().flatten()
    }

    /// Whether the op that made `t` may write over `t`'s gradient in
    /// backward: nothing reads it after that op, unless it is the gradient
    /// backward started from (the caller's, or passed on as is, by a
    /// reshape, from it).
    pub(crate) fn owns_grad(&self, t: &TensorRef) -> bool {
        let tape = &*self.tape;
        tape.grads
            .get(t.id as usize)
            .copied()
            .flatten()
            .is_some_and(|g| Some(g) != tape.seed)
    }

    /// Whether `t` is a parameter of this step (its gradient has a slot).
    pub(crate) fn is_param(&self, t: &TensorRef) -> bool {
        self.tape
            .leaves
            .iter()
            .any(|&(b, _, id)| FloatBuf::F32(b) == t.buf && id == t.id)
    }

    /// Forgets `t`'s gradient: its bytes now hold another tensor's.
    pub(crate) fn release_grad(&mut self, t: &TensorRef) {
        if let Some(g) = self.tape.grads.get_mut(t.id as usize) {
            *g = None;
        }
    }

    /// Adds `g` to the gradient of `t`; the first contribution is kept as
    /// is, but for a parameter's: the optimizer reads a parameter's
    /// gradient from its slot, so a first contribution made anywhere else
    /// (through a view of the weight, as a reshape's backward hands on its
    /// output's) is moved into the slot.
    pub(crate) fn accumulate(&mut self, t: &TensorRef, g: FloatBuf) -> Result<()> {
        let slot = self.tape.grads[t.id as usize];
        match slot {
            None => match self.param_slot(t) {
                Some(own) if FloatBuf::from(own) != g => {
                    self.uses(&[own.into()]).fill(own, 0.0)?;
                    self.uses(&[own.into(), g.into()]).add_assign(own.into(), g)?;
                    self.tape.grads[t.id as usize] = Some(own.into());
                }
                _ => self.tape.grads[t.id as usize] = Some(g),
            },
            Some(existing) => self.uses(&[existing.into(), g.into()]).add_assign(existing, g)?,
        }
        Ok(())
    }

    /// The gradient slot of `t` when it is a parameter of this step.
    fn param_slot(&self, t: &TensorRef) -> Option<Buf<f32>> {
        self.tape
            .leaves
            .iter()
            .find(|&&(b, _, id)| FloatBuf::F32(b) == t.buf && id == t.id)
            .map(|&(_, grad, _)| grad)
            .filter(|grad| grad.len() == t.shape.numel())
    }

    /// The gradient of `t` computed by backward.
    pub fn grad(&mut self, _proof: &Grads<'s>, t: Tensor<'s>) -> Option<Tensor<'s>> {
        let buf = self.grad_of(&t.inner)?;
        Some(self.alias_as(buf, t.shape(), t.layout(), false))
    }

    /// The gradient of a parameter used in this step, branded with the
    /// step: it may lie in the step region, so it must not outlive the step.
    pub fn param_grad(&mut self, _proof: &Grads<'s>, param: &Param) -> Option<Tensor<'s>> {
        let tape = &*self.tape;
        let &(_, _, id) = tape.leaves.iter().find(|(b, _, _)| *b == param.buf)?;
        let buf = tape.grads.get(id as usize).copied().flatten()?;
        Some(self.alias(buf, param.shape, false))
    }
}
