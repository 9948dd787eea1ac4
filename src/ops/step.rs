//! The step and the engine users hold, `bumpgrad::Step<'s>` and
//! `bumpgrad::Engine`: autograd's, over the registry's node set. Autograd
//! does the work for any node set; these name ours, so that a step's
//! closure needs no type annotation.

use super::tape::Node;
use crate::autograd;

/// One step of work: the scope in which tensors exist. `'s` brands every
/// tensor made here; ops record on its tape (see [`autograd::Step`]).
pub type Step<'s> = autograd::Step<'s, Node>;

/// Where steps run: an arena and the tape of its steps (see
/// [`autograd::Engine`]).
pub type Engine = autograd::Engine<Node>;
