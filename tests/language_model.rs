//! Character language models on the CPU: char-lstm and char-rnn learn a
//! slice of tiny-shakespeare through the session (the loss falls well below
//! ln(vocab), validation perplexity is reported and finite); the state
//! each stream carries from one window to the next is really carried (a
//! second window after the first gives the logits of one sequence of both,
//! and not those of a fresh start); and a model and data that do not fit
//! are refused with what each reads.

use bumpgrad::data::text::TextError;
use bumpgrad::data::DataError;
use bumpgrad::models::{CharLmConfig, CharLstm, CharRnn, Depth, ResNet};
use bumpgrad::nn::{Input, Mode, Model, ParamStore, Tokens};
use bumpgrad::tasks::Classification;
use bumpgrad::tensor::Shape;
use bumpgrad::train::{DeviceConfig, Pipeline, StepKind, TrainConfig};
use bumpgrad::{Device, Engine, Error, Setting};

#[path = "support/char_lm_case.rs"]
mod char_lm_case;
use char_lm_case::{config, shakespeare_slice, small_lstm, train};

/// The distinct bytes of the first `bytes` of tiny-shakespeare.
fn vocab(bytes: usize) -> usize {
    let text = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/data/tinyshakespeare/input.txt")).unwrap();
    let mut seen = [false; 256];
    text[..bytes].iter().for_each(|&b| seen[b as usize] = true);
    seen.iter().filter(|&&s| s).count()
}

/// 12,000 bytes: 42 windows of 16 streams × 16 tokens an epoch, 4 to
/// validate on.
const SLICE: usize = 12_000;

fn learns(name: &str, model: bumpgrad::nn::ModelChoice) {
    let cfg = config(shakespeare_slice(SLICE, name), model, &DeviceConfig::cpu(2), 2);
    let seen = train(&cfg);
    let chance = (vocab(SLICE) as f64).ln();
    assert_eq!(seen.losses.len(), 2 * 42, "{name}: one step per window");
    let first = seen.losses[0] as f64;
    assert!(
        (first - chance).abs() < 0.5,
        "{name}: the first loss {first} is near ln(vocab) {chance}"
    );
    let last: f64 = seen.losses[seen.losses.len() - 10..]
        .iter()
        .map(|&l| l as f64)
        .sum::<f64>()
        / 10.0;
    assert!(
        last < 0.7 * chance,
        "{name}: the loss fell to {last}, not well below ln(vocab) {chance}"
    );
    for r in &seen.reports {
        let (loss, ppl) = (
            r.valid_loss.expect("a validation loss"),
            r.perplexity.expect("a perplexity"),
        );
        assert!(loss.is_finite() && ppl.is_finite(), "{name}: {loss} {ppl}");
        assert!((ppl - loss.exp()).abs() < 1e-9 * ppl, "{name}: perplexity is exp(loss)");
        assert!(r.test_accuracy.is_nan(), "{name}: a language model has no accuracy");
    }
    let ppl = seen.reports[1].perplexity.unwrap();
    assert!(ppl < 0.5 * vocab(SLICE) as f64, "{name}: validation perplexity {ppl}");
}

#[test]
fn char_lstm_learns_a_slice_of_shakespeare() {
    learns("lm-lstm", small_lstm());
}

#[test]
fn char_rnn_learns_a_slice_of_shakespeare() {
    let rnn = CharRnn::choice(CharLmConfig {
        embed: 32,
        hidden: 64,
        layers: 1,
    });
    learns("lm-rnn", rnn);
}

/// `--embed 0`: no embedding, the recurrent layer reads one-hot tokens.
fn one_hot(hidden: usize) -> CharLmConfig {
    CharLmConfig {
        embed: 0,
        hidden,
        layers: 1,
    }
}

#[test]
fn one_hot_char_models_learn_a_slice_of_shakespeare() {
    learns("lm-lstm-onehot", CharLstm::choice(one_hot(48)));
    learns("lm-rnn-onehot", CharRnn::choice(one_hot(64)));
}

