//! The models and optimizers `--model` and `--optimizer` choose from: the
//! one place that names them. Adding a model or an optimizer to the
//! command is one line here.

use bumpgrad::models::{
    CharLmConfig, CharLstm, CharRnn, Depth, MnistCnn, ResNet, SqueezeNet, SstLstm, SstLstmConfig, TreeLstmConfig,
    TreeLstmSentiment,
};
use bumpgrad::nn::{ModelChoice, OptimizerChoice};
use bumpgrad::optim::{AdagradConfig, AdamWConfig, SgdConfig};

/// The flags that size a model (`None`: not given).
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelFlags {
    pub width_mult: Option<f32>,
    pub embed: Option<usize>,
    pub hidden: Option<usize>,
    pub layers: Option<usize>,
    pub freeze_embeddings: bool,
}

/// A model's name as `--model` takes it, and how to make its choice from
/// the flags that size it.
type Named = (&'static str, fn(&ModelFlags) -> Result<ModelChoice, String>);

/// Every model; the first is the default.
pub const MODELS: &[Named] = &[
    (MnistCnn::NAME, |f| match images_only(f)? {
        None => Ok(MnistCnn::choice()),
        Some(_) => Err(format!(
            "--width-mult scales {}, {} and {}; {} has fixed widths, so drop it",
            ResNet::NAME_18,
            ResNet::NAME_50,
            SqueezeNet::NAME,
            MnistCnn::NAME
        )),
    }),
    (ResNet::NAME_18, |f| {
        Ok(ResNet::choice(Depth::R18, images_only(f)?.unwrap_or(1.0)))
    }),
    (ResNet::NAME_50, |f| {
        Ok(ResNet::choice(Depth::R50, images_only(f)?.unwrap_or(1.0)))
    }),
    (SqueezeNet::NAME, |f| {
        Ok(SqueezeNet::choice(images_only(f)?.unwrap_or(1.0)))
    }),
    (CharLstm::NAME, |f| Ok(CharLstm::choice(char_lm(f)?))),
    (CharRnn::NAME, |f| Ok(CharRnn::choice(char_lm(f)?))),
    (SstLstm::NAME, |f| Ok(SstLstm::choice(sst_lstm(f)?))),
    (TreeLstmSentiment::NAME, |f| {
        Ok(TreeLstmSentiment::choice(tree_lstm(f)?))
    }),
];

/// The models that read text, for hints.
pub const TEXT_MODELS: &str = "char-lstm or char-rnn";
/// The models that read sentences of a treebank, for hints.
pub const SENTENCE_MODELS: &str = "sst-lstm or tree-lstm";
/// The models that read images, for hints.
pub const IMAGE_MODELS: &str = "mnist-cnn, resnet18, resnet50 or squeezenet";

/// `--width-mult` of an image model, refusing the flags of a character
/// model.
fn images_only(f: &ModelFlags) -> Result<Option<f32>, String> {
    if f.embed.is_some() || f.hidden.is_some() || f.layers.is_some() {
        return Err(format!(
            "--embed, --hidden and --layers size {}, {} and {}; drop them for an image model",
            CharLstm::NAME,
            CharRnn::NAME,
            SstLstm::NAME
        ));
    }
    Ok(f.width_mult)
}

/// A character model's sizes: `--hidden` (default 256), `--layers`
/// (default 2), `--embed` (default: the hidden size; 0: one-hot input).
fn char_lm(f: &ModelFlags) -> Result<CharLmConfig, String> {
    if f.width_mult.is_some() {
        return Err(format!(
            "--width-mult scales the image models; {} and {} are sized by --embed, --hidden and --layers",
            CharLstm::NAME,
            CharRnn::NAME
        ));
    }
    let d = CharLmConfig::default();
    let hidden = f.hidden.unwrap_or(d.hidden);
    let layers = f.layers.unwrap_or(d.layers);
    let embed = f.embed.unwrap_or(hidden);
    if hidden == 0 || !(1..=bumpgrad::models::MAX_LAYERS).contains(&layers) {
        return Err(format!(
            "--hidden must be at least 1 and --layers from 1 to {}, got {hidden} and {layers}",
            bumpgrad::models::MAX_LAYERS
        ));
    }
    Ok(CharLmConfig { embed, hidden, layers })
}

/// `sst-lstm`'s sizes: `--embed` (default 300), `--hidden` (default 150),
/// `--layers` (default 1).
fn sst_lstm(f: &ModelFlags) -> Result<SstLstmConfig, String> {
    if f.width_mult.is_some() {
        return Err(format!(
            "--width-mult scales the image models; {} is sized by --embed, --hidden and --layers",
            SstLstm::NAME
        ));
    }
    let d = SstLstmConfig::default();
    let (embed, hidden, layers) = (
        f.embed.unwrap_or(d.embed),
        f.hidden.unwrap_or(d.hidden),
        f.layers.unwrap_or(d.layers),
    );
    if hidden == 0 || embed == 0 || !(1..=bumpgrad::models::MAX_LAYERS).contains(&layers) {
        return Err(format!(
            "--hidden and --embed must be at least 1 and --layers from 1 to {}, got {hidden}, {embed} and {layers}",
            bumpgrad::models::MAX_LAYERS
        ));
    }
    Ok(SstLstmConfig {
        embed,
        hidden,
        layers,
        fixed_embedding: f.freeze_embeddings,
    })
}

/// `tree-lstm`'s sizes: `--embed` (default 300), `--hidden` (default 150).
fn tree_lstm(f: &ModelFlags) -> Result<TreeLstmConfig, String> {
    if f.width_mult.is_some() || f.layers.is_some() {
        return Err(format!(
            "--width-mult and --layers size other models; {} is one Tree-LSTM, sized by --embed and --hidden",
            TreeLstmSentiment::NAME
        ));
    }
    let d = TreeLstmConfig::default();
    let (embed, hidden) = (f.embed.unwrap_or(d.embed), f.hidden.unwrap_or(d.hidden));
    if hidden == 0 || embed == 0 {
        return Err(format!(
            "--hidden and --embed must be at least 1, got {hidden} and {embed}"
        ));
    }
    Ok(TreeLstmConfig {
        embed,
        hidden,
        fixed_embedding: f.freeze_embeddings,
    })
}

/// The optimizers `--optimizer` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OptimizerArg {
    /// Stochastic gradient descent (torch.optim.SGD): --momentum, --nesterov, --weight-decay.
    Sgd,
    /// AdamW (torch.optim.AdamW): --betas, --eps, --weight-decay (default 0.01).
    Adamw,
    /// Adagrad (torch.optim.Adagrad): --lr-decay, --initial-accumulator, --eps (default 1e-10),
    /// --weight-decay.
    Adagrad,
}

