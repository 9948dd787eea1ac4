//! Parameters with names, in slabs.
//!
//! A model declares its parameters on a [`ParamBuilder`] as it is built:
//! `pb.pp("layer1").pp("0").pp("conv1").param("weight", …)` names one
//! `layer1.0.conv1.weight`, the name PyTorch's `state_dict` gives it, with no
//! hand-kept list. [`ParamStore::build`] builds the model twice: once to
//! learn every declaration (names, shapes, initialisers), then, after
//! allocating, to hand out the real handles. So a planning engine sizes the
//! parameters before a real arena allocates them.
//!
//! The store puts every trainable parameter in one persistent slab, every
//! gradient in a second slab of the same layout, and the non-trainable
//! buffers (batch-norm running statistics) in a third (llm.c's layout).
//! Each slab starts on a 1 KiB boundary and each entry 512 bytes past one
//! (so 256-byte aligned, as every buffer; see [`ENTRY_PHASE`] for why), and
//! the padding between entries is zero, in values and gradients alike. So an optimizer is one flat
//! launch over the slab, a data-parallel gradient bucket is a slice of it,
//! and replicas are synchronised by one sum per slab. Backward writes each
//! parameter's gradient straight into its slot ([`Param::grad`]).

use super::init::{kaiming_uniform_fan_in, normal, uniform_fan_in};
use crate::memory::{Buf, ALIGN};
use crate::rng::SplitMix64;
use crate::tensor::{Param, Persistent, Shape};
use crate::{Error, Result};
use std::cell::RefCell;

/// Every slab starts on a multiple of this many bytes, and every entry
/// [`ENTRY_PHASE`] bytes past one.
const SLAB_ALIGN: usize = 1024;

/// Where an entry starts within a [`SLAB_ALIGN`] block: half-way, so a small
/// entry (a convolution's few hundred weights) straddles two 1 KiB blocks
/// instead of filling one. cuDNN's fastest weight-gradient algorithms sum
/// into the gradient with atomics, whose throughput is per L2 slice and so
/// per address block: on the H200 the MNIST CNN's weight-gradient
/// convolutions took 208–227 µs a step with their gradients starting 512
/// bytes past a 1 KiB boundary and 244–265 µs anywhere else (a sweep over
/// 32 offsets of the gradient slab, batch 1000). A multiple of 256 bytes,
/// the arena's alignment.
const ENTRY_PHASE: usize = 512;

const _: () = assert!(ENTRY_PHASE.is_multiple_of(ALIGN) && ENTRY_PHASE < SLAB_ALIGN);

/// The first element at or after `fill` where an entry may start.
fn entry_start(fill: usize) -> usize {
    let (block, phase) = (SLAB_ALIGN / 4, ENTRY_PHASE / 4);
    (fill + block - phase).next_multiple_of(block) - (block - phase)
}

/// How a declared tensor gets its first values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// `U(-1/√fan_in, 1/√fan_in)`, PyTorch's default for linear and
    /// convolution weights and biases, drawn from the store's generator in
    /// declaration order.
    UniformFanIn(usize),
    /// `U(-√(6/fan_in), √(6/fan_in))`: `kaiming_uniform_` with its
    /// defaults (torchvision's SqueezeNet convolutions).
    KaimingUniformFanIn(usize),
    /// `N(0, 2/fan_out)`: `kaiming_normal_(mode="fan_out",
    /// nonlinearity="relu")` (torchvision's ResNet convolutions).
    KaimingNormalFanOut(usize),
    /// `N(0, std²)` (SqueezeNet's final convolution: 0.01).
    Normal(f32),
    /// Every element the same (batch-norm weight 1, bias 0, running
    /// variance 1).
    Constant(f32),
}

/// Whether an entry is trained or only kept (and checkpointed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Trained: it has a gradient, and the optimizer updates it.
    Param,
    /// Kept, not trained (batch-norm's running statistics).
    Buffer,
}