/// With one-hot input there is no `encoder.weight`, and `rnn.weight_ih_l0`
/// is `[G·H, vocab]`, as in `nn.LSTM(input_size=vocab)` and
/// `nn.RNN(input_size=vocab)`.
#[test]
fn one_hot_models_are_named_as_pytorchs_recurrent_layers_of_the_vocabulary() {
    fn names<M: Model<Config = CharLmConfig>>() -> Vec<(String, Vec<usize>)> {
        let input = Input {
            example: Shape::new(&[4]),
            classes: 11,
        };
        let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
        let (store, _) = ParamStore::build(&mut engine.persistent(), 1, |pb| M::new(&one_hot(5), input, pb)).unwrap();
        store
            .entries()
            .iter()
            .map(|e| (e.name.clone(), e.shape.dims().to_vec()))
            .collect()
    }
    let want = |g: usize| {
        vec![
            ("rnn.weight_ih_l0".to_string(), vec![g * 5, 11]),
            ("rnn.weight_hh_l0".into(), vec![g * 5, 5]),
            ("rnn.bias_ih_l0".into(), vec![g * 5]),
            ("rnn.bias_hh_l0".into(), vec![g * 5]),
            ("decoder.weight".into(), vec![11, 5]),
            ("decoder.bias".into(), vec![11]),
        ]
    };
    assert_eq!(names::<CharLstm>(), want(4));
    assert_eq!(names::<CharRnn>(), want(1));
}

/// Logits of `model` for `ids` (`[T, B]` time-major) with the state in
/// `carried`, which the step then holds the final state in (recorded for
/// backward, as a step records by default).
fn logits<M: Model>(
    engine: &mut Engine,
    model: &M,
    ids: &[u32],
    streams: usize,
    carried: bumpgrad::memory::Buf<f32>,
) -> Vec<f32> {
    logits_recording(engine, model, ids, streams, carried, true)
}

fn carries<M: Model<Config = CharLmConfig>>(name: &str, embed: usize) {
    let (steps, streams, vocab) = (5, 3, 11);
    let config = CharLmConfig {
        embed,
        hidden: 7,
        layers: 2,
    };
    let input = Input {
        example: Shape::new(&[steps]),
        classes: vocab,
    };
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 1 << 22).unwrap();
    let mut p = engine.persistent();
    let (_store, model) = ParamStore::build(&mut p, 7, |pb| M::new(&config, input, pb)).unwrap();
    let floats = streams * model.carried();
    let carried = p.zeros::<f32>("carried", Shape::new(&[floats])).unwrap();
    let fresh = p.zeros::<f32>("fresh", Shape::new(&[floats])).unwrap();
    // 2T steps of B streams, time-major: the first T rows are window 1.
    let ids: Vec<u32> = (0..2 * steps * streams)
        .map(|i| (i * 7 + i / 5) as u32 % vocab as u32)
        .collect();
    let (one, two) = ids.split_at(steps * streams);
    logits(&mut engine, &model, one, streams, carried);
    let carried_on = logits(&mut engine, &model, two, streams, carried);
    let whole = logits(&mut engine, &model, &ids, streams, fresh);
    let reference = &whole[steps * streams * vocab..];
    let worst = carried_on
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(
        worst < 1e-5,
        "{name}: window 2 after window 1 is off one sequence of both by {worst}"
    );
    engine.write_persistent(carried, &vec![0.0; floats]).unwrap();
    let from_zeros = logits(&mut engine, &model, two, streams, carried);
    let apart = carried_on
        .iter()
        .zip(&from_zeros)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(apart > 1e-3, "{name}: the carried state changed nothing ({apart})");
}

#[test]
fn the_state_is_carried_from_window_to_window() {
    carries::<CharLstm>("char-lstm", 6);
    carries::<CharRnn>("char-rnn", 6);
    carries::<CharLstm>("char-lstm one-hot", 0);
    carries::<CharRnn>("char-rnn one-hot", 0);
}

