//! `TreeLstm`: the binary constituency Tree-LSTM of Tai et al. (2015), as
//! Lantern's sentiment model defines it, over trees whose leaves are given
//! as word vectors. A leaf reads its word: gates `W·x + b_leaf` (i, o, u);
//! an inner node reads its children's states: gates `U_l·h_l + U_r·h_r +
//! b` (i, f_l, f_r, o, u), a forget gate for each child's cell (the
//! `tree_lstm_cell` op holds the equations).
//!
//! Two ways to run a batch of trees, giving the same numbers:
//! - [`TreeLstm::forward_post_order`], every node one at a time, each
//!   tree in post-order, as Lantern and the PyTorch of the paper ran it;
//! - [`TreeLstm::forward_levels`], every node of one height across the
//!   trees at once (the dynamic batching of TensorFlow Fold and DyNet):
//!   one product and one cell per level, the children's states gathered
//!   from the levels below.
//!
//! Both give every node's `h`, `[Σ nodes, H]`, tree by tree, each tree's
//! nodes in its post-order (root last), so a classifier over every node
//! reads the same rows either way.
//!
//! A tree is its shape alone, [`TreeNode`]s in post-order: the layer reads
//! no file format (a treebank's trees are turned into these above it).

/// One node of a binary tree as [`TreeLstm`] reads it. A tree is a slice
/// of them in post-order: children before their parent, the root last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeNode {
    /// A leaf reading row `word` of its tree's word vectors (its place in
    /// the sentence).
    Leaf {
        /// The leaf's word, by its place in the sentence.
        word: u32,
    },
    /// An inner node over two earlier nodes of the same tree.
    Inner {
        /// The left child, by its index in the tree's nodes.
        left: u32,
        /// The right child, by its index in the tree's nodes.
        right: u32,
    },
}

/// `[N, A]` and `[N, B]` side by side, `[N, A + B]`: each row of `a`
/// followed by the same row of `b` (`concat_channels` over `[N, C, 1, 1]`
/// views).
fn side_by_side<'s>(s: &mut Step<'s>, a: Tensor<'s>, b: Tensor<'s>) -> Result<Tensor<'s>> {
    let planes = |t: Tensor<'s>, s: &mut Step<'s>| {
        let [n, c] = [t.shape().dim(0), t.shape().dim(1)];
        t.reshape(s, Shape::new(&[n, c, 1, 1]))
    };
    let (n, width) = (a.shape().dim(0), a.shape().dim(1) + b.shape().dim(1));
    let (a, b) = (planes(a, s)?, planes(b, s)?);
    Tensor::concat_channels(s, &[a, b])?.reshape(s, Shape::new(&[n, width]))
}

/// Leaves of a tree.
fn leaves(tree: &[TreeNode]) -> usize {
    tree.iter().filter(|n| matches!(n, TreeNode::Leaf { .. })).count()
}

use super::{Linear, ParamBuilder};
use crate::nn::Init;
use crate::tensor::{Labels, Param, Shape, Tensor};
use crate::{Error, Result, Step};

/// A binary Tree-LSTM layer; see the module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLstm {
    /// Word vector to a leaf's gates, `[3H, E]` and `[3H]`.
    leaf: Linear,
    /// The left child's `h` to an inner node's gates, `[5H, H]`.
    left: Param,
    /// The right child's, `[5H, H]`.
    right: Param,
    /// An inner node's gates' bias, `[5H]`.
    bias: Param,
    embed: usize,
    hidden: usize,
}

impl TreeLstm {
    /// Declares `leaf.weight`, `leaf.bias`, `left`, `right` and `bias` on
    /// `pb`, each uniform in ±1/√fan-in as `nn.Linear` draws them (an inner
    /// node's fan-in is both children's, `2H`).
    pub fn new(pb: &ParamBuilder<'_>, embed: usize, hidden: usize) -> Result<Self> {
        if embed == 0 || hidden == 0 {
            return Err(Error::shape(
                "tree_lstm",
                format!("at least one embedding feature and one hidden unit, got {embed} and {hidden}"),
            ));
        }
        let inner = Init::UniformFanIn(2 * hidden);
        Ok(Self {
            leaf: Linear::new(&pb.pp("leaf"), embed, 3 * hidden)?,
            left: pb.param("left", Shape::new(&[5 * hidden, hidden]), inner)?,
            right: pb.param("right", Shape::new(&[5 * hidden, hidden]), inner)?,
            bias: pb.param("bias", Shape::new(&[5 * hidden]), inner)?,
            embed,
            hidden,
        })
    }