/// One declared tensor and where it lies in its slab.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Its name, as PyTorch's `state_dict` gives it (`layer1.0.conv1.weight`).
    pub name: String,
    /// Its shape.
    pub shape: Shape,
    /// Trained or only kept.
    pub kind: Kind,
    /// How its values start.
    pub init: Init,
    /// Elements from the start of its slab (a multiple of 64: 256 bytes).
    pub start: usize,
    /// Whether an optimizer's weight decay applies to it (all but a
    /// parameter declared without, as Tai et al.'s word embedding).
    pub decays: bool,
}

impl Entry {
    /// Its elements.
    pub fn len(&self) -> usize {
        self.shape.numel()
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The declarations of a model, in order.
#[derive(Debug, Default, Clone)]
struct Layout {
    entries: Vec<Entry>,
    /// Elements each slab spans so far.
    params: usize,
    buffers: usize,
}

/// Where the slabs are once allocated.
#[derive(Debug, Clone, Copy)]
struct Slabs {
    values: Buf<f32>,
    grads: Buf<f32>,
    buffers: Buf<f32>,
}

#[derive(Debug, Default)]
struct Shared {
    layout: Layout,
    /// `None` while only declarations are collected.
    slabs: Option<Slabs>,
    /// The next entry, when handing out handles of a known layout.
    next: usize,
}

/// Declares a model's parameters under a prefix; [`ParamBuilder::pp`] makes
/// a child with a longer one. Builders of one model share one layout.
pub struct ParamBuilder<'a> {
    shared: &'a RefCell<Shared>,
    prefix: String,
}

impl<'a> ParamBuilder<'a> {
    /// A builder whose names start with `self`'s prefix, then `name`.
    pub fn pp(&self, name: impl std::fmt::Display) -> ParamBuilder<'a> {
        let prefix = match self.prefix.is_empty() {
            true => name.to_string(),
            false => format!("{}.{name}", self.prefix),
        };
        ParamBuilder {
            shared: self.shared,
            prefix,
        }
    }

    /// The full name `name` gets under this builder's prefix.
    pub fn name(&self, name: &str) -> String {
        match self.prefix.is_empty() {
            true => name.to_string(),
            false => format!("{}.{name}", self.prefix),
        }
    }

    /// A trainable parameter `name` of `shape`, initialised by `init`.
    pub fn param(&self, name: &str, shape: Shape, init: Init) -> Result<Param> {
        self.declare(name, shape, init, Kind::Param, true)
    }

    /// A trainable parameter that no optimizer's weight decay reaches (a
    /// PyTorch parameter group of `weight_decay=0`).
    pub fn param_without_decay(&self, name: &str, shape: Shape, init: Init) -> Result<Param> {
        self.declare(name, shape, init, Kind::Param, false)
    }

    /// A non-trainable buffer (saved in checkpoints, never given a gradient).
    pub fn buffer(&self, name: &str, shape: Shape, init: Init) -> Result<Param> {
        self.declare(name, shape, init, Kind::Buffer, false)
    }

    fn declare(&self, name: &str, shape: Shape, init: Init, kind: Kind, decays: bool) -> Result<Param> {
        let full = self.name(name);
        let mut shared = self.shared.borrow_mut();
        let index = match shared.slabs {
            None => {
                if shared.layout.entries.iter().any(|e| e.name == full) {
                    return Err(Error::Config(format!("the model declares {full} twice")));
                }
                let layout = &mut shared.layout;
                let fill = match kind {
                    Kind::Param => &mut layout.params,
                    Kind::Buffer => &mut layout.buffers,
                };
                let start = entry_start(*fill);
                *fill = start + shape.numel();
                layout.entries.push(Entry {
                    name: full,
                    shape,
                    kind,
                    init,
                    start,
                    decays,
                });
                layout.entries.len() - 1
            }
            Some(_) => {
                let index = shared.next;
                match shared.layout.entries.get(index) {
                    Some(e) if e.name == full && e.shape == shape && e.kind == kind && e.decays == decays => {}
                    _ => {
                        return Err(Error::Config(format!(
                            "the model declared {full} {shape} where its first build had another tensor: a model must declare the same parameters every time it is built"
                        )))
                    }
                }
                shared.next += 1;
                index
            }
        };
        Ok(handle(&shared, index))
    }
}

