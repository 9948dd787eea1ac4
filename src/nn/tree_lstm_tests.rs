//! The Tree-LSTM's two ways of running trees against each other, and its
//! gradients against finite differences.

use super::{Forest, TreeLstm, TreeNode};
use crate::nn::recurrent::tests::{check_every_gradient, param_grads};
use crate::nn::ParamStore;
use crate::ops::gradcheck::values;
use crate::tensor::Tensor;
use crate::tensor::{Param, Shape};
use crate::{Device, Engine, Step};

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

/// How a test runs the forest: the Tree-LSTM, the step's word vectors
/// (`rows` of them) and the forest give every node's `h`.
type Forward = dyn for<'s> Fn(&TreeLstm, &mut Step<'s>, Tensor<'s>, &Forest) -> crate::Result<Tensor<'s>>;

/// Every node's `h` (tree by tree, post-order) and the gradients of
/// `sum(h · gy)`: the `rows` word vectors' and every parameter's.
fn run(rows: usize, forward: &Forward) -> Vec<Vec<f32>> {
    let (e, h) = (7, 5);
    let trees = trees();
    let refs: Vec<&[TreeNode]> = trees.iter().map(Vec::as_slice).collect();
    let forest = Forest::new(&refs).expect("trees");
    let nodes = forest.nodes();
    let mut engine = engine();
    let (store, tree_lstm) =
        ParamStore::build(&mut engine.persistent(), 5, |pb| TreeLstm::new(pb, e, h)).expect("builds");
    let params: Vec<Param> = store.params().collect();
    engine
        .step(|s| {
            let x = s.variable("words", Shape::new(&[rows, e]), &values(rows * e, 71, -1.0, 1.0))?;
            let y = forward(&tree_lstm, s, x, &forest)?;
            assert_eq!(y.shape(), Shape::new(&[nodes, h]));
            let gy = s.input("gy", y.shape(), &values(nodes * h, 72, -1.0, 1.0))?;
            let grads = s.backward_from(y, gy)?;
            let mut out = vec![vec![0.0; nodes * h]];
            s.read(y, &mut out[0])?;
            let g = s.grad(&grads, x).expect("word vectors' gradient");
            let mut gx = vec![0.0; rows * e];
            s.read(g, &mut gx)?;
            out.push(gx);
            out.extend(param_grads(s, &grads, &params)?);
            Ok(out)
        })
        .expect("runs")
}

/// `a` and `b` agree, element by element, within 1e-5 of each output's
/// largest magnitude; `how` names the two ways.
fn assert_same(a: &[Vec<f32>], b: &[Vec<f32>], how: [&str; 2]) {
    let names = ["h", "words grad", "leaf.weight", "leaf.bias", "left", "right", "bias"];
    for (name, (a, b)) in names.iter().zip(a.iter().zip(b)) {
        let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.01, "{name}: all near zero");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * scale.max(1.0),
                "{name}[{i}]: {x} {}, {y} {}",
                how[0],
                how[1]
            );
        }
    }
}

#[test]
fn levels_and_post_order_give_the_same_states_and_gradients() {
    let leaves = Forest::new(&trees().iter().map(Vec::as_slice).collect::<Vec<_>>())
        .expect("trees")
        .leaves();
    let one_by_one = run(leaves, &|t, s, x, f| t.forward_post_order(s, x, f));
    let by_level = run(leaves, &|t, s, x, f| t.forward_levels(s, x, f));
    assert_same(&one_by_one, &by_level, ["post-order", "by level"]);
}

/// The 12 leaves of [`trees`] reading 4 distinct words, each word 2 to 4
/// leaves.
const SHARED: [u32; 12] = [0, 1, 2, 3, 0, 1, 2, 3, 0, 0, 1, 3];

#[test]
fn shared_words_give_each_leafs_own_states_and_gradients() {
    // Gathered into one vector per leaf first, or each word's leaf gates
    // computed once and gathered.
    let each = run(4, &|t, s, x, f| {
        let leaves = s.labels(&SHARED)?;
        let x = x.embedding(s, leaves)?;
        t.forward_levels(s, x, f)
    });
    let shared = run(4, &|t, s, x, f| {
        let leaves = s.labels(&SHARED)?;
        t.forward_levels_shared(s, x, leaves, f)
    });
    assert_same(&each, &shared, ["a vector per leaf", "shared"]);
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
