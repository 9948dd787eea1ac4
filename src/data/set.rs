//! A loaded data set of any kind: what a task is built from. The pipeline
//! loads one by what its path holds ([`DataKind`]) and hands it to the
//! run's task, which takes the kind it trains on and refuses the others
//! with the sizes and kinds involved.

use std::path::Path;

use super::text::{CharCorpus, Treebank};
use super::{DataError, DataKind, DataSource, ImageOptions, ImageSet};

/// A data set in host memory, validated.
#[derive(Debug, Clone)]
pub enum DataSet {
    /// Images and their class labels.
    Images(ImageSet),
    /// A text file's characters, split for training and validation.
    Corpus(CharCorpus),
    /// Sentiment trees in three splits (which sentences a task keeps, and
    /// their vocabulary, are the task's choice: five classes or two).
    Treebank(Treebank),
}

impl DataSet {
    /// The data set `source` holds, read by its kind.
    pub fn open(source: &DataSource) -> Result<Self, DataError> {
        Self::open_with(source, &ImageOptions::default())
    }

    /// [`DataSet::open`], an image folder read as `folder` says.
    pub fn open_with(source: &DataSource, folder: &ImageOptions) -> Result<Self, DataError> {
        let kind = DataKind::of(source);
        if kind != DataKind::Images && !folder.is_default() {
            return Err(DataError::NotAFolder {
                dir: source.to_string().into(),
                name: kind.describe().to_string(),
            });
        }
        match (kind, source) {
            (DataKind::Corpus, DataSource::Dir(path)) => Ok(Self::Corpus(CharCorpus::load(path)?)),
            (DataKind::Treebank, DataSource::Dir(path)) => Ok(Self::Treebank(Treebank::load(path)?)),
            _ => Ok(Self::Images(ImageSet::open_with(source, folder)?)),
        }
    }

    /// The set at `path`.
    pub fn load(path: &Path) -> Result<Self, DataError> {
        Self::open(&DataSource::Dir(path.to_path_buf()))
    }

    /// Which kind of data set it is.
    pub fn kind(&self) -> DataKind {
        match self {
            Self::Images(_) => DataKind::Images,
            Self::Corpus(_) => DataKind::Corpus,
            Self::Treebank(_) => DataKind::Treebank,
        }
    }

    /// What it is, for people ("MNIST", "a text corpus").
    pub fn name(&self) -> &str {
        match self {
            Self::Images(set) => &set.name,
            Self::Corpus(_) => "character corpus",
            Self::Treebank(_) => "sentiment treebank",
        }
    }

    /// What reading it found that a person should be told, a line each
    /// (see [`ImageSet::notes`]).
    pub fn notes(&self) -> &[String] {
        match self {
            Self::Images(set) => &set.notes,
            _ => &[],
        }
    }

    /// Random data, whose metric means nothing.
    pub fn synthetic(&self) -> bool {
        matches!(self, Self::Images(set) if set.synthetic)
    }

    /// Training and test examples as the report counts them: images, the
    /// tokens of each split, or the trees of the training and development
    /// splits.
    pub fn sizes(&self) -> (usize, usize) {
        match self {
            Self::Images(set) => (set.train_images.count, set.test_images.count),
            Self::Corpus(c) => (c.train().len(), c.valid().len()),
            Self::Treebank(bank) => (bank.train.len(), bank.dev.len()),
        }
    }

    /// What [`DataSet::sizes`] counts: "images" or "tokens".
    pub fn unit(&self) -> &'static str {
        match self {
            Self::Images(_) => "images",
            Self::Corpus(_) => "tokens",
            Self::Treebank(_) => "trees",
        }
    }

    /// The images, if it is an image set.
    pub fn images(&self) -> Option<&ImageSet> {
        match self {
            Self::Images(set) => Some(set),
            _ => None,
        }
    }

    /// The images, to change before a run is built (their normalisation).
    pub fn images_mut(&mut self) -> Option<&mut ImageSet> {
        match self {
            Self::Images(set) => Some(set),
            _ => None,
        }
    }

    /// The corpus, if it is a text corpus.
    pub fn corpus(&self) -> Option<&CharCorpus> {
        match self {
            Self::Corpus(c) => Some(c),
            _ => None,
        }
    }

    /// The treebank, if it is one.
    pub fn treebank(&self) -> Option<&Treebank> {
        match self {
            Self::Treebank(bank) => Some(bank),
            _ => None,
        }
    }
}

impl From<ImageSet> for DataSet {
    fn from(set: ImageSet) -> Self {
        Self::Images(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::text::shipped;

    #[test]
    fn each_kind_opens_as_its_set() {
        let corpus = DataSet::load(&shipped::tiny_shakespeare()).unwrap();
        assert_eq!(corpus.kind(), DataKind::Corpus);
        assert_eq!(corpus.sizes(), (1_003_854, 111_540));
        assert!(corpus.images().is_none() && corpus.corpus().is_some());
        let images = DataSet::open(&DataSource::parse("synthetic:cifar10:8").unwrap()).unwrap();
        assert_eq!((images.kind(), images.synthetic()), (DataKind::Images, true));
        let sst = DataSet::load(&shipped::sst()).unwrap();
        assert_eq!((sst.kind(), sst.sizes()), (DataKind::Treebank, (8_544, 1_101)));
        assert!(sst.treebank().is_some() && sst.corpus().is_none());
    }
}