/// The handle of entry `index`: real buffers once the slabs exist, empty
/// ones while declarations are only collected.
fn handle(shared: &Shared, index: usize) -> Param {
    let e = &shared.layout.entries[index];
    let (buf, grad) = match (shared.slabs, e.kind) {
        (None, _) => (Buf::default(), Buf::default()),
        (Some(s), Kind::Param) => (slot(s.values, e), slot(s.grads, e)),
        (Some(s), Kind::Buffer) => (slot(s.buffers, e), Buf::default()),
    };
    Param {
        index: index as u32,
        buf,
        grad,
        shape: e.shape,
    }
}

fn slot(slab: Buf<f32>, e: &Entry) -> Buf<f32> {
    slab.slice(e.start, e.len())
        .expect("an entry lies inside its slab by construction")
}

/// Every parameter, gradient and buffer of a model, in the persistent region.
#[derive(Debug)]
pub struct ParamStore {
    entries: Vec<Entry>,
    slabs: Slabs,
}

impl ParamStore {
    /// Builds a model with `build`, declaring its parameters on a builder,
    /// allocates the slabs in `p`, fills them (initialisers drawn from
    /// `seed`, in declaration order; gradients zero), and builds the model
    /// again with handles into them.
    pub fn build<M>(
        p: &mut Persistent<'_>,
        seed: u64,
        build: impl Fn(&ParamBuilder<'_>) -> Result<M>,
    ) -> Result<(Self, M)> {
        let shared = RefCell::new(Shared::default());
        build(&ParamBuilder {
            shared: &shared,
            prefix: String::new(),
        })?;
        let mut layout = shared.borrow().layout.clone();
        // Whole blocks: the gradient slab, right after the values, starts on
        // a block boundary too.
        layout.params = layout.params.next_multiple_of(SLAB_ALIGN / 4);
        layout.buffers = layout.buffers.next_multiple_of(SLAB_ALIGN / 4);
        let gap = p.offset().next_multiple_of(SLAB_ALIGN) - p.offset();
        if gap > 0 {
            p.alloc::<u8>("slab alignment", Shape::new(&[gap]))?;
        }
        let mut values = vec![0.0; layout.params];
        let mut buffers = vec![0.0; layout.buffers];
        let mut rng = SplitMix64::new(seed);
        // A planning engine keeps no values: drawing them (23 M normals for a
        // ResNet-50) was 90% of a dry run's time, and a memory budget's
        // search makes dozens of dry runs.
        let entries = if p.holds_values() { &layout.entries[..] } else { &[] };
        for e in entries {
            let slab = match e.kind {
                Kind::Param => &mut values,
                Kind::Buffer => &mut buffers,
            };
            let dst = &mut slab[e.start..e.start + e.len()];
            match e.init {
                Init::UniformFanIn(fan_in) => dst.copy_from_slice(&uniform_fan_in(&mut rng, fan_in, e.len())),
                Init::KaimingUniformFanIn(fan_in) => {
                    dst.copy_from_slice(&kaiming_uniform_fan_in(&mut rng, fan_in, e.len()))
                }
                Init::KaimingNormalFanOut(fan_out) => {
                    dst.copy_from_slice(&normal(&mut rng, (2.0 / fan_out as f32).sqrt(), e.len()))
                }
                Init::Normal(std) => dst.copy_from_slice(&normal(&mut rng, std, e.len())),
                Init::Constant(v) => dst.fill(v),
            }
        }
        let slabs = Slabs {
            values: p.upload("parameters", Shape::new(&[layout.params]), &values)?,
            grads: p.zeros::<f32>("gradients", Shape::new(&[layout.params]))?,
            // A model without buffers has no slab of them.
            buffers: match layout.buffers {
                0 => Buf::default(),
                n => p.upload("buffers", Shape::new(&[n]), &buffers)?,
            },
        };
        {
            let mut s = shared.borrow_mut();
            s.slabs = Some(slabs);
            s.next = 0;
        }
        let model = build(&ParamBuilder {
            shared: &shared,
            prefix: String::new(),
        })?;
        let s = shared.borrow();
        if s.next != layout.entries.len() {
            return Err(Error::Config(format!(
                "the model declared {} tensors on its second build and {} on its first: a model must declare the same parameters every time it is built",
                s.next,
                layout.entries.len()
            )));
        }
        Ok((
            Self {
                entries: layout.entries,
                slabs,
            },
            model,
        ))
    }

    /// Every declared tensor, in declaration order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Whether weight decay applies to `param` (see
    /// [`ParamBuilder::param_without_decay`]).
    pub fn decays(&self, param: &Param) -> bool {
        self.entries.get(param.index as usize).is_some_and(|e| e.decays)
    }

    /// The trainable parameters, in declaration order (a PyTorch
    /// `state_dict`'s order for a model declared in its module order).
    pub fn params(&self) -> impl DoubleEndedIterator<Item = Param> + '_ {
        (0..self.entries.len())
            .filter(|&i| self.entries[i].kind == Kind::Param)
            .map(|i| self.handle(i))
    }