/// Logits of `model` for `ids` from a zero state: as evaluation runs it
/// (no gradient recorded), or as training does (recorded for backward).
fn logits_recording<M: Model>(
    engine: &mut Engine,
    model: &M,
    ids: &[u32],
    streams: usize,
    carried: bumpgrad::memory::Buf<f32>,
    record: bool,
) -> Vec<f32> {
    engine
        .step(|s| {
            s.set_grad_enabled(record);
            let x = Tokens {
                ids: s.labels(ids)?,
                steps: ids.len() / streams,
                streams,
                carried,
            };
            // The character models have no dropout: what training changes
            // in their forward is only that it records for backward.
            let y = model.forward_tokens(s, x, Mode::Eval)?;
            let mut out = vec![0.0; y.shape().numel()];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .expect("a forward pass")
}

/// A char-lstm's evaluation step keeps one step's gate activations, not
/// every step's: its planned peak is below what one layer alone holds
/// while it runs when it keeps them all (its gates' input summand, every
/// step's gates, h and c: `T·B·(4H + 4H + H + H)` floats, and on the CPU
/// `W_hh` transposed, `4H·H`), which the training step does hold; and its
/// logits are the training forward's, bit for bit.
#[test]
fn the_evaluation_step_keeps_one_steps_gates_and_the_same_logits() {
    let config_of = CharLmConfig {
        embed: 8,
        hidden: 128,
        layers: 2,
    };
    let cfg = config(
        shakespeare_slice(SLICE, "lm-eval-gates"),
        CharLstm::choice(config_of),
        &DeviceConfig::cpu(2),
        1,
    );
    // `config`'s windows: 16 tokens.
    let (steps, streams, hidden) = (16, cfg.run.batch, config_of.hidden);
    let needs = Pipeline::open(&cfg, None).unwrap().dry_runs().plain().unwrap();
    let peak = |kind: StepKind| {
        let plan = needs.plans.iter().find(|p| p.key == kind as u32);
        plan.unwrap_or_else(|| panic!("a plan of the {}", StepKind::name(kind as u32)))
            .peak
    };
    let all_gates = (steps * streams * (4 * hidden + 4 * hidden + hidden + hidden) + 4 * hidden * hidden)
        * std::mem::size_of::<f32>();
    let (eval, train) = (peak(StepKind::Eval), peak(StepKind::Train));
    assert!(
        eval < all_gates,
        "the evaluation step peaks at {eval} bytes: one layer keeping every step's gates needs {all_gates}"
    );
    assert!(
        train >= all_gates,
        "the training step, {train} bytes, keeps every step's gates"
    );

    let input = Input {
        example: Shape::new(&[steps]),
        classes: 40,
    };
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 1 << 24).unwrap();
    let mut p = engine.persistent();
    let (_store, model) = ParamStore::build(&mut p, 7, |pb| CharLstm::new(&config_of, input, pb)).unwrap();
    let floats = Shape::new(&[3 * model.carried()]);
    let (one, other) = (
        p.zeros::<f32>("carried", floats).unwrap(),
        p.zeros::<f32>("other", floats).unwrap(),
    );
    let ids: Vec<u32> = (0..steps * 3).map(|i| (i * 7 + i / 5) as u32 % 40).collect();
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let evaluated = bits(logits_recording(&mut engine, &model, &ids, 3, one, false));
    let recorded = bits(logits_recording(&mut engine, &model, &ids, 3, other, true));
    assert_eq!(
        evaluated, recorded,
        "evaluation's logits are not the training forward's"
    );
}

fn refusal(cfg: &TrainConfig) -> Error {
    match Pipeline::open(cfg, None).and_then(Pipeline::build) {
        Ok(_) => panic!("the run was not refused"),
        Err(e) => e,
    }
}

#[test]
fn models_and_data_that_do_not_fit_are_refused_with_what_each_reads() {
    let corpus = shakespeare_slice(SLICE, "lm-refusals");
    let mut on_images = config(corpus.clone(), small_lstm(), &DeviceConfig::cpu(2), 1);
    on_images.run.data_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into();
    on_images.run.task = Classification::choice(Default::default());
    let err = refusal(&on_images);
    assert!(
        matches!(
            err,
            Error::Setting {
                setting: Setting::Model,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("char-lstm reads token ids") && text.contains("image data set"),
        "{text}"
    );

    let resnet = config(
        corpus.clone(),
        ResNet::choice(Depth::R18, 0.125),
        &DeviceConfig::cpu(2),
        1,
    );
    let text = refusal(&resnet).to_string();
    assert!(
        text.contains("resnet18 reads images") && text.contains("text corpus"),
        "{text}"
    );

    // 300 bytes: 270 training tokens hold one window of 16 × 16 (and its
    // last target); 30 validation tokens do not.
    let short = config(
        shakespeare_slice(300, "lm-short"),
        small_lstm(),
        &DeviceConfig::cpu(2),
        1,
    );
    match refusal(&short) {
        Error::Data(DataError::Text(TextError::SplitTooShort {
            split, tokens, needed, ..
        })) => {
            assert_eq!((split, tokens, needed), ("validation", 30, 257));
        }
        other => panic!("expected SplitTooShort, got {other:?}"),
    }
}
