//! bumpgrad: deep-learning training whose memory is an arena.
//!
//! One allocation per device at start-up; a persistent region (parameters,
//! optimizer state, the data set), a mark, and a step region that every
//! minibatch allocates into — by a liveness plan that reuses the bytes of
//! dead buffers, or by bumping — and that is reset to the mark after it.
//! Step tensors carry the step's lifetime, so keeping one past its reset
//! does not compile. On a GPU a whole step is captured once as a CUDA graph.
//!
//! The crate, from the bottom up (the layers of `docs/ARCHITECTURE.md`):
//! - [`rng`]: the small PRNG that initialisation, shuffling and dropout
//!   share, below every layer that draws numbers;
//! - [`base`]: typed handles, element types, shapes, layouts, byte sizes:
//!   the vocabulary every layer shares;
//! - [`memory`]: the arena, its regions, statistics, liveness plans, the
//!   memory report: offsets only, no device;
//! - [`backend`]: the runtime, where memory lives and kernels run (CPU,
//!   CUDA, and a dry backend for steps that only plan), and the compute
//!   policy — the home of `unsafe`, but for two `libc` calls in
//!   `distributed::launcher` (signalling the ranks' process group, and
//!   `_exit`);
//! - [`tensor`]: step tensors, persistent parameters and data sets, and the
//!   persistent region's allocator;
//! - [`autograd`]: the engine (a runtime, its arena, the tape) that
//!   assembles each step, the tape and backward, generic over the node set
//!   the op registry hands it (it names no op);
//! - [`ops`]: one folder per op — forward, backward, kernels, tests — and
//!   the registry, one line per op, whose node set makes `Step` and
//!   `Engine`; the one launch helper that matches on the device; the
//!   learning-rate lookup and the gradient checker;
//! - [`nn`]: parameters with names in slabs (`ParamBuilder`,
//!   `ParamStore`), PyTorch's initialisations, layers that pair parameters
//!   with their op, and the `Model` and `Optimizer` traits;
//! - [`data`]: IDX files, MNIST, CIFAR-10, the epoch's shuffled order, and
//!   the set uploaded once into the persistent region;
//! - [`tasks`]: what a batch means — its input and targets at the cursor,
//!   the loss, the metric (image classification);
//! - [`models`]: networks built from ops and `nn` (the MNIST CNN, ResNet-18
//!   and -50, SqueezeNet);
//! - [`optim`]: optimizers updating the parameter slab in place;
//! - [`distributed`]: data-parallel training — a rank's place from its
//!   environment, the rendezvous (strangers on its port dropped; with the
//!   job's token, only its ranks admitted) and the watch of the formed
//!   group, the `--gpus` launcher, gradient buckets summed during backward,
//!   running one rank;
//! - [`checkpoint`]: a run's state as atomic, checksummed safetensors files;
//! - [`train`]: one pipeline from a run's settings to a session in an arena
//!   sized for it (dry runs, memory budget, convolution tuning, plans), the
//!   session's epochs, checkpoints and resume, reports; one entry point
//!   that trains, [`train::train`], used by the CLI, which also asks it
//!   for `bumpgrad memory`'s report and largest batch.
//!
//! The binary (`src/bin/bumpgrad/`) parses flags, picks the model,
//! optimizer and task by name, calls the library and prints. The crate's
//! [`Error`] sits at the bottom with [`rng`], though it still wraps the
//! errors of layers above it.
//!
//! A step in miniature: one named parameter in a store, three steps of SGD.
//!
//! ```
//! use bumpgrad::nn::{Init, OptimizerConfig, ParamStore};
//! use bumpgrad::ops::{cross_entropy::CrossEntropyArgs, cursor::StepCursor, lr::LrAt};
//! use bumpgrad::optim::SgdConfig;
//! use bumpgrad::{Device, Engine, Shape};
//!
//! let mut engine = Engine::new(Device::cpu(1)?, 1 << 20)?;
//! let mut p = engine.persistent();
//! // Parameters are declared by name; the store lays them out in one slab.
//! let (store, w) = ParamStore::build(&mut p, 42, |pb| {
//!     pb.pp("fc").param("weight", Shape::new(&[2, 2]), Init::Constant(0.25))
//! })?;
//! let cursor = StepCursor::new(&mut p)?;
//! let lr = LrAt { table: p.upload("learning rate", Shape::new(&[1]), &[0.5])?, cursor };
//! let sgd = SgdConfig::default().build(&store, &mut p, lr)?;
//! let mut losses = Vec::new();
//! for _ in 0..3 {
//!     let loss: f32 = engine.step(|s| {
//!         let x = s.input("x", Shape::new(&[1, 2]), &[1.0, 2.0])?; // a Tensor<'s>
//!         let weight = s.param(&w);
//!         let labels = s.labels(&[1])?;
//!         let loss = x.linear(s, weight, None)?.cross_entropy(s, labels, CrossEntropyArgs::default())?;
//!         let grads = s.backward(loss)?; // into the gradient slab
//!         sgd.update(s, &store, &grads)?;
//!         s.scalar(loss) // the f32 leaves the step; no tensor can
//!     })?; // the step region is reset to the mark here
//!     losses.push(loss);
//! }
//! assert!(losses[2] < losses[1] && losses[1] < losses[0]);
//! assert_eq!(engine.arena().stats().resets, 3);
//! assert_eq!(store.name(&w), "fc.weight");
//! # Ok::<(), bumpgrad::Error>(())
//! ```

#![warn(missing_docs)]

pub mod autograd;
pub mod backend;
pub mod base;
pub mod checkpoint;
pub mod data;
pub mod distributed;
mod error;
pub mod memory;
pub mod models;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod rng;
pub mod tasks;
pub mod tensor;
pub mod train;

// The README's code sample is a doctest, so the front page cannot drift
// from the API it teaches.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

pub use autograd::Grads;
pub use backend::{Device, DeviceRequest};
pub use error::{Error, Result, Setting};
pub use memory::{Arena, ArenaError, ArenaStats, ByteSize, DType};
pub use ops::{Engine, Step};
pub use tensor::{Labels, Layout, Param, Shape, Tensor};