    /// The handle of entry `index`.
    pub fn handle(&self, index: usize) -> Param {
        let e = &self.entries[index];
        let (buf, grad) = match e.kind {
            Kind::Param => (slot(self.slabs.values, e), slot(self.slabs.grads, e)),
            Kind::Buffer => (slot(self.slabs.buffers, e), Buf::default()),
        };
        Param {
            index: index as u32,
            buf,
            grad,
            shape: e.shape,
        }
    }

    /// The name of a parameter or buffer of this store.
    pub fn name(&self, param: &Param) -> &str {
        self.entries.get(param.index as usize).map_or("?", |e| &e.name)
    }

    /// Walks every parameter and buffer by name: its values, and its
    /// gradient slot (empty for a buffer). Checkpoints, replica
    /// synchronisation and reports all walk this.
    pub fn visit(&self, f: &mut dyn FnMut(&Entry, Param)) {
        for (i, e) in self.entries.iter().enumerate() {
            f(e, self.handle(i));
        }
    }

    /// Every parameter's values, padding included.
    pub fn values(&self) -> Buf<f32> {
        self.slabs.values
    }

    /// Every parameter's gradient slot, padding included (zero).
    pub fn grads(&self) -> Buf<f32> {
        self.slabs.grads
    }

    /// Every buffer's values.
    pub fn buffers(&self) -> Buf<f32> {
        self.slabs.buffers
    }

    /// Trainable elements (without padding).
    pub fn param_count(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.kind == Kind::Param)
            .map(Entry::len)
            .sum()
    }

    /// A slab shaped like the parameter slab, for optimizer state (zeros).
    pub fn zeros_like_values(&self, p: &mut Persistent<'_>, what: &'static str) -> Result<Buf<f32>> {
        p.zeros::<f32>(what, Shape::new(&[self.slabs.values.len()]))
    }

    /// The part of `slab` (laid out like the parameter slab) that holds `param`.
    pub fn slot_in(&self, slab: Buf<f32>, param: &Param) -> Option<Buf<f32>> {
        let e = self.entries.get(param.index as usize)?;
        (e.kind == Kind::Param).then(|| slab.slice(e.start, e.len())).flatten()
    }

    /// The range of `slab` (laid out like the parameter slab) from
    /// `first`'s slot to the end of `last`'s, parameters in declaration
    /// order: several entries as one slice (an optimizer's run, a bucket).
    pub fn span(&self, slab: Buf<f32>, first: &Param, last: &Param) -> Result<Buf<f32>> {
        let entry = |p: &Param| self.entries.get(p.index as usize);
        let slice = match (entry(first), entry(last)) {
            (Some(a), Some(b)) => (b.start + b.len())
                .checked_sub(a.start)
                .and_then(|n| slab.slice(a.start, n)),
            _ => None,
        };
        slice.ok_or_else(|| Error::Config("internal error: a run of parameters outside its slab".into()))
    }
}

