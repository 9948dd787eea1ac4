//! Runs one recorded node backward: the single place that knows every node.

use super::tape::Node;
use super::Step;
use crate::Result;

pub(crate) fn run(s: &mut Step<'_>, node: Node) -> Result<()> {
    match node {
        Node::Conv2d(n) => n.backward(s),
        Node::MaxPool2d(n) => n.backward(s),
        Node::AvgPool2d(n) => n.backward(s),
        Node::GlobalAvgPool2d(n) => n.backward(s),
        Node::Add(n) => n.backward(s),
        Node::Concat(n) => n.backward(s),
        Node::Relu(n) => n.backward(s),
        Node::Dropout(n) => n.backward(s),
        Node::Linear(n) => n.backward(s),
        Node::Dense(n) => n.backward(s),
        Node::CrossEntropy(n) => n.backward(s),
        Node::Reshape(n) => n.backward(s),
        Node::BatchNorm2d(n) => n.backward(s),
        Node::Cast(n) => n.backward(s),
    }
}
