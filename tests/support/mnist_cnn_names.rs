//! The MNIST CNN's parameters as PyTorch's `state_dict` names them, in its
//! order: what the parameter store must call them, and what a checkpoint
//! holds (shared by the tests that check either).

pub const PARAMS: [&str; 6] = [
    "conv1.weight",
    "conv2.weight",
    "fc1.weight",
    "fc1.bias",
    "fc2.weight",
    "fc2.bias",
];
