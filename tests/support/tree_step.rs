//! One step of a small Tree-LSTM over three trees against PyTorch's float64
//! answer (`bench/tree_step.py`, run where PyTorch is, wrote
//! `tests/fixtures/tree_lstm/`): bumpgrad loads the fixture's float32
//! weights by name into an embedding, `nn::TreeLstm` and a classifier,
//! runs the trees one node at a time or level by level, and the backward of
//! the cross-entropy summed over every node; the loss, every node's logits
//! and every gradient must land within 1e-4 of their scale. Shared by the
//! CPU test (`tests/trees.rs`) and the GPU test (`tests/gpu/sequences.rs`).

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

// The includer provides `lstm_step` (support/lstm_step.rs) beside this
// module: its fixture loader.
use super::lstm_step;

use bumpgrad::data::text::{Node, Tree};
use bumpgrad::nn::{Embedding, Forest, Linear, ParamStore, TreeLstm, TreeNode};
use bumpgrad::ops::cross_entropy::CrossEntropyArgs;
use bumpgrad::{Device, Engine, Shape};
pub use lstm_step::Tensors;
use std::path::{Path, PathBuf};

/// Each tensor must land within this fraction of its scale (the largest
/// magnitude of PyTorch's answer): the bound.
pub const TOLERANCE: f32 = 1e-4;

/// `bench/tree_step.py`'s `TREES`.
pub const TREES: [&str; 3] = [
    "(3 (2 It) (4 (2 's) (2 fine)))",
    "(1 bad)",
    "(2 (2 (1 a) (3 b)) (2 (0 c) (4 (2 d) (1 e))))",
];

/// A treebank tree's shape, as the layer reads it.
fn shape(tree: &Tree) -> Vec<TreeNode> {
    tree.nodes()
        .iter()
        .map(|n| match *n {
            Node::Leaf { word, .. } => TreeNode::Leaf { word },
            Node::Inner { left, right, .. } => TreeNode::Inner { left, right },
        })
        .collect()
}

fn dir() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tree_lstm")).to_path_buf()
}

/// The step on `device` from the fixture's weights, the trees' nodes run
/// level by level (`levels`) or one at a time: the loss, the logits and
/// `grad.<name>` of every parameter; `None` (saying so) while the fixture
/// is absent.
pub fn bumpgrad_step(device: Device, levels: bool) -> Option<Tensors> {
    if !dir().join("step.safetensors").is_file() {
        eprintln!(
            "SKIPPED the tree-lstm fixture step: {} is absent (python3 bench/tree_step.py writes it)",
            dir().display()
        );
        return None;
    }
    let weights = lstm_step::load_file(&dir().join("weights.safetensors"));
    let step = lstm_step::load_file(&dir().join("step.safetensors"));
    let trees: Vec<Vec<TreeNode>> = TREES.iter().map(|l| shape(&Tree::parse(l).expect("a tree"))).collect();
    let refs: Vec<&[TreeNode]> = trees.iter().map(Vec::as_slice).collect();
    let forest = Forest::new(&refs).expect("the fixture's trees");
    let words: Vec<u32> = step["words"].1.iter().map(|&w| w as u32).collect();
    let labels: Vec<u32> = step["labels"].1.iter().map(|&l| l as u32).collect();
    let (vocab, embed) = (weights["embedding.weight"].0[0], weights["embedding.weight"].0[1]);
    let (hidden, classes) = (weights["tree.left"].0[1], weights["fc.bias"].0[0]);
    // Unplanned, one tree node at a time: on the GPU every product takes
    // its own cuBLAS workspace (256 KiB) in the step region.
    let mut engine = Engine::new(device, 64 << 20).expect("arena");
    engine.arena_mut().set_poison_step(true);
    let (store, (embedding, tree_lstm, fc)) = ParamStore::build(&mut engine.persistent(), 1, |pb| {
        Ok((
            Embedding::new(&pb.pp("embedding"), vocab, embed)?,
            TreeLstm::new(&pb.pp("tree"), embed, hidden)?,
            Linear::new(&pb.pp("fc"), hidden, classes)?,
        ))
    })
    .expect("the model");
    let params = lstm_step::load_weights(&mut engine, &store, &weights);
    // Summed over the nodes: each row's loss weighs N in a mean over N.
    let nodes = labels.len();
    let w = vec![nodes as f32; nodes];
    let w = engine.persistent().upload("weights", Shape::new(&[nodes]), &w).unwrap();
    let ours = engine
        .step(|s| {
            let ids = s.labels(&words)?;
            let x = embedding.forward(s, ids)?;
            let h = match levels {
                true => tree_lstm.forward_levels(s, x, &forest)?,
                false => tree_lstm.forward_post_order(s, x, &forest)?,
            };
            let y = fc.forward(s, h)?;
            let targets = s.labels(&labels)?;
            let args = CrossEntropyArgs {
                weights: Some(w),
                ..CrossEntropyArgs::default()
            };
            let loss = y.cross_entropy(s, targets, args)?;
            let grads = s.backward(loss)?;
            let mut out = Tensors::new();
            out.insert("loss".into(), (vec![1], lstm_step::read(s, loss)?));
            out.insert("logits".into(), (vec![nodes, classes], lstm_step::read(s, y)?));
            lstm_step::insert_grads(s, &grads, &store, &params, &mut out)?;
            Ok(out)
        })
        .expect("the step");
    Some(ours)
}

/// Every tensor of the fixture's answer within [`TOLERANCE`] of its scale
/// in `ours`, each one's error printed.
pub fn assert_matches_pytorch(what: &str, ours: &Tensors) {
    let step = lstm_step::load_file(&dir().join("step.safetensors"));
    let compared = lstm_step::assert_within(what, &step, &["words", "labels"], ours, TOLERANCE);
    assert_eq!(compared, 2 + 8, "{what}: the loss, the logits and eight gradients");
}
