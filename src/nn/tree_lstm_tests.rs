//! The Tree-LSTM's two ways of running trees against each other, and its
//! gradients against finite differences.

use super::{Forest, TreeLstm, TreeNode};
use crate::nn::recurrent::tests::{check_every_gradient, param_grads};
use crate::nn::ParamStore;
use crate::ops::gradcheck::values;
use crate::tensor::{Param, Shape};
use crate::{Device, Engine};

fn engine() -> Engine {
    Engine::new(Device::cpu(2).expect("cpu"), 16 << 20).expect("arena")
}

/// The nodes of a bracketed tree, `(a (b c))`, in post-order.
fn tree(line: &str) -> Vec<TreeNode> {
    fn node(tokens: &mut std::iter::Peekable<std::str::Chars<'_>>, out: &mut Vec<TreeNode>, words: &mut u32) -> u32 {
        while tokens.peek() == Some(&' ') {
            tokens.next();
        }
        if tokens.peek() == Some(&'(') {
            tokens.next();
            let left = node(tokens, out, words);
            let right = node(tokens, out, words);
            assert_eq!(tokens.next(), Some(')'), "a binary tree");
            out.push(TreeNode::Inner { left, right });
        } else {
            while tokens.peek().is_some_and(|c| c.is_alphanumeric()) {
                tokens.next();
            }
            out.push(TreeNode::Leaf { word: *words });
            *words += 1;
        }
        out.len() as u32 - 1
    }
    let mut out = Vec::new();
    node(&mut line.chars().peekable(), &mut out, &mut 0);
    out
}

fn trees() -> Vec<Vec<TreeNode>> {
    ["((it s) fine)", "bad", "((a b) (c (d e)))", "((x y) z)"]
        .map(tree)
        .to_vec()
}

/// Every node's `h` (tree by tree, post-order) and every parameter's and
/// the word vectors' gradient of `sum(h · gy)`.
fn run(levels: bool) -> Vec<Vec<f32>> {
    let (e, h) = (7, 5);
    let trees = trees();
    let refs: Vec<&[TreeNode]> = trees.iter().map(Vec::as_slice).collect();
    let forest = Forest::new(&refs).expect("trees");
    let leaves: usize = trees.iter().map(|t| super::leaves(t)).sum();
    let nodes: usize = trees.iter().map(Vec::len).sum();
    let mut engine = engine();
    let (store, tree_lstm) =
        ParamStore::build(&mut engine.persistent(), 5, |pb| TreeLstm::new(pb, e, h)).expect("builds");
    let params: Vec<Param> = store.params().collect();
    engine
        .step(|s| {
            let x = s.variable("words", Shape::new(&[leaves, e]), &values(leaves * e, 71, -1.0, 1.0))?;
            let y = match levels {
                true => tree_lstm.forward_levels(s, x, &forest)?,
                false => tree_lstm.forward_post_order(s, x, &forest)?,
            };
            assert_eq!(y.shape(), Shape::new(&[nodes, h]));
            let gy = s.input("gy", y.shape(), &values(nodes * h, 72, -1.0, 1.0))?;
            let grads = s.backward_from(y, gy)?;
            let mut out = vec![vec![0.0; nodes * h]];
            s.read(y, &mut out[0])?;
            let g = s.grad(&grads, x).expect("word vectors' gradient");
            let mut gx = vec![0.0; leaves * e];
            s.read(g, &mut gx)?;
            out.push(gx);
            out.extend(param_grads(s, &grads, &params)?);
            Ok(out)
        })
        .expect("runs")
}

#[test]
fn levels_and_post_order_give_the_same_states_and_gradients() {
    let (one_by_one, by_level) = (run(false), run(true));
    let names = ["h", "words grad", "leaf.weight", "leaf.bias", "left", "right", "bias"];
    for (name, (a, b)) in names.iter().zip(one_by_one.iter().zip(&by_level)) {
        let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.01, "{name}: all near zero");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * scale.max(1.0),
                "{name}[{i}]: {x} post-order, {y} by level"
            );
        }
    }
}

/// Every node's `h`, the distinct words' gradient and every parameter's,
/// with leaves reading `rows` of 4 distinct word vectors: gathered into
/// one vector per leaf first (`shared` false), or each word's leaf gates
/// computed once and gathered (`forward_levels_shared`).
fn run_shared(shared: bool) -> Vec<Vec<f32>> {
    let (e, h, distinct) = (7, 5, 4);
    let trees = trees();
    let refs: Vec<&[TreeNode]> = trees.iter().map(Vec::as_slice).collect();
    let forest = Forest::new(&refs).expect("trees");
    // 12 leaves over 4 words, each word read by 2 to 4 leaves.
    let rows: Vec<u32> = [0, 1, 2, 3, 0, 1, 2, 3, 0, 0, 1, 3].to_vec();
    assert_eq!(rows.len(), forest.leaves());
    let nodes = forest.nodes();
    let mut engine = engine();
    let (store, tree_lstm) =
        ParamStore::build(&mut engine.persistent(), 5, |pb| TreeLstm::new(pb, e, h)).expect("builds");
    let params: Vec<Param> = store.params().collect();
    engine
        .step(|s| {
            let words = s.variable(
                "words",
                Shape::new(&[distinct, e]),
                &values(distinct * e, 73, -1.0, 1.0),
            )?;
            let leaves = s.labels(&rows)?;
            let y = match shared {
                true => tree_lstm.forward_levels_shared(s, words, leaves, &forest)?,
                false => {
                    let x = words.embedding(s, leaves)?;
                    tree_lstm.forward_levels(s, x, &forest)?
                }
            };
            let gy = s.input("gy", y.shape(), &values(nodes * h, 74, -1.0, 1.0))?;
            let grads = s.backward_from(y, gy)?;
            let mut out = vec![vec![0.0; nodes * h]];
            s.read(y, &mut out[0])?;
            let g = s.grad(&grads, words).expect("word vectors' gradient");
            let mut gx = vec![0.0; distinct * e];
            s.read(g, &mut gx)?;
            out.push(gx);
            out.extend(param_grads(s, &grads, &params)?);
            Ok(out)
        })
        .expect("runs")
}

