//! Pretrained word vectors in GloVe's text format, for a vocabulary: one
//! word a line, then its numbers, separated by single spaces
//! (`the 0.418 0.24968 -0.41242 …`). word2vec's text format, the same with
//! a first line of `count dimension`, is read too.
//!
//! Only the vocabulary's words are kept, so a 2 GB file costs one pass and
//! a table of the vocabulary's size. The vectors' length is the first
//! line's (or the header's); every line must give as many numbers. A word
//! may hold spaces (GloVe's 840B file has a few): the numbers are the
//! line's last fields, the word what comes before. A word given twice
//! keeps its first vector. A first line of two whole numbers is taken for
//! word2vec's header.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use super::{TextError, Vocab};
use crate::data::DataError;

/// The vectors a file gives a vocabulary's words; see the module.
#[derive(Debug, Clone)]
pub struct WordVectors {
    dim: usize,
    table: Vec<f32>,
    found: Vec<bool>,
}

impl WordVectors {
    /// Reads `path` for `vocab`'s words.
    pub fn read(path: &Path, vocab: &Vocab) -> Result<Self, DataError> {
        let io = |source| DataError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        Self::parse(path, std::io::BufReader::new(file), vocab)
    }

    /// [`WordVectors::read`] of bytes from `reader`, named `path` in errors.
    pub fn parse(path: &Path, mut reader: impl BufRead, vocab: &Vocab) -> Result<Self, DataError> {
        let syntax = |line: usize, why: String| {
            DataError::from(TextError::VectorsSyntax {
                path: path.to_path_buf(),
                line,
                why,
            })
        };
        let mut vectors = WordVectors {
            dim: 0,
            table: Vec::new(),
            found: vec![false; vocab.len()],
        };
        let mut bytes = Vec::new();
        let mut line = 0;
        loop {
            bytes.clear();
            let read = reader.read_until(b'\n', &mut bytes).map_err(|source| DataError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            if read == 0 {
                break;
            }
            line += 1;
            let text = std::str::from_utf8(&bytes).map_err(|e| {
                syntax(
                    line,
                    format!("not UTF-8 text (byte {} of the line)", e.valid_up_to() + 1),
                )
            })?;
            let text = text.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() {
                continue;
            }
            let fields: Vec<&str> = text.split(' ').collect();
            if vectors.dim == 0 {
                if let Some(dim) = header(&fields) {
                    vectors.start(dim);
                    continue;
                }
                if fields.len() < 2 {
                    return Err(syntax(line, "a word with no numbers after it".into()));
                }
                vectors.start(fields.len() - 1);
            }
            let dim = vectors.dim;
            if fields.len() < dim + 1 {
                return Err(syntax(
                    line,
                    format!(
                        "{} fields where a word and {dim} numbers were expected (the first line's count)",
                        fields.len()
                    ),
                ));
            }
            let (word, numbers) = fields.split_at(fields.len() - dim);
            let word = word.join(" ");
            let Some(id) = vocab.id(&word) else { continue };
            if vectors.found[id as usize] {
                continue;
            }
            let row = &mut vectors.table[id as usize * dim..][..dim];
            for (k, (to, text)) in row.iter_mut().zip(numbers).enumerate() {
                *to = match text.parse::<f32>() {
                    Ok(v) if v.is_finite() => v,
                    _ => {
                        return Err(syntax(
                            line,
                            format!("number {} of {word:?}, {text:?}, is not a finite number", k + 1),
                        ))
                    }
                };
            }
            vectors.found[id as usize] = true;
        }
        if vectors.dim == 0 {
            return Err(TextError::NoVectors {
                path: path.to_path_buf(),
            }
            .into());
        }
        Ok(vectors)
    }

    fn start(&mut self, dim: usize) {
        self.dim = dim;
        self.table = vec![0.0; self.found.len() * dim];
    }

    /// Numbers per word.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// `[V, dim]`, row `id` word `id`'s vector; zero where the file lacks
    /// the word (see [`WordVectors::found`]).
    pub fn table(&self) -> &[f32] {
        &self.table
    }

    /// Whether the file gave word `id` a vector.
    pub fn found(&self, id: u32) -> bool {
        self.found.get(id as usize).copied().unwrap_or(false)
    }

    /// How many of the vocabulary's words the file lacks, the unknown
    /// word's id among them unless the file names `<unk>`.
    pub fn missing(&self) -> usize {
        self.found.iter().filter(|f| !**f).count()
    }

    /// Checks the vectors' length against an embedding's.
    pub fn check_dim(&self, path: &Path, embed: usize) -> Result<(), TextError> {
        match self.dim == embed {
            true => Ok(()),
            false => Err(TextError::VectorsDim {
                path: PathBuf::from(path),
                dim: self.dim,
                embed,
            }),
        }
    }
}

/// word2vec's first line, `count dimension`: the dimension.
fn header(fields: &[&str]) -> Option<usize> {
    match fields {
        [count, dim] => {
            count.parse::<usize>().ok()?;
            dim.parse::<usize>().ok().filter(|&d| d > 0)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, words: &str) -> Result<WordVectors, DataError> {
        let vocab = Vocab::from_words(words.split(' '));
        WordVectors::parse(Path::new("vectors.txt"), text.as_bytes(), &vocab)
    }

    #[test]
    fn the_vocabularys_words_get_their_vectors_and_the_rest_are_counted_missing() {
        let text = "the 0.5 -1 2\ncat 1e-2 0 -0.25\ndog 3 3 3\nthe 9 9 9\n";
        let v = parse(text, "cat the bird").unwrap();
        assert_eq!(v.dim(), 3);
        // Ids: <unk> 0, bird 1, cat 2, the 3.
        assert_eq!(&v.table()[6..9], &[0.01, 0.0, -0.25]);
        assert_eq!(&v.table()[9..12], &[0.5, -1.0, 2.0], "a word's first vector is kept");
        assert_eq!(&v.table()[..6], &[0.0; 6]);
        assert_eq!([0, 1, 2, 3].map(|id| v.found(id)), [false, false, true, true]);
        assert_eq!(v.missing(), 2);
    }

    #[test]
    fn words_with_spaces_a_word2vec_header_and_crlf_lines_are_read() {
        let text = "2 2\r\n. . . 1 2\r\nof 3 4\r\n";
        let v = parse(text, ". . . of").unwrap();
        assert_eq!(v.dim(), 2);
        // Ids: <unk> 0, "." 1, "of" 2: the file's ". . ." is not the word ".".
        let vocab = Vocab::from_words([". . .", "of"]);
        let v2 = WordVectors::parse(Path::new("v.txt"), text.as_bytes(), &vocab).unwrap();
        assert_eq!(v2.table(), &[0.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
        assert_eq!(v.missing(), 2);
    }

    #[test]
    fn bad_files_are_errors_naming_the_file_and_line() {
        for (text, want) in [
            (
                "a 1 2\nb 1\n",
                "vectors.txt:2: 2 fields where a word and 2 numbers were expected",
            ),
            (
                "a 1 2\nb 1 x\n",
                "vectors.txt:2: number 2 of \"b\", \"x\", is not a finite number",
            ),
            ("a 1 inf\n", "vectors.txt:1: number 2 of \"a\""),
            ("\n\nlonely\n", "vectors.txt:3: a word with no numbers after it"),
            ("", "vectors.txt holds no word vectors"),
            ("\n \n", "vectors.txt holds no word vectors"),
        ] {
            let e = parse(text, "a b").expect_err(text).to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let bad_utf8 = WordVectors::parse(Path::new("vectors.txt"), &b"a 1\n\xff 2\n"[..], &Vocab::default());
        let e = bad_utf8.expect_err("not UTF-8").to_string();
        assert!(e.contains("vectors.txt:2: not UTF-8"), "{e}");
    }

    #[test]
    fn a_length_other_than_the_embeddings_says_the_width_needed() {
        let v = parse("a 1 2 3\n", "a").unwrap();
        assert!(v.check_dim(Path::new("v.txt"), 3).is_ok());
        let e = v.check_dim(Path::new("v.txt"), 300).unwrap_err().to_string();
        assert!(
            e.contains("v.txt gives vectors of 3 numbers, but the embedding has 300"),
            "{e}"
        );
        assert!(e.contains("the embedding must be 3 wide"), "{e}");
    }

    #[test]
    fn a_missing_file_is_an_io_error_naming_it() {
        let e = WordVectors::read(Path::new("/nonexistent/glove.txt"), &Vocab::default()).unwrap_err();
        assert!(matches!(e, DataError::Io { .. }), "{e:?}");
        assert!(e.to_string().contains("/nonexistent/glove.txt"), "{e}");
    }
}
