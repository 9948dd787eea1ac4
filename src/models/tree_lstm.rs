//! `tree-lstm`: the sentiment model of Tai et al. (2015) as Lantern ran it:
//! a word embedding (300 features), an `nn::TreeLstm` (150 units) over each
//! sentence's binary parse tree, and a linear layer from every node's
//! hidden state to the five classes. Named as the PyTorch module of
//! `bench/models.py` names its parts (`embedding.weight`,
//! `tree.leaf.weight`, `tree.leaf.bias`, `tree.left`, `tree.right`,
//! `tree.bias`, `fc.weight`, `fc.bias`), so a checkpoint loads there with
//! `strict=True`. An optimizer's weight decay skips the word embedding
//! (Tai et al.'s setting; in PyTorch, a parameter group of its own).
//!
//! A batch is its trees' shapes and their leaves' word ids
//! (`nn::TreeInput`); it runs one node at a time or level by level as the
//! batch says, and both give every node's logits, tree by tree, each in
//! post-order.

use crate::nn::{Embedding, Input, Linear, Mode, Model, ModelChoice, ParamBuilder, Reads, TreeInput, TreeLstm};
use crate::tensor::{Param, Tensor};
use crate::{Error, Result, Step};

/// The sizes of `tree-lstm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLstmConfig {
    /// Features of a word's embedding.
    pub embed: usize,
    /// Units of the Tree-LSTM.
    pub hidden: usize,
    /// Hold the word embedding fixed (pretrained vectors, not trained).
    pub fixed_embedding: bool,
}

impl Default for TreeLstmConfig {
    fn default() -> Self {
        Self {
            embed: 300,
            hidden: 150,
            fixed_embedding: false,
        }
    }
}

/// Embedding → Tree-LSTM → linear from every node's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeLstmSentiment {
    embedding: Embedding,
    tree: TreeLstm,
    fc: Linear,
}

impl TreeLstmSentiment {
    /// What `--model` calls it.
    pub const NAME: &'static str = "tree-lstm";

    /// The model as a run's choice, at `config`'s sizes.
    pub fn choice(config: TreeLstmConfig) -> ModelChoice {
        ModelChoice::new::<Self>(Self::NAME, config)
    }
}

impl Model for TreeLstmSentiment {
    type Config = TreeLstmConfig;
    const READS: Reads = Reads::Trees;

    /// `input.example` is `[V]`, the vocabulary; `input.classes` the
    /// classes out.
    fn new(config: &TreeLstmConfig, input: Input, pb: &ParamBuilder<'_>) -> Result<Self> {
        let TreeLstmConfig {
            embed,
            hidden,
            fixed_embedding,
        } = *config;
        let vocab = match input.example.dims() {
            &[vocab] => vocab,
            _ => 0,
        };
        if embed == 0 || hidden == 0 || vocab == 0 || input.classes == 0 {
            return Err(Error::shape(
                Self::NAME,
                format!(
                    "a vocabulary [V] and at least one embedding feature, hidden unit and class, got vocabulary {}, embedding {embed}, hidden {hidden} and {} classes",
                    input.example, input.classes
                ),
            ));
        }
        // Weight decay reaches every weight but the word vectors, as in
        // Tai et al. (and Lantern): an optimizer's decay skips the table.
        let embedding = Embedding::without_decay(&pb.pp("embedding"), vocab, embed)?;
        Ok(Self {
            embedding: match fixed_embedding {
                true => embedding.fixed(),
                false => embedding,
            },
            tree: TreeLstm::new(&pb.pp("tree"), embed, hidden)?,
            fc: Linear::new(&pb.pp("fc"), hidden, input.classes)?,
        })
    }

    fn forward<'s>(&self, _s: &mut Step<'s>, _x: Tensor<'s>, _mode: Mode) -> Result<Tensor<'s>> {
        Err(Error::shape(Self::NAME, "parse trees; it reads no images".into()))
    }

    fn word_embedding(&self) -> Option<Param> {
        Some(self.embedding.weight())
    }

    fn forward_trees<'s>(&self, s: &mut Step<'s>, x: TreeInput<'s>, _mode: Mode) -> Result<Tensor<'s>> {
        let words = self.embedding.forward(s, x.words)?;
        let h = match (x.levels, x.leaves) {
            (true, Some(leaves)) => self.tree.forward_levels_shared(s, words, leaves, &x.forest)?,
            (true, None) => self.tree.forward_levels(s, words, &x.forest)?,
            (false, Some(leaves)) => {
                let words = words.embedding(s, leaves)?;
                self.tree.forward_post_order(s, words, &x.forest)?
            }
            (false, None) => self.tree.forward_post_order(s, words, &x.forest)?,
        };
        self.fc.forward(s, h)
    }
}
