//! Networks built from ops, their parameters in the persistent region.

mod init;
mod mnist_cnn;

pub use init::uniform_fan_in;
pub use mnist_cnn::{MnistCnn, Mode};
