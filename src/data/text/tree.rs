//! One binarised, labelled constituency tree, parsed from the Penn Treebank
//! bracketing the Stanford Sentiment Treebank writes one a line:
//! `(3 (2 It) (4 (2 's) (2 fine)))`.
//!
//! Grammar (spaces are ASCII spaces or tabs):
//! - a node is `(`, a label `0`–`4`, one or more spaces, then either a word
//!   or two nodes separated by spaces, then `)`;
//! - a word is everything up to its `)`, trailing spaces dropped: it may
//!   hold spaces (SST writes `(2 8 1\/2)`, with a no-break space) but no
//!   bracket — the treebank writes them `-LRB-` and `-RRB-`;
//! - the line is one node, with spaces allowed around it.
//!
//! Words are kept as written (`-LRB-`, `\/`, `` `` ``): they are tokens, and
//! a vocabulary of them is the one published models use; [`unescape`] gives
//! the text a person would read.
//!
//! Invariants of a [`Tree`]: its nodes are in post-order (children before
//! their parent; the root last), every inner node has two children, and its
//! leaves in order are its words in order, the sentence.

/// One node of a [`Tree`]: a leaf holding a word or an inner node joining
/// two subtrees; every node carries a sentiment label 0–4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// `word` indexes [`Tree::words`].
    Leaf {
        /// Its sentiment, 0–4.
        label: u8,
        /// Its word, in [`Tree::words`].
        word: u32,
    },
    /// `left` and `right` index [`Tree::nodes`], both before this node.
    Inner {
        /// Its sentiment, 0–4.
        label: u8,
        /// The left subtree's root, in [`Tree::nodes`].
        left: u32,
        /// The right subtree's root, in [`Tree::nodes`].
        right: u32,
    },
}

impl Node {
    /// The sentiment of the phrase under this node, 0–4.
    pub fn label(&self) -> u8 {
        match *self {
            Node::Leaf { label, .. } | Node::Inner { label, .. } => label,
        }
    }
}

/// A parsed tree; see the module's invariants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    nodes: Vec<Node>,
    words: Vec<String>,
}

/// Why a line is not a tree: the byte offset in the line it went wrong at,
/// and what was wrong. [`super::treebank`] turns it into a
/// [`super::TextError::TreeSyntax`] naming the file, line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// Where in the line it went wrong, in bytes.
    pub offset: usize,
    /// What was wrong.
    pub why: String,
}

impl Tree {
    /// Every node, in post-order: the root is the last.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The root's label: the sentence's sentiment, 0–4.
    pub fn label(&self) -> u8 {
        // A parsed tree has at least one node.
        self.nodes.last().map_or(0, Node::label)
    }

    /// The leaves' words, in order: the sentence.
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// Parses one line.
    pub fn parse(line: &str) -> Result<Tree, SyntaxError> {
        Parser {
            text: line.as_bytes(),
            at: 0,
            tree: Tree {
                nodes: Vec::new(),
                words: Vec::new(),
            },
            open: Vec::new(),
        }
        .run()
    }
}

/// An inner node whose `)` has not been read yet, and its left subtree
/// once that is read.
struct Open {
    label: u8,
    left: Option<u32>,
}

/// A parser without recursion, so no line, however deeply nested, can
/// overflow the stack: the nodes still open are a stack on the heap.
struct Parser<'t> {
    text: &'t [u8],
    at: usize,
    tree: Tree,
    open: Vec<Open>,
}