/// The optimizer's settings, as the flags give them (`None`: not given).
pub struct OptimizerFlags {
    pub momentum: Option<f32>,
    pub nesterov: bool,
    pub weight_decay: Option<f64>,
    pub betas: Option<(f64, f64)>,
    pub eps: Option<f64>,
    pub lr_decay: Option<f64>,
    pub initial_accumulator: Option<f64>,
}

/// The optimizer the flags describe, or which flag does not belong to it.
pub fn optimizer(arg: OptimizerArg, f: &OptimizerFlags) -> Result<OptimizerChoice, String> {
    if arg != OptimizerArg::Adagrad && (f.lr_decay.is_some() || f.initial_accumulator.is_some()) {
        return Err(
            "--lr-decay and --initial-accumulator are Adagrad's; pass --optimizer adagrad, or drop them".into(),
        );
    }
    match arg {
        OptimizerArg::Sgd => {
            if f.betas.is_some() || f.eps.is_some() {
                return Err(
                    "--betas and --eps are AdamW's (--eps Adagrad's too); pass --optimizer adamw or adagrad, or drop them"
                        .into(),
                );
            }
            Ok(SgdConfig::default()
                .momentum(f.momentum.unwrap_or(0.0))
                .nesterov(f.nesterov)
                .weight_decay(f.weight_decay.unwrap_or(0.0) as f32)
                .choice())
        }
        OptimizerArg::Adamw => {
            if f.momentum.is_some() || f.nesterov {
                return Err("--momentum and --nesterov are SGD's; AdamW's moments are set with --betas".into());
            }
            let d = AdamWConfig::default();
            let (beta1, beta2) = f.betas.unwrap_or((d.beta1, d.beta2));
            Ok(d.betas(beta1, beta2)
                .eps(f.eps.unwrap_or(d.eps))
                .weight_decay(f.weight_decay.unwrap_or(d.weight_decay))
                .choice())
        }
        OptimizerArg::Adagrad => {
            if f.momentum.is_some() || f.nesterov || f.betas.is_some() {
                return Err(
                    "--momentum, --nesterov and --betas are SGD's and AdamW's; Adagrad takes --lr-decay, --initial-accumulator, --eps and --weight-decay".into(),
                );
            }
            let d = AdagradConfig::default();
            Ok(d.lr_decay(f.lr_decay.unwrap_or(d.lr_decay))
                .weight_decay(f.weight_decay.unwrap_or(d.weight_decay))
                .initial_accumulator_value(f.initial_accumulator.unwrap_or(d.initial_accumulator_value))
                .eps(f.eps.unwrap_or(d.eps))
                .choice())
        }
    }
}