    /// Both children's weights side by side, `[U_l | U_r]`, `[5H, 2H]`,
    /// made once a step: an inner node's gates are then one product over
    /// its children's `h` side by side, not two products and a sum (half
    /// the passes over the gates, one op where there were three).
    fn joined_weights<'s>(&self, s: &mut Step<'s>) -> Result<Tensor<'s>> {
        let (left, right) = (s.param(&self.left), s.param(&self.right));
        side_by_side(s, left, right)
    }

    /// Inner nodes' gates, `[B, 5H]`, from their children's `h` side by
    /// side, `[B, 2H]` (left then right), and [`Self::joined_weights`].
    fn inner_gates<'s>(&self, s: &mut Step<'s>, joined: Tensor<'s>, children: Tensor<'s>) -> Result<Tensor<'s>> {
        let bias = s.param(&self.bias);
        children.linear(s, joined, Some(bias))
    }

    /// `words` must be `[Σ leaves, E]`.
    fn check(&self, words: &Tensor<'_>, forest: &Forest) -> Result<()> {
        if words.shape() != Shape::new(&[forest.leaves, self.embed]) {
            return Err(Error::shape(
                "tree_lstm",
                format!(
                    "a vector of {} for each of the {} trees' {} leaves, got {}",
                    self.embed,
                    forest.len(),
                    forest.leaves,
                    words.shape()
                ),
            ));
        }
        Ok(())
    }

    /// Every node one at a time, tree after tree, each tree in post-order:
    /// `h` of every node, `[Σ nodes, H]`, tree by tree. `words`
    /// `[Σ leaves, E]`, tree by tree, each in sentence order. With one tree
    /// this is Lantern's batch of 1.
    pub fn forward_post_order<'s>(&self, s: &mut Step<'s>, words: Tensor<'s>, forest: &Forest) -> Result<Tensor<'s>> {
        self.check(&words, forest)?;
        let (e, h) = (self.embed, self.hidden);
        let nodes = forest.nodes();
        let joined = self.joined_weights(s)?;
        let mut states: Vec<(Tensor<'s>, Tensor<'s>)> = Vec::with_capacity(nodes);
        let mut first_word = 0;
        for tree in forest.trees() {
            let first_node = states.len();
            for node in tree.iter() {
                let state = match *node {
                    TreeNode::Leaf { word } => {
                        let x = words.select(s, first_word + word as usize)?;
                        let x = x.reshape(s, Shape::new(&[1, e]))?;
                        self.leaf.forward(s, x)?.tree_lstm_cell(s, None)?
                    }
                    TreeNode::Inner { left, right } => {
                        let l = states[first_node + left as usize];
                        let r = states[first_node + right as usize];
                        let children = side_by_side(s, l.0, r.0)?;
                        let gates = self.inner_gates(s, joined, children)?;
                        gates.tree_lstm_cell(s, Some((l.1, r.1)))?
                    }
                };
                states.push(state);
            }
            first_word += leaves(tree);
        }
        Tensor::stack(s, nodes, |_, k| Ok(states[k].0))?.reshape(s, Shape::new(&[nodes, h]))
    }

    /// Every node of equal height across the forest's trees at once: `h`
    /// of every node, `[Σ nodes, H]`, tree by tree, each in its
    /// post-order. `words` `[Σ leaves, E]`, tree by tree, each in sentence
    /// order. The states are two tables in level order (`Tensor::fill_rows`,
    /// each allocated once), a level's children gathered from the rows of
    /// the levels below it.
    pub fn forward_levels<'s>(&self, s: &mut Step<'s>, words: Tensor<'s>, forest: &Forest) -> Result<Tensor<'s>> {
        self.check(&words, forest)?;
        let gates = self.leaf.forward(s, words)?;
        self.levels_above(s, gates, forest)
    }

    /// [`Self::forward_levels`] where leaves share word vectors: `words`
    /// `[W, E]` holds each of the batch's distinct words once, and
    /// `leaves` `[Σ leaves]` is each leaf's row of it, tree by tree, each
    /// in sentence order. A leaf's gates depend on its word alone, so they
    /// are computed once a word and gathered: about 60% of a batch of 25
    /// SST sentences' leaves are distinct, and the leaves' three products
    /// (gates, their weights' and their words' gradients) were 40% of a
    /// step's multiply-adds. The gather's gradient sums a word's leaves
    /// before the products, as the per-leaf products sum them after.
    pub fn forward_levels_shared<'s>(
        &self,
        s: &mut Step<'s>,
        words: Tensor<'s>,
        leaves: Labels<'s>,
        forest: &Forest,
    ) -> Result<Tensor<'s>> {
        let shape = words.shape();
        if shape.rank() != 2 || shape.dim(1) != self.embed || leaves.len() != forest.leaves {
            return Err(Error::shape(
                "tree_lstm",
                format!(
                    "distinct words' vectors [W, {}] and a row of them for each of the {} trees' {} leaves, got {} and {} rows",
                    self.embed,
                    forest.len(),
                    forest.leaves,
                    shape,
                    leaves.len()
                ),
            ));
        }
        let gates = self.leaf.forward(s, words)?.embedding(s, leaves)?;
        self.levels_above(s, gates, forest)
    }

    /// The levels from the leaves' gates, `[Σ leaves, 3H]` (tree by tree
    /// in sentence order) up: see [`Self::forward_levels`].
    fn levels_above<'s>(&self, s: &mut Step<'s>, leaf_gates: Tensor<'s>, forest: &Forest) -> Result<Tensor<'s>> {
        let plan = &forest.levels;
        let nodes = forest.nodes();
        // Level 0, the leaves: tree by tree in sentence order.
        let (h_0, c_0) = leaf_gates.tree_lstm_cell(s, None)?;
        let levels = plan.inner.len() + 1;
        let joined = self.joined_weights(s)?;
        let [all_h, _] = Tensor::fill_rows(s, nodes, [h_0, c_0], levels, |s, k, [all_h, all_c]| {
            let level = &plan.inner[k - 1];
            let (pairs, left, right) = (s.labels(&level.pairs)?, s.labels(&level.left)?, s.labels(&level.right)?);
            // Each node's children's `h` side by side in one gather: rows
            // left, right, left, right, … are `[B, 2H]` read two at a time.
            let children = all_h.embedding(s, pairs)?;
            let children = children.reshape(s, Shape::new(&[level.left.len(), 2 * self.hidden]))?;
            let (c_l, c_r) = (all_c.embedding(s, left)?, all_c.embedding(s, right)?);
            let gates = self.inner_gates(s, joined, children)?;
            let (h_k, c_k) = gates.tree_lstm_cell(s, Some((c_l, c_r)))?;
            Ok([h_k, c_k])
        })?;
        let order = s.labels(&plan.post_order)?;
        all_h.embedding(s, order)
    }
}