impl Parser<'_> {
    fn run(mut self) -> Result<Tree, SyntaxError> {
        self.skip_spaces();
        if self.at == self.text.len() {
            return Err(self.error("an empty line, expected a tree `(`"));
        }
        loop {
            // At the start of a node.
            let opened = self.at;
            self.expect_open()?;
            let label = self.label()?;
            if self.peek() == Some(b'(') {
                self.open.push(Open { label, left: None });
                continue;
            }
            let mut done = self.leaf(label, opened)?;
            // After a node: it is a child of the innermost open node, or the root.
            loop {
                let Some(parent) = self.open.last_mut() else {
                    self.skip_spaces();
                    if self.at < self.text.len() {
                        return Err(self.error("text after the tree's last `)`"));
                    }
                    return Ok(self.tree);
                };
                let left = parent.left.replace(done);
                self.skip_spaces();
                match (self.peek(), left) {
                    (Some(b'('), None) => break,
                    (Some(b'('), Some(_)) => return Err(self.error("a third subtree: the trees are binary")),
                    (Some(b')'), Some(left)) => {
                        self.at += 1;
                        let label = self.open.pop().map_or(0, |parent| parent.label);
                        done = self.push(Node::Inner {
                            label,
                            left,
                            right: done,
                        });
                    }
                    (Some(b')'), None) => return Err(self.error("`)` after one subtree: the trees are binary")),
                    (Some(_), _) => return Err(self.error("a word beside a subtree, expected `(` or `)`")),
                    (None, _) => {
                        let open = self.open.len();
                        return Err(self.error(&format!("the line ends with {open} bracket(s) still open")));
                    }
                }
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    fn error(&self, why: &str) -> SyntaxError {
        SyntaxError {
            offset: self.at,
            why: why.to_string(),
        }
    }

    fn expect_open(&mut self) -> Result<(), SyntaxError> {
        match self.peek() {
            Some(b'(') => {
                self.at += 1;
                Ok(())
            }
            Some(_) => Err(self.error("expected `(`")),
            None => Err(self.error("the line ends where a node should start")),
        }
    }

    /// The label and the spaces after it.
    fn label(&mut self) -> Result<u8, SyntaxError> {
        let label = match self.peek() {
            Some(digit @ b'0'..=b'4') => digit - b'0',
            Some(digit @ b'5'..=b'9') => {
                let digit = char::from(digit);
                return Err(self.error(&format!("label {digit} is not a sentiment 0–4")));
            }
            _ => return Err(self.error("expected a label 0–4 after `(`")),
        };
        self.at += 1;
        if !matches!(self.peek(), Some(b' ' | b'\t')) {
            return Err(self.error("expected a space after the label (labels are one digit, 0–4)"));
        }
        self.skip_spaces();
        Ok(label)
    }

    /// A word up to its `)`, which it consumes.
    fn leaf(&mut self, label: u8, opened: usize) -> Result<u32, SyntaxError> {
        let start = self.at;
        let Some(len) = self.text[start..].iter().position(|&b| b == b'(' || b == b')') else {
            self.at = self.text.len();
            return Err(SyntaxError {
                offset: opened,
                why: "this node's `(` is never closed".to_string(),
            });
        };
        self.at = start + len;
        if self.text[self.at] == b'(' {
            return Err(self.error("`(` inside a word (the treebank writes brackets in words as -LRB- and -RRB-)"));
        }
        let word = self.text[start..self.at].trim_ascii_end();
        if word.is_empty() {
            return Err(self.error("a leaf without a word"));
        }
        self.at += 1;
        // The line is a `str` and the word ends before an ASCII bracket, so
        // it is whole characters; `from_utf8_lossy` never replaces here.
        let word = String::from_utf8_lossy(word).into_owned();
        self.tree.words.push(word);
        let word = (self.tree.words.len() - 1) as u32;
        Ok(self.push(Node::Leaf { label, word }))
    }

    fn push(&mut self, node: Node) -> u32 {
        self.tree.nodes.push(node);
        (self.tree.nodes.len() - 1) as u32
    }
}

/// The text a person reads for a word as the treebank writes it: brackets
/// from `-LRB-`/`-RRB-` (and the square and curly ones), `/` and `*` from
/// `\/` and `\*`.
pub fn unescape(word: &str) -> String {
    const BRACKETS: [(&str, &str); 6] = [
        ("-LRB-", "("),
        ("-RRB-", ")"),
        ("-LSB-", "["),
        ("-RSB-", "]"),
        ("-LCB-", "{"),
        ("-RCB-", "}"),
    ];
    let mut out = word.replace("\\/", "/").replace("\\*", "*");
    for (escaped, bracket) in BRACKETS {
        out = out.replace(escaped, bracket);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(tree: &Tree) -> Vec<&str> {
        tree.words().iter().map(String::as_str).collect()
    }

    #[test]
    fn a_tree_parses_in_post_order() {
        let tree = Tree::parse("(3 (2 It) (4 (2 's) (3 fine)))").unwrap();
        assert_eq!(words(&tree), ["It", "'s", "fine"]);
        assert_eq!(
            tree.nodes(),
            [
                Node::Leaf { label: 2, word: 0 },
                Node::Leaf { label: 2, word: 1 },
                Node::Leaf { label: 3, word: 2 },
                Node::Inner {
                    label: 4,
                    left: 1,
                    right: 2
                },
                Node::Inner {
                    label: 3,
                    left: 0,
                    right: 3
                },
            ]
        );
        assert_eq!(tree.label(), 3);
    }

    #[test]
    fn a_single_word_is_a_tree() {
        let tree = Tree::parse("  (0 awful)  ").unwrap();
        assert_eq!((words(&tree), tree.label(), tree.nodes().len()), (vec!["awful"], 0, 1));
    }

    #[test]
    fn words_may_hold_spaces_and_escapes() {
        let tree = Tree::parse("(2 (2 8\u{a0}1\\/2) (1 (2 -LRB-) (2 2 1\\/2 )))").unwrap();
        assert_eq!(words(&tree), ["8\u{a0}1\\/2", "-LRB-", "2 1\\/2"]);
        assert_eq!(unescape("8\u{a0}1\\/2"), "8\u{a0}1/2");
        assert_eq!(unescape("-LRB-a\\*b-RRB-"), "(a*b)");
        let accented = Tree::parse("(3 (2 café) (3 élan))").unwrap();
        assert_eq!(words(&accented), ["café", "élan"]);
    }

    #[test]
    fn malformed_lines_say_where() {
        // (line, byte offset of the fault, a word of the reason)
        let cases = [
            ("", 0, "empty"),
            ("3 (2 It)", 0, "expected `(`"),
            ("(7 (2 It) (2 is))", 1, "not a sentiment"),
            ("(x It)", 1, "label"),
            ("(12 It)", 2, "space after the label"),
            ("(3 (2 It) (2 is)", 16, "still open"),
            ("(3 (2 It) (2 is", 10, "never closed"),
            ("(3 (2 It) (2 is)))", 17, "after the tree"),
            ("(3 (2 It))", 9, "binary"),
            ("(3 (2 It) (2 is) (2 fine))", 17, "third subtree"),
            ("(3 (2 It) word)", 10, "beside a subtree"),
            ("(2 f(o)o)", 4, "inside a word"),
            ("(2 )", 3, "without a word"),
            ("(3 (2 It) (2 is)) (2 x)", 18, "after the tree"),
        ];
        for (line, offset, why) in cases {
            let err = Tree::parse(line).unwrap_err();
            assert_eq!(err.offset, offset, "{line:?}: {err:?}");
            assert!(err.why.contains(why), "{line:?}: {err:?}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let line = "(2 ".repeat(1_000_000);
        let err = Tree::parse(&line).unwrap_err();
        assert!(err.why.contains("never closed"), "{err:?}");
        let deep = format!("{}(2 a){}", "(2 (2 a) ".repeat(100_000), ")".repeat(100_000));
        assert_eq!(Tree::parse(&deep).unwrap().words().len(), 100_001);
    }
}