#[test]
fn shared_words_give_each_leafs_own_states_and_gradients() {
    let (each, shared) = (run_shared(false), run_shared(true));
    let names = ["h", "words grad", "leaf.weight", "leaf.bias", "left", "right", "bias"];
    for (name, (a, b)) in names.iter().zip(each.iter().zip(&shared)) {
        let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.01, "{name}: all near zero");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * scale.max(1.0),
                "{name}[{i}]: {x} a vector per leaf, {y} shared"
            );
        }
    }
}

#[test]
fn a_tree_lstms_gradients_match_finite_differences() {
    let mut engine = engine();
    let (store, tree_lstm) =
        ParamStore::build(&mut engine.persistent(), 6, |pb| TreeLstm::new(pb, 3, 2)).expect("builds");
    // Five leaves: inner nodes at heights 1, 2 and 3, a child of each side
    // a leaf somewhere.
    let tree = tree("((a b) (c (d e)))");
    let forest = Forest::new(&[tree.as_slice()]).expect("a tree");
    check_every_gradient(&mut engine, &store, Shape::new(&[5, 3]), &|s, x| {
        let h = tree_lstm.forward_post_order(s, x, &forest)?;
        // Levels too, so both ways' backward are checked, and levels over
        // shared words (leaves 0 and 2 read one row, 1 and 4 another).
        let again = tree_lstm.forward_levels(s, x, &forest)?;
        let leaves = s.labels(&[0, 1, 0, 3, 1])?;
        let shared = tree_lstm.forward_levels_shared(s, x, leaves, &forest)?;
        h.add(s, again)?.add(s, shared)
    });
}

#[test]
fn words_not_matching_the_trees_leaves_are_a_shape_error() {
    let mut engine = engine();
    let (_, tree_lstm) = ParamStore::build(&mut engine.persistent(), 7, |pb| TreeLstm::new(pb, 3, 2)).expect("builds");
    let forest = Forest::new(&[tree("(a b)").as_slice()]).expect("a tree");
    let e = engine
        .step(|s| {
            let x = s.input("words", Shape::new(&[3, 3]), &[0.0; 9])?;
            tree_lstm.forward_levels(s, x, &forest).map(|_| ())
        })
        .expect_err("3 vectors for 2 leaves");
    assert!(
        e.to_string()
            .contains("a vector of 3 for each of the 1 trees' 2 leaves, got [3, 3]"),
        "{e}"
    );
    let e = engine
        .step(|s| {
            let x = s.input("words", Shape::new(&[3, 3]), &[0.0; 9])?;
            let leaves = s.labels(&[0, 1, 2])?;
            tree_lstm.forward_levels_shared(s, x, leaves, &forest).map(|_| ())
        })
        .expect_err("3 rows for 2 leaves");
    assert!(
        e.to_string()
            .contains("a row of them for each of the 1 trees' 2 leaves, got [3, 3] and 3 rows"),
        "{e}"
    );
}

#[test]
fn malformed_forests_are_shape_errors_naming_the_tree_and_node() {
    let (a, b) = (TreeNode::Leaf { word: 0 }, TreeNode::Leaf { word: 1 });
    let inner = |left, right| TreeNode::Inner { left, right };
    let cases: [(&[&[TreeNode]], &str); 5] = [
        (&[], "at least one tree, got none"),
        (&[&[a], &[]], "tree 1 has none"),
        (&[&[a, b, inner(0, 0)]], "in tree 0, inner node 2 has children 0 and 0"),
        (&[&[a, inner(0, 2), b]], "inner node 1 has children 0 and 2"),
        (&[&[b, a, inner(0, 1)]], "leaf 0 reads word 1 where word 0 comes next"),
    ];
    for (trees, says) in cases {
        let e = Forest::new(trees).expect_err(says);
        assert!(e.to_string().contains(says), "{e}");
    }
    let forest = Forest::new(&[&[a], &[a, b, inner(0, 1)]]).expect("two trees");
    assert_eq!(
        (forest.len(), forest.nodes(), forest.leaves(), forest.height()),
        (2, 4, 3, 1)
    );
}
