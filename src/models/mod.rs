//! Networks built from ops and `nn`, each a [`crate::nn::Model`]. Adding
//! one: a file here, and a line in the CLI's list of models.

mod char_lm;
mod mnist_cnn;
mod resnet;
mod squeezenet;
mod sst_lstm;
mod tree_lstm;

pub use char_lm::{CharLmConfig, CharLstm, CharRnn, MAX_LAYERS};
pub use mnist_cnn::{MnistCnn, MnistCnnConfig};
pub use resnet::{Depth, ResNet, ResNetConfig};
pub use squeezenet::{SqueezeNet, SqueezeNetConfig};
pub use sst_lstm::{SstLstm, SstLstmConfig};
pub use tree_lstm::{TreeLstmConfig, TreeLstmSentiment};

/// The network a run trains when none is named: Lantern's MNIST CNN.
impl Default for crate::nn::ModelChoice {
    fn default() -> Self {
        MnistCnn::choice()
    }
}