/// `--betas B1,B2`.
pub fn betas(text: &str) -> Result<(f64, f64), String> {
    let bad = || format!("cannot read {text:?} as two betas; write e.g. 0.9,0.999");
    let (a, b) = text.split_once(',').ok_or_else(bad)?;
    Ok((
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    ))
}

/// `--model NAME`: one of [`MODELS`], or the list of names.
pub fn model_name(name: &str) -> Result<&'static str, String> {
    MODELS.iter().find(|(n, _)| *n == name).map(|(n, _)| *n).ok_or_else(|| {
        let names: Vec<&str> = MODELS.iter().map(|(n, _)| *n).collect();
        format!(
            "unknown model {name:?}; the models are {} (see `bumpgrad models`)",
            names.join(", ")
        )
    })
}

/// `--width-mult X`: a positive scale of every channel count.
pub fn width_mult(text: &str) -> Result<f32, String> {
    match text.trim().parse::<f32>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        Ok(x) => Err(format!(
            "the width multiplier must be above 0, got {x}; e.g. 0.125 or 0.5"
        )),
        Err(_) => Err(format!(
            "cannot read {text:?} as a width multiplier; write a number such as 0.125 or 0.5"
        )),
    }
}

/// The model `name` (from [`model_name`]) sized by `flags`.
pub fn model(name: &str, flags: &ModelFlags) -> Result<ModelChoice, String> {
    let (_, make) = MODELS.iter().find(|(n, _)| *n == name).ok_or("unknown model")?;
    make(flags)
}

/// Settings as the library's `Debug` writes them, in words: every
/// `SomeConfig { beta1: 0.9, weight_decay: 0.01 }` becomes
/// `(beta1 0.9, weight decay 0.01)`, the rest of the text as it is
/// (`adamw AdamWConfig { … } clip_grad_norm 1` →
/// `adamw (beta1 0.9, …) clip_grad_norm 1`).
pub(crate) fn in_words(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find(" { ") {
        let Some(close) = rest[open..].find(" }").map(|c| open + c) else {
            break;
        };
        // The struct's name is the word before the brace: dropped.
        let name_start = rest[..open].rfind(' ').map_or(0, |s| s + 1);
        out.push_str(&rest[..name_start]);
        let fields: Vec<String> = rest[open + 3..close]
            .split(", ")
            .map(|field| match field.split_once(": ") {
                Some((name, value)) => format!("{} {value}", name.replace('_', " ")),
                None => field.to_string(),
            })
            .collect();
        out.push('(');
        out.push_str(&fields.join(", "));
        out.push(')');
        rest = &rest[close + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod words_tests {
    #[test]
    fn settings_read_as_words() {
        assert_eq!(
            super::in_words(
                "adamw AdamWConfig { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 } clip_grad_norm 1"
            ),
            "adamw (beta1 0.9, beta2 0.999, eps 1e-8, weight decay 0.01) clip_grad_norm 1"
        );
        assert_eq!(
            super::in_words("sgd SgdConfig { momentum: 0.0, nesterov: false, weight_decay: 0.0 }"),
            "sgd (momentum 0.0, nesterov false, weight decay 0.0)"
        );
        assert_eq!(super::in_words("mnist-cnn"), "mnist-cnn");
    }
}