/// A batch of trees as [`TreeLstm`] runs it: their shapes, checked, and
/// the plan of their levels, made once (a task makes its batches' forests
/// before the steps that read them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forest {
    /// Every tree's nodes, tree after tree, each in post-order.
    nodes: Vec<TreeNode>,
    /// Where each tree's nodes start, and one past the last.
    starts: Vec<usize>,
    leaves: usize,
    levels: Levels,
}

impl Forest {
    /// `trees`, each a slice of nodes in post-order: at least one tree,
    /// each of at least one node, each inner node over two distinct earlier
    /// nodes of its tree, and each tree's leaves reading words 0, 1, 2, …
    /// in order; anything else is a shape error naming the tree and node.
    pub fn new(trees: &[&[TreeNode]]) -> Result<Self> {
        if trees.is_empty() {
            return Err(Error::shape("tree_lstm", "at least one tree, got none".into()));
        }
        for (t, tree) in trees.iter().enumerate() {
            if tree.is_empty() {
                return Err(Error::shape(
                    "tree_lstm",
                    format!("trees of at least one node; tree {t} has none"),
                ));
            }
            let mut next_word = 0;
            for (k, node) in tree.iter().enumerate() {
                let fault = match *node {
                    TreeNode::Leaf { word } if word != next_word => {
                        Some(format!("leaf {k} reads word {word} where word {next_word} comes next"))
                    }
                    TreeNode::Leaf { .. } => {
                        next_word += 1;
                        None
                    }
                    TreeNode::Inner { left, right } if left as usize >= k || right as usize >= k || left == right => {
                        Some(format!("inner node {k} has children {left} and {right}"))
                    }
                    TreeNode::Inner { .. } => None,
                };
                if let Some(fault) = fault {
                    return Err(Error::shape(
                        "tree_lstm",
                        format!(
                            "trees in post-order, two earlier nodes under each inner node and the leaves \
                             reading words 0, 1, 2, … in order; in tree {t}, {fault}"
                        ),
                    ));
                }
            }
        }
        let mut starts = Vec::with_capacity(trees.len() + 1);
        let mut nodes = Vec::with_capacity(trees.iter().map(|t| t.len()).sum());
        for tree in trees {
            starts.push(nodes.len());
            nodes.extend_from_slice(tree);
        }
        starts.push(nodes.len());
        Ok(Self {
            leaves: trees.iter().map(|t| leaves(t)).sum(),
            levels: Levels::of(trees),
            nodes,
            starts,
        })
    }