/// Counts a model's trainable elements without an arena (`bumpgrad models`).
pub fn count_params<M>(build: impl Fn(&ParamBuilder<'_>) -> Result<M>) -> Result<usize> {
    let shared = RefCell::new(Shared::default());
    build(&ParamBuilder {
        shared: &shared,
        prefix: String::new(),
    })?;
    let layout = &shared.borrow().layout;
    Ok(layout
        .entries
        .iter()
        .filter(|e| e.kind == Kind::Param)
        .map(Entry::len)
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Device;
    use crate::Engine;

    /// A block like ResNet's: two convolutions and a batch-norm's buffer,
    /// declared under prefixes.
    fn block(pb: &ParamBuilder<'_>) -> Result<Vec<Param>> {
        let conv = pb.pp("conv1");
        let bn = pb.pp("bn1");
        Ok(vec![
            conv.param("weight", Shape::new(&[4, 3, 3, 3]), Init::UniformFanIn(27))?,
            bn.param("weight", Shape::new(&[4]), Init::Constant(1.0))?,
            bn.buffer("running_var", Shape::new(&[4]), Init::Constant(1.0))?,
            bn.param("bias", Shape::new(&[4]), Init::Constant(0.0))?,
            pb.pp("conv2")
                .param("weight", Shape::new(&[65]), Init::Constant(-2.0))?,
        ])
    }

    fn store() -> (Engine, ParamStore, Vec<Param>) {
        let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
        let (store, params) =
            ParamStore::build(&mut engine.persistent(), 3, |pb| block(&pb.pp("layer1").pp(0))).unwrap();
        (engine, store, params)
    }

    #[test]
    fn names_follow_the_prefixes_in_declaration_order() {
        let (_, store, params) = store();
        let names: Vec<&str> = params.iter().map(|p| store.name(p)).collect();
        assert_eq!(
            names,
            [
                "layer1.0.conv1.weight",
                "layer1.0.bn1.weight",
                "layer1.0.bn1.running_var",
                "layer1.0.bn1.bias",
                "layer1.0.conv2.weight",
            ]
        );
        let mut visited = Vec::new();
        store.visit(&mut |e, p| visited.push((e.name.clone(), e.kind, p)));
        assert_eq!(visited.len(), 5, "visit walks parameters and buffers");
        assert_eq!(visited[2].1, Kind::Buffer);
        assert_eq!(visited.iter().map(|v| v.2).collect::<Vec<_>>(), params);
        let trainable: Vec<Param> = store.params().collect();
        assert_eq!(trainable, [params[0], params[1], params[3], params[4]]);
        assert_eq!(store.param_count(), 108 + 4 + 4 + 65);
    }

    #[test]
    fn parameters_and_gradients_lie_in_two_slabs_of_one_layout() {
        let (mut engine, store, params) = store();
        let (values, grads) = (store.values(), store.grads());
        assert_eq!(values.offset() % SLAB_ALIGN, 0);
        assert_eq!(grads.offset() % SLAB_ALIGN, 0);
        let mut end = values.offset();
        for p in store.params() {
            let (v, g) = (p.buf(), p.grad());
            assert_eq!((v.len(), g.len()), (p.shape().numel(), p.shape().numel()));
            assert_eq!(v.offset() % SLAB_ALIGN, ENTRY_PHASE, "512 bytes past a 1 KiB boundary");
            assert_eq!(v.offset() % ALIGN, 0, "so 256-byte aligned");
            assert!(v.offset() >= end, "in order, without overlap");
            end = v.byte_range().end;
            assert!(end <= values.byte_range().end);
            assert_eq!(v.offset() - values.offset(), g.offset() - grads.offset(), "same layout");
        }
        // Starts at 128, 384, 640 and 896 elements; whole 256-element blocks.
        assert_eq!(values.len(), 1024);
        let buffer = params[2];
        assert!(buffer.grad().is_empty(), "a buffer has no gradient slot");
        assert!(store.buffers().byte_range().contains(&buffer.buf().offset()));

        let mut host = vec![f32::NAN; values.len()];
        engine.read_persistent(values, &mut host).unwrap();
        let conv1 = &host[128..236];
        assert!(conv1.iter().all(|v| v.abs() <= 1.0 / 27f32.sqrt() && *v != 0.0));
        let zero = |r: std::ops::Range<usize>| host[r].iter().all(|&v| v == 0.0);
        assert!(zero(0..128) && zero(236..384) && zero(388..640), "padding is zero");
        assert_eq!(&host[384..388], [1.0; 4]);
        assert_eq!(&host[640..644], [0.0; 4]);
        assert_eq!(&host[896..961], [-2.0; 65]);
        assert!(zero(961..1024));
        let mut g = vec![f32::NAN; grads.len()];
        engine.read_persistent(grads, &mut g).unwrap();
        assert!(g.iter().all(|&v| v == 0.0), "gradients start at zero");
        let mut b = vec![0.0; 4];
        engine.read_persistent(buffer.buf(), &mut b).unwrap();
        assert_eq!(b, [1.0; 4]);
    }

    #[test]
    fn entries_start_half_way_into_a_block() {
        assert_eq!(
            [0, 1, 128, 129, 384, 385].map(entry_start),
            [128, 128, 128, 384, 384, 640]
        );
    }

    #[test]
    fn a_name_declared_twice_is_refused() {
        let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
        let twice = ParamStore::build(&mut engine.persistent(), 1, |pb| {
            pb.pp("fc").param("weight", Shape::new(&[2]), Init::Constant(0.0))?;
            pb.pp("fc").param("weight", Shape::new(&[2]), Init::Constant(0.0))
        });
        let err = twice.unwrap_err().to_string();
        assert!(err.contains("declares fc.weight twice"), "{err}");
    }

    #[test]
    fn a_model_that_declares_otherwise_the_second_time_is_refused() {
        let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
        let calls = std::cell::Cell::new(0);
        let fickle = ParamStore::build(&mut engine.persistent(), 1, |pb| {
            calls.set(calls.get() + 1);
            pb.param("w", Shape::new(&[calls.get()]), Init::Constant(0.0))
        });
        let err = fickle.unwrap_err().to_string();
        assert!(err.contains("same parameters every time"), "{err}");
    }

    #[test]
    fn the_same_seed_draws_the_same_values() {
        let draw = |seed| {
            let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
            let (store, _) = ParamStore::build(&mut engine.persistent(), seed, block).unwrap();
            let mut host = vec![0.0; store.values().len()];
            engine.read_persistent(store.values(), &mut host).unwrap();
            host
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }

    #[test]
    fn counting_needs_no_arena() {
        assert_eq!(count_params(block).unwrap(), 108 + 4 + 4 + 65);
    }

    #[test]
    fn a_parameter_gradient_lands_in_its_persistent_slot() {
        let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
        let (store, w) = ParamStore::build(&mut engine.persistent(), 1, |pb| {
            pb.pp("fc").param("weight", Shape::new(&[1, 4]), Init::Constant(0.5))
        })
        .unwrap();
        assert!(
            w.grad().byte_range().end <= engine.arena().stats().persistent_bytes,
            "below the mark"
        );
        assert_eq!(store.name(&w), "fc.weight");
        engine
            .step(|s| {
                // The weight gradient of `x · wᵀ` is `x`.
                let x = s.input("x", Shape::new(&[1, 4]), &[1.0, 2.0, 3.0, 4.0])?;
                let w_in_step = s.param(&w);
                let y = x.linear(s, w_in_step, None)?;
                let one = s.input("upstream", y.shape(), &[1.0])?;
                let grads = s.backward_from(y, one)?;
                assert!(s.has_param_grad(&w));
                let g = s.param_grad(&grads, &w).expect("w has a gradient");
                let mut host = [0.0; 4];
                s.read(g, &mut host)?;
                assert_eq!(host, [1.0, 2.0, 3.0, 4.0]);
                Ok(())
            })
            .unwrap();
        let mut landed = [0.0; 4];
        engine.read_persistent(w.grad(), &mut landed).unwrap();
        assert_eq!(
            landed,
            [1.0, 2.0, 3.0, 4.0],
            "the gradient was written into its slot of the gradient slab"
        );
    }
}
