//! The Stanford Sentiment Treebank on the host: its three files of trees,
//! one a line (`train.txt`, `dev.txt`, `test.txt`), checked against a
//! `SHA256SUMS` beside them when there is one, every line parsed.
//!
//! Invariants of a loaded [`Treebank`]: each split holds at least one tree;
//! a line that is not a tree stopped the load with an error naming its file,
//! line and column (blank lines are skipped, so a file may end in newlines).

use std::path::Path;

use super::tree::Tree;
use super::TextError;
use crate::data::mnist::Checksums;
use crate::data::DataError;

/// The files of a treebank directory, in the order of its splits.
pub const FILES: [&str; 3] = ["train.txt", "dev.txt", "test.txt"];

/// SST's three splits of trees.
#[derive(Debug, Clone)]
pub struct Treebank {
    /// The training trees.
    pub train: Vec<Tree>,
    /// The development trees.
    pub dev: Vec<Tree>,
    /// The test trees.
    pub test: Vec<Tree>,
}

/// Whether `dir` holds a treebank: all three of its files.
pub fn present(dir: &Path) -> bool {
    FILES.iter().all(|name| dir.join(name).is_file())
}

impl Treebank {
    /// Reads and parses the three files in `dir`.
    pub fn load(dir: &Path) -> Result<Self, DataError> {
        let sums = Checksums::load(dir)?;
        let [train, dev, test] = FILES.map(|name| {
            let path = dir.join(name);
            let bytes = std::fs::read(&path).map_err(|source| DataError::Io {
                path: path.clone(),
                source,
            })?;
            sums.check(&path, &bytes)?;
            Ok::<_, DataError>(parse_file(&path, &bytes)?)
        });
        Ok(Treebank {
            train: train?,
            dev: dev?,
            test: test?,
        })
    }
}

/// The trees of a file's `bytes`, one a line; `path` names it in errors.
pub fn parse_file(path: &Path, bytes: &[u8]) -> Result<Vec<Tree>, TextError> {
    let mut trees = Vec::new();
    for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|&b| b == b' ' || b == b'\t') {
            continue;
        }
        let syntax = |column: usize, why: String| TextError::TreeSyntax {
            path: path.to_path_buf(),
            line: index + 1,
            column,
            why,
        };
        let text = std::str::from_utf8(line).map_err(|e| {
            let valid = &line[..e.valid_up_to()];
            let column = String::from_utf8_lossy(valid).chars().count() + 1;
            syntax(column, "bytes that are not UTF-8".to_string())
        })?;
        let tree = Tree::parse(text).map_err(|e| {
            let before = text.get(..e.offset).map_or(e.offset, |s| s.chars().count());
            syntax(before + 1, e.why)
        })?;
        trees.push(tree);
    }
    if trees.is_empty() {
        return Err(TextError::NoTrees {
            path: path.to_path_buf(),
        });
    }
    Ok(trees)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::testutil::{sha256_hex, TempDir};
    use crate::data::text::shipped;

    fn syntax_error(text: &str) -> (usize, usize, String) {
        match parse_file(Path::new("trees/dev.txt"), text.as_bytes()) {
            Err(TextError::TreeSyntax { line, column, why, .. }) => (line, column, why),
            other => panic!("{text:?}: expected TreeSyntax, got {other:?}"),
        }
    }

    #[test]
    fn the_shipped_treebank_has_the_published_counts() {
        let bank = Treebank::load(&shipped::sst()).unwrap();
        assert_eq!(
            (bank.train.len(), bank.dev.len(), bank.test.len()),
            (8_544, 1_101, 2_210)
        );
        let first: Vec<&str> = bank.train[0].words()[..4].iter().map(String::as_str).collect();
        assert_eq!(first, ["The", "Rock", "is", "destined"]);
        assert_eq!(bank.train[0].label(), 3);
        // The no-break space inside a leaf of train.txt stays in its word.
        let words = bank.train.iter().flat_map(|t| t.words());
        assert_eq!(words.filter(|w| w.contains('\u{a0}')).count(), 3);
        // Every node's label is a sentiment, and every tree has n leaves and n - 1 inner nodes.
        for tree in bank.train.iter().chain(&bank.dev).chain(&bank.test) {
            assert!(tree.nodes().iter().all(|n| n.label() <= 4));
            assert_eq!(tree.nodes().len(), 2 * tree.words().len() - 1);
        }
    }

    #[test]
    fn the_shipped_copies_match_their_checksums() {
        let dir = shipped::sst();
        let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
        for name in FILES {
            let hash = sha256_hex(&std::fs::read(dir.join(name)).unwrap());
            assert!(
                sums.lines().any(|l| l == format!("{hash}  {name}")),
                "{name}: {hash} not in {sums}"
            );
        }
    }

    #[test]
    fn errors_name_the_file_line_and_column() {
        let good = "(3 (2 It) (4 (2 's) (3 fine)))";
        let (line, column, why) = syntax_error(&format!("{good}\n{good}\n(3 (2 It) (4 (2 's) (3 fine))\n"));
        assert_eq!((line, column), (3, 30), "{why}");
        assert!(why.contains("still open"), "{why}");
        // Columns count characters, not bytes: `é` is two bytes.
        assert_eq!(syntax_error("(2 (2 café) (5 x))").1, 14);
        assert_eq!(syntax_error("(2 (2 café) x)").1, 13);
        // Blank lines are skipped but still counted.
        assert_eq!(syntax_error(&format!("{good}\n\n  \n(2 (2 a))\r\n")).0, 4);
        let bytes = b"(2 (2 ab\xff) (2 c))".to_vec();
        match parse_file(Path::new("t.txt"), &bytes) {
            Err(TextError::TreeSyntax { line, column, why, .. }) => {
                assert_eq!((line, column), (1, 9));
                assert!(why.contains("UTF-8"), "{why}");
            }
            other => panic!("expected TreeSyntax, got {other:?}"),
        }
        let message = parse_file(Path::new("trees/dev.txt"), b"(2 (2 a))")
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("trees/dev.txt:1:9: `)` after one subtree"),
            "{message}"
        );
    }

    #[test]
    fn a_file_without_trees_is_refused() {
        let err = parse_file(Path::new("empty.txt"), b"\n \n").unwrap_err();
        assert!(matches!(err, TextError::NoTrees { .. }), "{err:?}");
    }

    #[test]
    fn loading_checks_every_file() {
        let dir = TempDir::new("treebank");
        for name in FILES {
            dir.write(name, b"(1 (2 a) (1 bad))\n(3 good)\n");
        }
        assert!(present(dir.path()));
        let bank = Treebank::load(dir.path()).unwrap();
        assert_eq!((bank.train.len(), bank.dev.len(), bank.test.len()), (2, 2, 2));
        dir.write("SHA256SUMS", format!("{}  dev.txt\n", sha256_hex(b"other")).as_bytes());
        let err = Treebank::load(dir.path()).unwrap_err();
        assert!(
            matches!(&err, DataError::Checksum { path, .. } if path.ends_with("dev.txt")),
            "{err:?}"
        );
        std::fs::remove_file(dir.path().join("SHA256SUMS")).unwrap();
        dir.write("test.txt", b"(3 good)\n(3 (2 a) (3 b)\n");
        let message = Treebank::load(dir.path()).unwrap_err().to_string();
        assert!(message.contains("test.txt:2:"), "{message}");
        std::fs::remove_file(dir.path().join("dev.txt")).unwrap();
        assert!(!present(dir.path()));
        assert!(matches!(Treebank::load(dir.path()), Err(DataError::Io { .. })));
    }
}