    /// Its trees, each its nodes in post-order.
    pub fn trees(&self) -> impl Iterator<Item = &[TreeNode]> + '_ {
        self.starts.windows(2).map(|w| &self.nodes[w[0]..w[1]])
    }

    /// How many trees.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Never: a forest has at least one tree.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Nodes of every tree.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Leaves of every tree: the rows of words the layer reads.
    pub fn leaves(&self) -> usize {
        self.leaves
    }

    /// The tallest tree's height: a leaf's is 0 (levels of inner nodes).
    pub fn height(&self) -> usize {
        self.levels.inner.len()
    }
}

/// How [`TreeLstm::forward_levels`] walks a batch of trees. Nodes are
/// numbered in level order: the leaves first (tree by tree, sentence
/// order), then height 1's nodes (tree by tree, post-order), and so on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Levels {
    /// For each height from 1: its nodes' children, by level-order number.
    inner: Vec<Level>,
    /// For each node tree by tree in post-order, its level-order number.
    post_order: Vec<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Level {
    left: Vec<u32>,
    right: Vec<u32>,
    /// `left` and `right` interleaved: each node's two children in turn.
    pairs: Vec<u32>,
}

impl Levels {
    fn of(trees: &[&[TreeNode]]) -> Self {
        // Each node's height, tree by tree in post-order.
        let mut heights: Vec<usize> = Vec::new();
        for tree in trees {
            let first = heights.len();
            for node in tree.iter() {
                let height = match *node {
                    TreeNode::Leaf { .. } => 0,
                    TreeNode::Inner { left, right } => {
                        1 + heights[first + left as usize].max(heights[first + right as usize])
                    }
                };
                heights.push(height);
            }
        }
        let top = heights.iter().copied().max().unwrap_or(0);
        // Level-order numbers: by height, then tree by tree in post-order
        // (a tree's leaves in post-order are in sentence order).
        let mut number = vec![0u32; heights.len()];
        let mut next = 0u32;
        for height in 0..=top {
            for (k, &h) in heights.iter().enumerate() {
                if h == height {
                    number[k] = next;
                    next += 1;
                }
            }
        }
        let mut inner: Vec<Level> = (0..top).map(|_| Level::default()).collect();
        let mut first = 0;
        for tree in trees {
            for (k, node) in tree.iter().enumerate() {
                if let TreeNode::Inner { left, right } = *node {
                    let level = &mut inner[heights[first + k] - 1];
                    let (l, r) = (number[first + left as usize], number[first + right as usize]);
                    level.left.push(l);
                    level.right.push(r);
                    level.pairs.extend([l, r]);
                }
            }
            first += tree.len();
        }
        Levels {
            inner,
            post_order: number,
        }
    }
}

#[cfg(test)]
#[path = "tree_lstm_tests.rs"]
mod tests;
