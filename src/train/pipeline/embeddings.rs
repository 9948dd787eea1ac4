//! Where a model's word embedding starts: pretrained vectors read for the
//! task's vocabulary, or its random draw. Either way the run says which.

use crate::backend::Mode;
use crate::data::DataSet;
use crate::nn::Network;
use crate::train::RunConfig;
use crate::Engine;
use crate::{Error, Result, Setting};

/// Writes the vectors of `run.embeddings` into `model`'s word embedding,
/// word by word of the task's vocabulary (a word the file lacks keeps its
/// random draw), on an engine that holds values (a dry run only plans, and
/// the file may be gigabytes). Returns the line the run reports, if the
/// model has a word embedding.
pub(super) fn start_embedding(
    run: &RunConfig,
    host: &DataSet,
    engine: &mut Engine,
    model: &dyn Network,
) -> Result<Option<String>> {
    let table = model.word_embedding();
    let (Some(path), Some(table)) = (&run.embeddings, table) else {
        return match (&run.embeddings, table) {
            (Some(path), None) => Err(Error::setting(
                Setting::Model,
                format!(
                    "the model {} has no word embedding to start from the vectors of {}",
                    run.model.name(),
                    path.display()
                ),
                None,
            )),
            (None, Some(_)) => Ok(Some(
                "word embedding drawn at random (N(0, 1)) and trained: no pretrained vectors given".into(),
            )),
            _ => Ok(None),
        };
    };
    let (rows, embed) = match table.shape().dims() {
        &[rows, embed] => (rows, embed),
        _ => return Err(Error::Config(format!("a word embedding [V, E], got {}", table.shape()))),
    };
    if engine.mode() != Mode::Run {
        return Ok(None);
    }
    let vectors = run.task.pretrained(host, path, embed)?.ok_or_else(|| {
        Error::setting(
            Setting::Data,
            format!(
                "the task {} reads no words to match the vectors of {} to",
                run.task.name(),
                path.display()
            ),
            None,
        )
    })?;
    if vectors.found.len() != rows {
        return Err(Error::Config(format!(
            "a word embedding of a row per word of the vocabulary's {}, got {}",
            vectors.found.len(),
            table.shape()
        )));
    }
    let mut values = vec![0.0f32; rows * embed];
    engine.read_persistent(table.buf(), &mut values)?;
    for id in (0..rows).filter(|&id| vectors.found[id]) {
        values[id * embed..][..embed].copy_from_slice(&vectors.table[id * embed..][..embed]);
    }
    engine.write_persistent(table.buf(), &values)?;
    let missing = vectors.found.iter().filter(|f| !**f).count();
    Ok(Some(format!(
        "word embedding from {}: {} of the vocabulary's {rows} words found, the other {} drawn at random (N(0, 1))",
        path.display(),
        rows - missing,
        missing
    )))
}
