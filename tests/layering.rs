//! The layers of `docs/ARCHITECTURE.md`, and the arrows it says must never
//! exist, checked on the source.
//!
//! The doc is read, not copied: its table of layers (top to bottom, each
//! with the `src/` folders and files in it) and its Never list. Every `.rs`
//! file under `src/`, the binary's included, must be in a layer of the
//! table. Each file is read with its comments dropped and its string and
//! char literals blanked, and the crate paths it uses are collected: `use`
//! declarations (grouped ones expanded, `super::` and `self::` resolved,
//! the root's re-exports such as `crate::Step` mapped to their layer),
//! inline paths (`crate::ops::relu::forward(..)`), and inline paths through
//! an imported module (`use crate::ops;` then `ops::relu::Saved`). A path
//! into a layer above the file's own breaks the table's order; a path a
//! Never arrow names breaks that rule. Three Never rules are about names,
//! and their names are generated from the source, not typed here:
//! - a named op: a folder of the ops layer (`crate::ops::relu`); the rest
//!   of ops (its registry, its step) is held to the table's order like any
//!   layer, so autograd imports nothing of ops at all;
//! - a device kind: a variant of a runtime enum that has one variant per
//!   device folder of the runtime (`DeviceKind::Dry`, `Backend::Cuda`);
//! - a concrete model, optimizer, task or data set: the module and public
//!   types of each file of the models, optim, tasks and data layers (but the few
//!   they share, [`SHARED`]), the names their `mod.rs` re-exports from it,
//!   a word spelling the file's name (`Cifar10`, `MNIST_MEAN`), and every
//!   type implementing a trait train takes such things through ([`SEAMS`]).
//!
//! Violations today's code still has are listed in [`KNOWN`] with the
//! number of lines each is on; issue 30 removes them. More lines than listed
//! fail the test, and so do fewer: the list only shrinks.
//!
//! The check is a function of the doc and `(file, source)` pairs, so the
//! self-tests at the bottom feed it planted docs and files and hold it to
//! reporting them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write;
use std::ops::Range;
use std::path::Path;

const DOC: &str = "docs/ARCHITECTURE.md";

/// The library's crate name, as the binary writes its paths.
const LIB: &str = env!("CARGO_PKG_NAME");

/// The layers the name rules and the test exemption refer to by name.
const RUNTIME: &str = "runtime";
const OPS: &str = "ops";
const CONCRETE_LAYERS: &[&str] = &["models", "optim", "tasks", "data"];

/// Files of the models, optim, tasks and data layers that are not one model,
/// optimizer or data set but what several share; every other file there is
/// one, so a new one is checked with no edit here. An entry that is no
/// longer such a file fails the test.
const SHARED: &[&str] = &[
    // The learning-rate schedule, whatever the optimizer.
    "src/optim/schedule.rs",
    // The loaded image set and where it comes from, whichever files.
    "src/data/image_set.rs",
    // What a data path holds, whichever data set.
    "src/data/kind.rs",
    // The epoch's shuffled order.
    "src/data/order.rs",
    // A set uploaded into the persistent region.
    "src/data/resident.rs",
    // The loaded set of any kind, which a task is built from.
    "src/data/set.rs",
];

/// The traits train takes models, optimizers and tasks through: a type of
/// the crate implementing one is concrete, wherever it is declared.
const SEAMS: &[&str] = &["Model", "Optimizer", "OptimizerConfig", "Task", "TaskConfig"];

/// The Never rules whose right-hand side is not a list of layers, and how
/// each is checked. Each must be in the doc: a rule dropped there must be
/// dropped here too, or the test would keep a check the doc no longer asks
/// for (and the other way round, an unknown rule there fails the parse).
const PHRASES: &[(&str, Phrase)] = &[
    ("a match or comparison on a device kind", Phrase::DeviceKind),
    ("a named op", Phrase::NamedOp),
    (
        "a concrete model, optimizer, task or data set by name",
        Phrase::Concrete,
    ),
    (
        "CLI flags in error text",
        Phrase::Elsewhere("tests/flag_free_library.rs"),
    ),
    (
        "a step buffer, branded or raw, reachable outside its step through the public API",
        Phrase::Elsewhere("tests/lifetimes.rs"),
    ),
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phrase {
    DeviceKind,
    NamedOp,
    Concrete,
    Elsewhere(&'static str),
}

const ORDER: &str = "a layer may use the layers below it and never the ones above";

/// A violation today's code still has: the file, the path (or name) it
/// uses, how many lines of the file use it, and who removes it.
struct Known {
    file: &'static str,
    what: &'static str,
    count: usize,
    removed_by: &'static str,
}

const fn known(file: &'static str, what: &'static str, count: usize) -> Known {
    Known {
        file,
        what,
        count,
        removed_by: ISSUE_30,
    }
}

const ISSUE_30: &str = "issue 30";

/// Today's violations, tolerated until issue 30 (the architecture step)
/// removes them; the test fails on one not listed here, on a count that
/// grows, and on an entry (or count) the code no longer has.
const KNOWN: &[Known] = &[
    // The crate's error wraps the errors of layers above base (issue 30: no
    // import runs up the layers).
    known("src/error.rs", "crate::backend::BackendError", 1),
    known("src/error.rs", "crate::checkpoint::CheckpointError", 1),
    known("src/error.rs", "crate::data::DataError", 1),
    known("src/error.rs", "crate::memory::ArenaError", 1),
];

/// One row of the doc's table.
#[derive(Debug)]
struct Layer {
    name: String,
    /// `src/…/` folders and `src/….rs` files.
    paths: Vec<String>,
}

/// How one rule of the Never list is checked.
#[derive(Debug, Clone, PartialEq)]
enum Check {
    /// No file of a `from` layer uses a `to` layer.
    Arrows { from: Vec<usize>, to: Vec<usize> },
    /// No file of `from` matches or compares a device kind.
    DeviceKind { from: usize },
    /// No file of `from` uses an op's own module.
    NamedOp { from: usize },
    /// No code of `from` (its tests may, as the CLI does) names a concrete
    /// model, optimizer, task or data set.
    Concrete { from: usize },
    /// Another test checks it; the file must exist.
    Elsewhere { test: &'static str },
}

#[derive(Debug)]
struct Rule {
    /// The rule's bold sentence in the doc.
    text: String,
    phrase: Option<&'static str>,
    check: Check,
}

/// What the doc says: the layers from the top down, and the Never rules.
#[derive(Debug)]
struct Architecture {
    layers: Vec<Layer>,
    rules: Vec<Rule>,
}

/// The cells of a Markdown table row, or `None` if `line` is not one.
fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split('|').map(str::trim).collect())
}

impl Architecture {
    /// The doc's table and Never list; an error says what could not be read
    /// and where.
    fn parse(doc: &str) -> Result<Self, String> {
        let lines: Vec<&str> = doc.lines().collect();
        let head = lines
            .iter()
            .position(|l| cells(l).is_some_and(|c| c.len() >= 2 && c[0] == "Layer" && c[1] == "Folders"))
            .ok_or("no layer table: a Markdown table whose header row is `| Layer | Folders | … |`")?;
        let width = cells(lines[head]).map_or(0, |c| c.len());
        let rule_row = lines.get(head + 1).and_then(|l| cells(l));
        if !rule_row.is_some_and(|c| {
            c.len() == width
                && c.iter()
                    .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')))
        }) {
            return Err(format!(
                "line {}: the layer table's header is not followed by its `|---|` row",
                head + 2
            ));
        }
        let mut layers: Vec<Layer> = Vec::new();
        for (i, line) in lines.iter().enumerate().skip(head + 2) {
            if !line.trim_start().starts_with('|') {
                break;
            }
            let at = format!("line {}", i + 1);
            let c = cells(line).ok_or_else(|| format!("{at}: a table row must end with `|`: {line}"))?;
            if c.len() != width {
                return Err(format!("{at}: {} cells where the header has {width}: {line}", c.len()));
            }
            let name = c[0];
            if name.is_empty() || !name.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_') {
                return Err(format!("{at}: the layer `{name}` is not one word (one layer a row)"));
            }
            if layers.iter().any(|l| l.name == name) {
                return Err(format!("{at}: the layer `{name}` has two rows"));
            }
            let paths = folders(c[1]).map_err(|e| format!("{at}, layer {name}: {e}"))?;
            for p in &paths {
                if let Some(other) = layers.iter().find(|l| l.paths.contains(p)) {
                    return Err(format!("{at}: `{p}` is in the layers {} and {name}", other.name));
                }
            }
            layers.push(Layer {
                name: name.to_string(),
                paths,
            });
        }
        if layers.len() < 2 {
            return Err("the layer table has fewer than two rows".into());
        }
        let rules = never(&lines, &layers)?;
        Ok(Self { layers, rules })
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.layers.iter().position(|l| l.name == name)
    }

    /// The layer whose longest path holds `file`.
    fn layer_of_file(&self, file: &str) -> Option<usize> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.paths.iter().map(move |p| (i, p)))
            .filter(|(_, p)| {
                if p.ends_with('/') {
                    file.starts_with(p.as_str())
                } else {
                    file == p.as_str()
                }
            })
            .max_by_key(|(_, p)| p.len())
            .map(|(i, _)| i)
    }

    /// The layer a crate path leads into: `crate::ops::relu` → ops (its
    /// module's file or folder, the longest the table names);
    /// `crate::Step` → the layer the root re-exports it from.
    fn layer_of_path(&self, path: &str, roots: &BTreeMap<String, usize>) -> Option<usize> {
        let segments: Vec<&str> = path.strip_prefix("crate::")?.split("::").collect();
        let mut found = None;
        let mut folder = String::from("src/");
        for s in &segments {
            for candidate in [format!("{folder}{s}.rs"), format!("{folder}{s}/")] {
                if let Some(i) = self.layers.iter().position(|l| l.paths.contains(&candidate)) {
                    found = Some(i);
                }
            }
            folder = format!("{folder}{s}/");
        }
        found.or_else(|| roots.get(segments[0]).copied())
    }

    /// The folders of the layer `name`.
    fn folders_of(&self, name: &str) -> Vec<&str> {
        self.index(name).map_or(Vec::new(), |i| {
            self.layers[i]
                .paths
                .iter()
                .filter(|p| p.ends_with('/'))
                .map(String::as_str)
                .collect()
        })
    }
}

/// The paths of a Folders cell: backticked `src/…/` folders and `src/….rs`
/// files, commas between, or `—` for none.
fn folders(cell: &str) -> Result<Vec<String>, String> {
    if cell == "—" {
        return Ok(Vec::new());
    }
    cell.split(',')
        .map(|p| {
            let p = p.trim();
            let path = p.strip_prefix('`').and_then(|p| p.strip_suffix('`')).ok_or_else(|| {
                format!("`{p}` is not a backticked path (the Folders column holds `src/` paths, commas between, or — for none)")
            })?;
            let plain = path.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '/' | '.'));
            if !path.starts_with("src/") || !(path.ends_with('/') || path.ends_with(".rs")) || !plain || path.contains("..") {
                return Err(format!("`{path}` is not a folder `src/…/` or a file `src/….rs`"));
            }
            Ok(path.to_string())
        })
        .collect()
}

/// The rules of the doc's `## Never` section: one bullet each, opening with
/// its bold sentence.
fn never(lines: &[&str], layers: &[Layer]) -> Result<Vec<Rule>, String> {
    let start = lines
        .iter()
        .position(|l| l.trim() == "## Never")
        .ok_or("no `## Never` section")?;
    let mut rules = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(start + 1) {
        if line.starts_with('#') {
            break;
        }
        let at = format!("line {}", i + 1);
        let Some(item) = line.strip_prefix("- ") else {
            if line.starts_with("* ") || line.starts_with("+ ") {
                return Err(format!("{at}: write the Never list's bullets with `- `"));
            }
            continue;
        };
        let head = item
            .strip_prefix("**")
            .and_then(|r| r.split_once("**"))
            .map(|(h, _)| h)
            .ok_or_else(|| format!("{at}: a Never rule opens with its bold sentence (`- **a → b.** why`): {line}"))?;
        let text = head.trim().trim_end_matches('.');
        rules.extend(rule(text, layers).map_err(|e| format!("{at}: `{text}`: {e}"))?);
    }
    if rules.is_empty() {
        return Err("the Never list is empty".into());
    }
    for (phrase, _) in PHRASES {
        if !rules.iter().any(|r| r.phrase == Some(*phrase)) {
            return Err(format!(
                "the Never list no longer says `{phrase}`, which tests/layering.rs checks: restore the rule, or drop its check from PHRASES"
            ));
        }
    }
    Ok(rules)
}

/// The checks of one Never sentence: `a, b → c, d; or <phrase>`, or a
/// phrase alone.
fn rule(text: &str, layers: &[Layer]) -> Result<Vec<Rule>, String> {
    let index = |name: &str| layers.iter().position(|l| l.name == name);
    let phrase = |p: &str| PHRASES.iter().find(|(known, _)| *known == p).copied();
    let make = |phrase: Option<&'static str>, check| Rule {
        text: text.to_string(),
        phrase,
        check,
    };
    let Some((lhs, rhs)) = text.split_once(" → ") else {
        return match phrase(text) {
            Some((p, Phrase::Elsewhere(test))) => Ok(vec![make(Some(p), Check::Elsewhere { test })]),
            _ => Err("neither an arrow (`a → b`) nor a rule tests/layering.rs knows how to check".into()),
        };
    };
    let from = || -> Result<Vec<usize>, String> {
        lhs.split(", ")
            .map(|n| index(n).ok_or_else(|| format!("`{n}` is not a layer of the table")))
            .collect()
    };
    let needs = |name: &str| -> Result<(), String> {
        index(name)
            .map(|_| ())
            .ok_or_else(|| format!("checking it needs the layer `{name}`, which the table does not have"))
    };
    let mut out = Vec::new();
    for part in rhs.split("; ") {
        let part = part.strip_prefix("or ").unwrap_or(part);
        let Some((p, kind)) = phrase(part) else {
            let to = part
                .split(", ")
                .flat_map(|p| p.split(" or "))
                .map(|n| {
                    index(n).ok_or_else(|| {
                        format!("`{n}` is neither a layer of the table nor a rule tests/layering.rs knows how to check")
                    })
                })
                .collect::<Result<_, _>>()?;
            out.push(make(None, Check::Arrows { from: from()?, to }));
            continue;
        };
        let one = || match from()?[..] {
            [from] => Ok(from),
            _ => Err(format!("`{p}` is checked for one layer at a time")),
        };
        let check = match kind {
            Phrase::Elsewhere(test) => Check::Elsewhere { test },
            Phrase::DeviceKind => {
                needs(RUNTIME)?;
                Check::DeviceKind { from: one()? }
            }
            Phrase::NamedOp => {
                needs(OPS)?;
                Check::NamedOp { from: one()? }
            }
            Phrase::Concrete => {
                CONCRETE_LAYERS.iter().try_for_each(|l| needs(l))?;
                Check::Concrete { from: one()? }
            }
        };
        out.push(make(Some(p), check));
    }
    Ok(out)
}

/// What the name rules look for, generated from the source.
#[derive(Debug, Default)]
struct Names {
    /// `crate::ops::<op>` for each folder of the ops layer.
    ops: BTreeSet<String>,
    /// The runtime's enums with a variant per device folder of it, and
    /// their variants.
    device_kinds: BTreeMap<String, BTreeSet<String>>,
    /// The modules of the concrete models, optimizers and data sets.
    concrete_modules: BTreeSet<String>,
    /// Their public types and re-exported names, and the seams' implementors.
    concrete_names: BTreeSet<String>,
    /// Their files' names, as spelled in a word (`mnist_cnn` → `mnistcnn`).
    concrete_stems: BTreeSet<String>,
}

/// `src/ops/` → `crate::ops`.
fn module_of_folder(folder: &str) -> String {
    let inner = folder.trim_start_matches("src/").trim_end_matches('/');
    format!("crate::{}", inner.replace('/', "::"))
}

/// The first path component of `file` below `folder`, if `file` is in a
/// subfolder of it (`src/ops/relu/mod.rs` → `relu`).
fn subfolder<'f>(folder: &str, file: &'f str) -> Option<&'f str> {
    let (dir, _) = file.strip_prefix(folder)?.split_once('/')?;
    Some(dir)
}

impl Names {
    fn of(arch: &Architecture, files: &[(&str, String)], shared: &[&str]) -> Self {
        let mut names = Names::default();
        // The spans of a file that are its tests.
        let tests_of = |file: &str, code: &str| -> Vec<Range<usize>> {
            if is_test_file(file) {
                std::iter::once(0..code.len()).collect()
            } else {
                test_spans(code)
            }
        };
        for folder in arch.folders_of(OPS) {
            for (file, _) in files {
                if let Some(op) = subfolder(folder, file) {
                    names.ops.insert(format!("{}::{op}", module_of_folder(folder)));
                }
            }
        }
        let runtime = arch.folders_of(RUNTIME);
        let devices: BTreeSet<String> = runtime
            .iter()
            .flat_map(|folder| files.iter().filter_map(|(f, _)| subfolder(folder, f)))
            .map(capitalized)
            .collect();
        for (file, code) in files {
            if runtime.iter().any(|f| file.starts_with(f)) {
                for (name, variants) in enums(code, &tests_of(file, code)) {
                    if !devices.is_empty() && devices.iter().all(|d| variants.contains(d)) {
                        names.device_kinds.entry(name).or_default().extend(variants);
                    }
                }
            }
        }
        let declared: BTreeSet<String> = files
            .iter()
            .flat_map(|(f, code)| pub_types(code, &tests_of(f, code)))
            .collect();
        for (file, code) in files {
            for (seam, ty) in impls(code, &tests_of(file, code)) {
                if SEAMS.contains(&seam.as_str()) && declared.contains(&ty) {
                    names.concrete_names.insert(ty);
                }
            }
        }
        for layer in CONCRETE_LAYERS {
            for folder in arch.folders_of(layer) {
                let root = format!("{folder}mod.rs");
                let reexports: Vec<(String, Option<String>)> = files
                    .iter()
                    .filter(|(f, _)| *f == root)
                    .flat_map(|(f, code)| {
                        let tests = tests_of(f, code);
                        use_declarations(code)
                            .into_iter()
                            .filter(move |(at, _, _)| !tests.iter().any(|t| t.contains(at)))
                            .flat_map(|(_, tree, _)| expand(&tree))
                    })
                    .collect();
                for (file, code) in files {
                    let Some(rest) = file.strip_prefix(folder) else {
                        continue;
                    };
                    if *file == root || is_test_file(file) || shared.contains(file) {
                        continue;
                    }
                    let stem = rest.split('/').next().unwrap_or(rest).trim_end_matches(".rs");
                    names
                        .concrete_modules
                        .insert(format!("{}::{stem}", module_of_folder(folder)));
                    names.concrete_stems.insert(stem.replace('_', "").to_lowercase());
                    names.concrete_names.extend(pub_types(code, &tests_of(file, code)));
                    for (path, alias) in &reexports {
                        let path = path.strip_prefix("self::").unwrap_or(path);
                        if path.split("::").next() == Some(stem) {
                            let name = alias
                                .clone()
                                .unwrap_or_else(|| path.rsplit("::").next().unwrap_or_default().to_string());
                            if name != "*" && name != stem {
                                names.concrete_names.insert(name);
                            }
                        }
                    }
                }
            }
        }
        names
    }

    /// `Some(op module)` if `path` is in one of the ops' own modules.
    fn op_of(&self, path: &str) -> Option<&String> {
        self.ops.iter().find(|op| is_under(path, op))
    }

    /// Whether the identifier `word` names a concrete model, optimizer,
    /// task or data set: one of their names, or a type-like word (upper
    /// case first) spelling one of their files' names. Lower-case words are
    /// locals, functions and modules; their modules are caught as paths.
    fn is_concrete(&self, word: &str) -> bool {
        if self.concrete_names.contains(word) {
            return true;
        }
        if !word.starts_with(|c: char| c.is_uppercase()) {
            return false;
        }
        let parts = name_words(word);
        self.concrete_stems.iter().any(|stem| {
            (0..parts.len()).any(|i| {
                let mut joined = String::new();
                parts[i..].iter().any(|p| {
                    joined.push_str(p);
                    joined == *stem
                })
            })
        })
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next().map_or(String::new(), |f| f.to_uppercase().chain(c).collect())
}

/// The words of an identifier, lower-cased: `MnistCnn` → mnist, cnn;
/// `MNIST_MEAN` → mnist, mean; `Cifar10` → cifar, 10; `SGDConfig` → sgd,
/// config.
fn name_words(ident: &str) -> Vec<String> {
    let chars: Vec<char> = ident.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            continue;
        }
        if let Some(&p) = i.checked_sub(1).and_then(|j| chars.get(j)) {
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let boundary = (c.is_uppercase() && (p.is_lowercase() || p.is_ascii_digit()))
                || (c.is_uppercase() && p.is_uppercase() && next_lower)
                || (p != '_' && c.is_ascii_digit() != p.is_ascii_digit());
            if boundary && !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
        }
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The public types (`struct`, `enum`, `trait`, `type`, `union`) declared in
/// `code`, outside `skip`.
fn pub_types(code: &str, skip: &[Range<usize>]) -> Vec<String> {
    let mut out = Vec::new();
    for (_, word) in words(code) {
        let keyword = &code[word.clone()];
        if !matches!(keyword, "struct" | "enum" | "trait" | "type" | "union")
            || skip.iter().any(|s| s.contains(&word.start))
        {
            continue;
        }
        let name = ident_at(code[word.end..].trim_start());
        // The item's visibility: what it says since the item before ended.
        let before = &code[..word.start];
        let item = before.rfind([';', '{', '}', ']']).map_or(0, |i| i + 1);
        if !name.is_empty() && before[item..].trim_start().starts_with("pub") {
            out.push(name.to_string());
        }
    }
    out
}

/// `(enum, its variants)` of each enum declared in `code` outside `skip`.
fn enums(code: &str, skip: &[Range<usize>]) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (_, word) in words(code) {
        if &code[word.clone()] != "enum" || skip.iter().any(|s| s.contains(&word.start)) {
            continue;
        }
        let rest = code[word.end..].trim_start();
        let name = ident_at(rest);
        let Some(open) = code[word.end..].find('{').map(|o| word.end + o) else {
            continue;
        };
        let close = matching(code, open).unwrap_or(code.len());
        let variants = split_depth(&code[open + 1..close])
            .into_iter()
            .map(|v| ident_at(skip_attributes(v)).to_string())
            .filter(|v| !v.is_empty())
            .collect();
        if !name.is_empty() {
            out.push((name.to_string(), variants));
        }
    }
    out
}

/// `s` past its leading `#[…]` attributes.
fn skip_attributes(mut s: &str) -> &str {
    loop {
        s = s.trim_start();
        if !s.starts_with("#[") {
            return s;
        }
        let mut depth = 0;
        let end = s.char_indices().find(|&(_, c)| {
            depth += match c {
                '[' => 1,
                ']' => -1,
                _ => 0,
            };
            c == ']' && depth == 0
        });
        match end {
            Some((i, _)) => s = &s[i + 1..],
            None => return "",
        }
    }
}

/// Splits at the commas outside every bracket.
fn split_depth(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// `(trait, type)` of each `impl Trait for Type` in `code` outside `skip`,
/// each by its last path segment; an impl for a generic parameter is left
/// out.
fn impls(code: &str, skip: &[Range<usize>]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (_, word) in words(code) {
        if &code[word.clone()] != "impl" || skip.iter().any(|s| s.contains(&word.start)) {
            continue;
        }
        let rest = &code[word.end..];
        let Some(header) = rest.find(['{', ';']).map(|end| &rest[..end]) else {
            continue;
        };
        let mut header = header.trim_start();
        let mut generics = "";
        if header.starts_with('<') {
            let mut depth = 0;
            let end = header.char_indices().find(|&(_, c)| {
                depth += match c {
                    '<' => 1,
                    '>' => -1,
                    _ => 0,
                };
                c == '>' && depth == 0
            });
            let Some((end, _)) = end else { continue };
            generics = &header[1..end];
            header = &header[end + 1..];
        }
        let Some((tr, ty)) = header.split_once(" for ") else {
            continue;
        };
        let last = |path: &str| -> String {
            let path = path.trim().trim_start_matches(['&', '\'']).trim_start();
            let path = path.split('<').next().unwrap_or(path);
            path.rsplit("::").next().unwrap_or(path).trim().to_string()
        };
        let ty = ty.trim_start();
        let ty_path = &ty[..ty.find(|c: char| !(is_ident(c) || c == ':')).unwrap_or(ty.len())];
        let ty_name = last(ty_path);
        if generics.split(|c: char| !is_ident(c)).any(|g| g == ty_name) {
            continue;
        }
        out.push((last(tr), ty_name));
    }
    out
}

/// One arrow or name that must not be there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Violation {
    file: String,
    line: usize,
    /// The crate path used, or the name written.
    what: String,
    rule: String,
}

/// The violations of one `(file, what)` beyond what [`KNOWN`] tolerates.
struct Over {
    found: Vec<Violation>,
    tolerated: usize,
}

/// What the check found.
struct Report<'k> {
    /// Files in no layer of the table.
    unassigned: Vec<String>,
    /// Problems with the test's own lists ([`SHARED`]).
    lists: Vec<String>,
    /// Violations not known, or more of them than known.
    over: Vec<Over>,
    /// Known entries that match fewer lines than listed, with how many.
    stale: Vec<(&'k Known, usize)>,
    /// Occurrences tolerated as known.
    tolerated: usize,
}

impl Report<'_> {
    fn is_clean(&self) -> bool {
        self.unassigned.is_empty() && self.lists.is_empty() && self.over.is_empty() && self.stale.is_empty()
    }

    /// Every violation reported, known or not, as `(file, line, what)`.
    fn reported(&self) -> BTreeSet<(&str, usize, &str)> {
        self.over
            .iter()
            .flat_map(|o| &o.found)
            .map(|v| (v.file.as_str(), v.line, v.what.as_str()))
            .collect()
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.unassigned.is_empty() {
            writeln!(
                f,
                "files in no layer of {DOC}'s table (add their folder or file to a row):"
            )?;
            for file in &self.unassigned {
                writeln!(f, "  {file}")?;
            }
        }
        for problem in &self.lists {
            writeln!(f, "{problem}")?;
        }
        if !self.over.is_empty() {
            let n: usize = self.over.iter().map(|o| o.found.len() - o.tolerated).sum();
            writeln!(f, "{n} layering violation(s) ({DOC}):")?;
            for o in &self.over {
                let v = &o.found[0];
                let lines: Vec<String> = o.found.iter().map(|v| v.line.to_string()).collect();
                write!(f, "  {}:{}: `{}`: {}", v.file, lines.join(","), v.what, v.rule)?;
                if o.tolerated > 0 {
                    write!(f, " ({} found, KNOWN tolerates {})", o.found.len(), o.tolerated)?;
                }
                writeln!(f)?;
            }
        }
        if !self.stale.is_empty() {
            writeln!(
                f,
                "KNOWN entries the code no longer has as often; lower the count or delete the entry in tests/layering.rs:"
            )?;
            for (k, found) in &self.stale {
                writeln!(
                    f,
                    "  {}: `{}`: KNOWN says {}, found {found} (removed by {})",
                    k.file, k.what, k.count, k.removed_by
                )?;
            }
        }
        Ok(())
    }
}

/// Checks `(file, source)` pairs (files as `src/...` paths) against the
/// doc's layers and rules; `known` violations are tolerated as often as
/// listed.
fn check<'k>(arch: &Architecture, files: &[(String, String)], known: &'k [Known], shared: &[&str]) -> Report<'k> {
    let stripped: Vec<(&str, String)> = files.iter().map(|(f, s)| (f.as_str(), strip(s))).collect();
    let names = Names::of(arch, &stripped, shared);
    let roots = stripped
        .iter()
        .find(|(f, _)| *f == "src/lib.rs")
        .map(|(_, code)| root_reexports(arch, code))
        .unwrap_or_default();
    let runtime = arch.index(RUNTIME);
    let ops = arch.index(OPS);
    let mut found = BTreeSet::new();
    let mut unassigned = Vec::new();
    let mut add = |file: &str, line: usize, what: &str, rule: &str| {
        found.insert(Violation {
            file: file.to_string(),
            line,
            what: what.to_string(),
            rule: rule.to_string(),
        });
    };
    for (file, code) in &stripped {
        let Some(layer) = arch.layer_of_file(file) else {
            unassigned.push(file.to_string());
            continue;
        };
        let tests = test_spans(code);
        let in_test = |offset: usize| is_test_file(file) || tests.iter().any(|t| t.contains(&offset));
        let rules_of =
            |pick: fn(&Check) -> Option<usize>| arch.rules.iter().filter(move |r| pick(&r.check) == Some(layer));
        let paths = crate_paths(file, code);
        for (offset, line, path) in &paths {
            let Some(target) = arch.layer_of_path(path, &roots) else {
                continue;
            };
            if target == layer || (in_test(*offset) && Some(target) == runtime) {
                // A test may make the device its arena lives on.
                continue;
            }
            if Some(target) == ops {
                if let Some(rule) = rules_of(|c| {
                    if let Check::NamedOp { from } = c {
                        Some(*from)
                    } else {
                        None
                    }
                })
                .next()
                {
                    // An op's own module breaks this rule; anything else of
                    // ops (its registry, its step) is a layer like any other,
                    // checked by the order below: autograd is handed its node
                    // set, it imports none.
                    if names.op_of(path).is_some() {
                        add(file, *line, path, &rule.text);
                        continue;
                    }
                }
            }
            let arrow = arch.rules.iter().find(
                |r| matches!(&r.check, Check::Arrows { from, to } if from.contains(&layer) && to.contains(&target)),
            );
            if let Some(rule) = arrow {
                add(file, *line, path, &rule.text);
            } else if target < layer {
                let (own, above) = (&arch.layers[layer].name, &arch.layers[target].name);
                add(
                    file,
                    *line,
                    path,
                    &format!("{own} uses {above}, a layer above it: {ORDER}"),
                );
            }
        }
        for rule in rules_of(|c| {
            if let Check::DeviceKind { from } = c {
                Some(*from)
            } else {
                None
            }
        }) {
            let is_kind = |e: &str, v: &str| names.device_kinds.get(e).is_some_and(|vs| v == "*" || vs.contains(v));
            for (line, word) in words(code) {
                let after = &code[word.end..];
                if let Some(rest) = after.strip_prefix("::") {
                    let (e, v) = (&code[word.clone()], ident_at(rest));
                    if is_kind(e, v) {
                        add(file, line, &format!("{e}::{v}"), &rule.text);
                    }
                }
            }
            for (_, line, path) in &paths {
                let mut segments = path.rsplit("::");
                if let (Some(v), Some(e)) = (segments.next(), segments.next()) {
                    if is_kind(e, v) {
                        add(file, *line, &format!("{e}::{v}"), &rule.text);
                    }
                }
            }
        }
        for rule in rules_of(|c| {
            if let Check::Concrete { from } = c {
                Some(*from)
            } else {
                None
            }
        }) {
            for (offset, line, path) in &paths {
                if !in_test(*offset) && names.concrete_modules.iter().any(|m| is_under(path, m)) {
                    add(file, *line, path, &rule.text);
                }
            }
            for (line, word) in words(code) {
                if !in_test(word.start) && names.is_concrete(&code[word.clone()]) {
                    add(file, line, &code[word], &rule.text);
                }
            }
        }
    }
    let mut lists = Vec::new();
    let concrete_folders: Vec<&str> = CONCRETE_LAYERS.iter().flat_map(|l| arch.folders_of(l)).collect();
    for file in shared {
        if !stripped.iter().any(|(f, _)| f == file) || !concrete_folders.iter().any(|d| file.starts_with(d)) {
            lists.push(format!(
                "SHARED lists {file}, which is no file of the layers {CONCRETE_LAYERS:?}: drop it from tests/layering.rs"
            ));
        }
    }
    for layer in &arch.layers {
        for p in &layer.paths {
            let held = |f: &&str| {
                if p.ends_with('/') {
                    f.starts_with(p.as_str())
                } else {
                    f == p
                }
            };
            if !stripped.iter().map(|(f, _)| f).any(held) {
                lists.push(format!(
                    "{DOC}'s table puts `{p}` in {}, but src/ has no such file or folder",
                    layer.name
                ));
            }
        }
    }
    // Group by (file, what): a known entry tolerates up to its count of lines.
    let mut groups: BTreeMap<(String, String), Vec<Violation>> = BTreeMap::new();
    for v in found {
        groups.entry((v.file.clone(), v.what.clone())).or_default().push(v);
    }
    let count_of = |file: &str, what: &str| {
        known
            .iter()
            .find(|k| k.file == file && k.what == what)
            .map_or(0, |k| k.count)
    };
    let mut over = Vec::new();
    let mut tolerated = 0;
    for ((file, what), found) in &groups {
        let allowed = count_of(file, what);
        // Lines, not occurrences: one line using a path twice counts once.
        let lines: BTreeSet<usize> = found.iter().map(|v| v.line).collect();
        if lines.len() > allowed {
            over.push(Over {
                found: found.clone(),
                tolerated: allowed,
            });
        } else {
            tolerated += lines.len();
        }
    }
    let stale = known
        .iter()
        .filter_map(|k| {
            let lines: BTreeSet<usize> = groups
                .get(&(k.file.to_string(), k.what.to_string()))
                .map_or(BTreeSet::new(), |vs| vs.iter().map(|v| v.line).collect());
            (lines.len() < k.count).then_some((k, lines.len()))
        })
        .collect();
    unassigned.sort();
    Report {
        unassigned,
        lists,
        over,
        stale,
        tolerated,
    }
}

fn is_under(path: &str, prefix: &str) -> bool {
    path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with("::"))
}

/// The names the crate root re-exports, by the layer they come from
/// (`pub use autograd::{Grads, Step};` → Grads, Step → autograd).
fn root_reexports(arch: &Architecture, lib: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (_, tree, _) in use_declarations(lib) {
        for (path, alias) in expand(&tree) {
            let path = path.strip_prefix("crate::").unwrap_or(&path).to_string();
            let Some(layer) = arch.layer_of_path(&format!("crate::{path}"), &BTreeMap::new()) else {
                continue;
            };
            let name = alias.unwrap_or_else(|| path.rsplit("::").next().unwrap_or_default().to_string());
            if name != "*" {
                out.insert(name, layer);
            }
        }
    }
    out
}

/// The module path of the crate root `file` belongs to: the library's
/// (empty), or a binary's (`src/bin/bumpgrad/…` → `bin::bumpgrad`), whose
/// `crate::` is its own and which reaches the library as `bumpgrad::`.
fn crate_root(file: &str) -> Vec<String> {
    match file.strip_prefix("src/bin/") {
        Some(rest) => {
            let name = rest.split('/').next().unwrap_or(rest).trim_end_matches(".rs");
            vec!["bin".to_string(), name.to_string()]
        }
        None => Vec::new(),
    }
}

/// Every crate path `code` (stripped) uses, with its offset and line: the
/// leaves of its `use` declarations, its inline `crate::`, `super::` and
/// `self::` paths, and inline paths through a module it imported (`use
/// crate::ops;` then `ops::relu::Saved`), resolved to `crate::...`.
fn crate_paths(file: &str, code: &str) -> Vec<(usize, usize, String)> {
    let root = crate_root(file);
    let modules = inline_modules(code);
    let module_at = |offset: usize| -> Vec<String> {
        let mut path = file_module(file);
        path.extend(
            modules
                .iter()
                .filter(|(span, _)| span.contains(&offset))
                .map(|(_, name)| name.clone()),
        );
        path
    };
    let mut out = Vec::new();
    // Modules imported by name: lower-case, as Rust names modules.
    let mut imported: BTreeMap<String, String> = BTreeMap::new();
    let declarations = use_declarations(code);
    for (start, tree, _) in &declarations {
        let line = line_at(code, *start);
        for (path, alias) in expand(tree) {
            if let Some(resolved) = resolve(&path, &module_at(*start), &root) {
                let name = alias.unwrap_or_else(|| path.rsplit("::").next().unwrap_or_default().to_string());
                if name.starts_with(|c: char| c.is_ascii_lowercase())
                    && !matches!(name.as_str(), "self" | "super" | "crate")
                {
                    imported.insert(name, resolved.clone());
                }
                out.push((*start, line, resolved));
            }
        }
    }
    let in_use = |offset: usize| {
        declarations
            .iter()
            .any(|(start, _, end)| (*start..*end).contains(&offset))
    };
    for (line, word) in words(code) {
        let head = &code[word.clone()];
        let named = matches!(head, "crate" | "super" | "self") || (head == LIB && !root.is_empty());
        if !(named || imported.contains_key(head)) || in_use(word.start) {
            continue;
        }
        // Only a path's first segment starts one: `super` in `super::super`
        // is inside the path its first `super` began.
        let before = code[..word.start].trim_end();
        if before.ends_with("::") {
            continue;
        }
        let mut end = word.end;
        let mut path = head.to_string();
        while code[end..].starts_with("::") {
            let next = ident_at(&code[end + 2..]);
            if next.is_empty() {
                break;
            }
            path.push_str("::");
            path.push_str(next);
            end += 2 + next.len();
        }
        if !path.contains("::") {
            continue;
        }
        let resolved = match imported.get(head) {
            Some(module) if !named => Some(format!("{module}{}", &path[head.len()..])),
            _ => resolve(&path, &module_at(word.start), &root),
        };
        if let Some(resolved) = resolved {
            out.push((word.start, line, resolved));
        }
    }
    out
}

/// `src/memory/arena.rs` → `[memory, arena]`; `src/memory/mod.rs` → `[memory]`.
fn file_module(file: &str) -> Vec<String> {
    let rest = file.strip_prefix("src/").unwrap_or(file);
    let rest = rest.strip_suffix(".rs").unwrap_or(rest);
    let mut parts: Vec<String> = rest.split('/').map(String::from).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// A path as seen from `module` of the crate rooted at `root`, as a
/// `crate::` path; `None` for one that leaves the crate (`std::…`, a
/// dependency, a local name).
fn resolve(path: &str, module: &[String], root: &[String]) -> Option<String> {
    let mut segments = path.split("::");
    let mut base: Vec<String> = match segments.next()? {
        "crate" | "$crate" => root.to_vec(),
        lib if lib == LIB && !root.is_empty() => Vec::new(),
        "self" => module.to_vec(),
        "super" => {
            let mut up = module.to_vec();
            up.pop()?;
            up
        }
        _ => return None,
    };
    for s in segments {
        match s {
            "super" => {
                base.pop()?;
            }
            "self" => {}
            s => base.push(s.to_string()),
        }
    }
    Some(
        std::iter::once("crate".to_string())
            .chain(base)
            .collect::<Vec<_>>()
            .join("::"),
    )
}

/// `(span, name)` of each `mod name { ... }` written inline in `code`.
fn inline_modules(code: &str) -> Vec<(std::ops::Range<usize>, String)> {
    let mut out = Vec::new();
    for (_, word) in words(code) {
        if &code[word.clone()] != "mod" {
            continue;
        }
        let rest = &code[word.end..];
        let name_at = rest.len() - rest.trim_start().len();
        let name = ident_at(&rest[name_at..]);
        let after = rest[name_at + name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        let close = matching(code, open).unwrap_or(code.len());
        out.push((open..close, name.to_string()));
    }
    out
}

/// The spans of the `#[cfg(test)] mod … { }` blocks of `code`.
fn test_spans(code: &str) -> Vec<std::ops::Range<usize>> {
    let modules = inline_modules(code);
    code.match_indices("#[cfg(test)]")
        .filter_map(|(at, attr)| {
            // The next `mod … {` opened after the attribute, if it is the
            // item the attribute is on (only attributes and `pub` between).
            let (span, _) = modules.iter().find(|(span, _)| span.start > at)?;
            let mut item = code[at + attr.len()..span.start].trim_start();
            while item.starts_with("#[") {
                item = item[item.find(']')? + 1..].trim_start();
            }
            // `pub`, `pub(crate)`, `pub(super)`, `pub(in path)`.
            let item = match item.strip_prefix("pub") {
                Some(rest) if rest.trim_start().starts_with('(') => &rest[rest.find(')')? + 1..],
                Some(rest) => rest,
                None => item,
            };
            let name = item.trim_start().strip_prefix("mod ")?;
            (ident_at(name.trim_start()).len() == name.trim().len()).then(|| span.clone())
        })
        .collect()
}

fn is_test_file(file: &str) -> bool {
    let stem = file.rsplit('/').next().unwrap_or(file).trim_end_matches(".rs");
    stem == "tests" || stem.starts_with("tests_")
}

/// The offset of the bracket closing the one at `open`.
fn matching(code: &str, open: usize) -> Option<usize> {
    let (o, c) = match code.as_bytes()[open] {
        b'{' => (b'{', b'}'),
        b'(' => (b'(', b')'),
        _ => return None,
    };
    let mut depth = 0usize;
    for (i, &b) in code.as_bytes()[open..].iter().enumerate() {
        if b == o {
            depth += 1;
        } else if b == c {
            depth -= 1;
            if depth == 0 {
                return Some(open + i);
            }
        }
    }
    None
}

/// `(start, tree, end)` of each `use` declaration: `tree` is the text
/// between `use` and its `;`.
fn use_declarations(code: &str) -> Vec<(usize, String, usize)> {
    let mut out = Vec::new();
    for (_, word) in words(code) {
        // `use` is a keyword: in code without comments and literals it only
        // begins a declaration (or, followed by `<`, a precise capture).
        if &code[word.clone()] != "use" || !code[word.end..].starts_with(char::is_whitespace) {
            continue;
        }
        if let Some(semi) = code[word.end..].find(';') {
            let end = word.end + semi;
            out.push((word.start, code[word.end..end].to_string(), end));
        }
    }
    out
}

/// The leaf paths of a use tree, with their aliases:
/// `crate::{a::B, c::{self, D as E}}` → `crate::a::B`, `crate::c`, `crate::c::D` (as `E`).
fn expand(tree: &str) -> Vec<(String, Option<String>)> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let prefix = tree[..open].trim().trim_end_matches("::");
        let close = matching(tree, open).unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let mut out = Vec::new();
        for part in split_top_level(inner) {
            for (leaf, alias) in expand(part) {
                let joined = match (prefix.is_empty(), leaf.as_str()) {
                    (true, _) => leaf,
                    (false, "self") => prefix.to_string(),
                    (false, _) => format!("{prefix}::{leaf}"),
                };
                out.push((joined, alias));
            }
        }
        return out;
    }
    if tree.is_empty() {
        return Vec::new();
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
        None => (tree, None),
    };
    let path = path.replace(' ', "");
    let path = path.strip_suffix("::self").map(String::from).unwrap_or(path);
    vec![(path, alias)]
}

/// Splits at the commas not inside braces.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'{' => depth += 1,
            b'}' => depth -= 1,
            b',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The identifier at the start of `s` (empty if none).
fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// Every identifier or keyword of `code`, with its line and byte range.
fn words(code: &str) -> Vec<(usize, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut start = None;
    for (i, c) in code.char_indices().chain(std::iter::once((code.len(), ' '))) {
        if is_ident(c) {
            start.get_or_insert(i);
            continue;
        }
        if let Some(s) = start.take() {
            if !code[s..].starts_with(|c: char| c.is_ascii_digit()) {
                out.push((line, s..i));
            }
        }
        if c == '\n' {
            line += 1;
        }
    }
    out
}

fn line_at(code: &str, offset: usize) -> usize {
    code[..offset].matches('\n').count() + 1
}

/// `src` with its comments (line, block, doc) removed and the contents of
/// its string and char literals blanked: every removed character becomes a
/// space and every newline stays, so offsets and lines are the source's.
fn strip(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(chars.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    // `br".."`: the `b` before the `r` is a prefix, not an identifier's end.
    let byte_prefix = |i: usize| i >= 1 && chars[i - 1] == 'b' && (i < 2 || !is_ident(chars[i - 2]));
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev_ident = i > 0 && is_ident(chars[i - 1]);
        if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    out.extend([' ', ' ']);
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    out.extend([' ', ' ']);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (at(i + 1) == '"' || at(i + 1) == '#') && (!prev_ident || byte_prefix(i)) {
            // A raw string: r"..", r#".."#, br"..".
            let mut j = i + 1;
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            if at(j) != '"' {
                // `r#ident`, a raw identifier: code.
                out.push(c);
                i += 1;
                continue;
            }
            out.extend(std::iter::repeat_n(' ', j - i + 1));
            i = j + 1;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                    out.extend(std::iter::repeat_n(' ', hashes + 1));
                    i += hashes + 1;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let skip = if chars[i] == '\\' { 2 } else { 1 };
                for k in 0..skip {
                    if i + k < chars.len() {
                        out.push(blank(chars[i + k]));
                    }
                }
                i += skip;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A char literal ('x', '\n', '\u{..}', '"'); `'a` alone is a
            // lifetime or a label and stays code.
            out.push(' ');
            i += 1;
            if at(i) == '\\' {
                out.extend([' ', ' ']);
                i += 2;
            }
            while i < chars.len() && chars[i] != '\'' {
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out.truncate(chars.len());
    out.into_iter().collect()
}

/// Every `.rs` file under `src/`, as `src/...` paths with their sources.
fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let name = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
                let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
                files.push((name, source));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn the_layers_of_the_architecture_doc_hold() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join(DOC)).unwrap_or_else(|e| panic!("{DOC}: {e}"));
    let arch = Architecture::parse(&doc).unwrap_or_else(|e| panic!("{DOC} cannot be read as the layers: {e}"));
    let files = sources();
    assert!(
        files.iter().any(|(f, _)| f == "src/memory/arena.rs") && files.len() > 50,
        "the sources were not found: {} files",
        files.len()
    );
    for rule in &arch.rules {
        if let Check::Elsewhere { test } = rule.check {
            assert!(
                root.join(test).is_file(),
                "{DOC} leaves `{}` to {test}, which does not exist",
                rule.text
            );
        }
    }
    let report = check(&arch, &files, KNOWN, SHARED);
    // Written to the process's stderr, past the harness's capture, so the
    // debt stays in sight on every run.
    let _ = writeln!(
        std::io::stderr(),
        "layering: {} files in {} layers, {} rules; {} known violation(s) tolerated ({} KNOWN entries, {ISSUE_30})",
        files.len(),
        arch.layers.len(),
        arch.rules.len(),
        report.tolerated,
        KNOWN.len()
    );
    assert!(report.is_clean(), "{report}");
}

/// A doc of the same form as `docs/ARCHITECTURE.md`, for the self-tests.
const PLANTED_DOC: &str = "\
# Layers

Prose first.

| Layer | Folders | Owns |
|---|---|---|
| CLI | `src/bin/` | flags |
| root | `src/lib.rs` | the map |
| train | `src/train/` | the loop |
| models | `src/models/` | networks |
| optim | `src/optim/` | optimizers |
| tasks | — | what a batch means |
| data | `src/data/` | files |
| ops | `src/ops/` | ops, `src/ops/<op>/` each |
| autograd | `src/autograd/` | the tape |
| tensor | `src/tensor/` | handles |
| runtime | `src/backend/` | devices |
| memory | `src/memory/` | the arena |
| base | `src/rng.rs` | numbers |

## Never

- **runtime → ops, optim, autograd, train.** Why.
- **memory → runtime, autograd, ops, data; or a match or comparison on a device kind.** The arena
  hands out bytes.
- **autograd → a named op.** Why.
- **data → ops, autograd.** Why.
- **models, optim → runtime.** Why.
- **train → a concrete model, optimizer, task or data set by name.** Why.
- **library → CLI flags in error text.** Why.
- **a step buffer, branded or raw, reachable outside its step through the public API.**

Prose after.

## Shapes

- **not a rule.**
";

fn planted_files() -> Vec<(String, String)> {
    let file = |name: &str, source: &str| (name.to_string(), source.to_string());
    vec![
        file(
            "src/lib.rs",
            "pub mod memory;\npub use autograd::{Grads, Step};\npub use backend::Device;\npub use tensor::{Param as P};\n",
        ),
        file("src/rng.rs", ""),
        file(
            "src/backend/mod.rs",
            concat!(
                "pub enum Backend { Cpu(cpu::X), Cuda(cuda::Y), #[doc = \"a, b\"] Dry(Sizing) }\n",
                "pub enum BackendError { Internal(String), Cuda(String) }\n",
                "#[derive(Clone)]\npub enum DeviceKind { Cpu, Cuda, Dry }\n",
            ),
        ),
        file("src/backend/cpu/mod.rs", ""),
        file("src/backend/cuda/mod.rs", ""),
        file(
            "src/backend/x.rs",
            "use crate::ops::relu;\nuse crate::memory::Buf; // use crate::optim::Sgd;\n",
        ),
        file(
            "src/memory/x.rs",
            concat!(
                "use crate::{autograd::Step, backend::BackendError};\n",
                "/// crate::ops::relu in a doc comment\n",
                "fn f<'s>(s: &'s str) -> char {\n",
                "    let quote = '\"'; let text = \"crate::data::idx // not a comment\";\n",
                "    let t = crate::ops::relu::forward(s);\n",
                "    match b { Backend::Cuda(g) => g, _ => 'x' }\n",
                "}\n",
                "/* crate::ops::relu in /* a nested */ block comment */\n",
                "use crate::Step as S; use crate::P;\n",
                "use crate::{\n    tensor::{Shape,\n        Tensor},\n};\n",
                "use crate::backend::Backend::{Cpu, Dry};\n",
                "fn g() { let r = r#\"a\"crate::ops::relu\"#; let b = br\"\\\"; }\n",
                "fn h(k: DeviceKind) -> bool { k == DeviceKind::Dry || k != crate::backend::DeviceKind::Cpu }\n",
                "fn e() -> BackendError { BackendError::Internal(\"no\"); BackendError::Cuda(\"an error, not a device kind\") }\n",
            ),
        ),
        file(
            "src/memory/y.rs",
            concat!(
                "#[cfg(test)]\nmod tests {\n    use crate::backend::Device;\n    use crate::ops::relu;\n",
                "    fn t() -> bool { Device::cpu(1).kind() == DeviceKind::Dry }\n}\n",
            ),
        ),
        file("src/memory/mod.rs", "mod x;\nuse super::data::Images;\nuse self::x::Y;\n"),
        file(
            "src/memory/deep.rs",
            "#[cfg(test)]\nmod tests {\n    use super::super::super::ops::relu;\n    use super::Local;\n}\n",
        ),
        file(
            "src/data/idx.rs",
            "use crate::ops::gather::ByteImages;\nuse crate::tensor::Shape;\nuse crate::memory::Buf;\n",
        ),
        file("src/data/cifar.rs", "pub fn load() {}\n"),
        file("src/data/mnist.rs", "pub const CLASSES: usize = 10;\n"),
        file("src/data/order.rs", "pub fn shuffle_into() {}\n"),
        file("src/data/mod.rs", "pub mod cifar;\npub mod order;\npub use order::shuffle_into;\n"),
        file(
            "src/models/lenet.rs",
            "use crate::backend::cuda::Kernel;\nuse crate::ops::relu;\npub struct LeNet;\nstruct Private;\n",
        ),
        file("src/models/tests.rs", "use crate::backend::Device;\n"),
        file(
            "src/optim/rmsprop.rs",
            "use crate::{backend::{Backend, cuda::Grid}, ops::relu};\npub struct RmsProp;\npub fn rms_step() {}\n",
        ),
        file(
            "src/optim/mod.rs",
            concat!(
                "mod rmsprop;\npub use rmsprop::{RmsProp, rms_step};\n",
                "#[cfg(test)]\n#[allow(unused)]\nmod tests {\n    use crate::backend::Device;\n}\nuse crate::Device;\n",
            ),
        ),
        file(
            "src/train/x.rs",
            concat!(
                "use crate::models::lenet::{self, Config};\n",
                "let m = LeNet::new(); let p = Private; // Sgd\n",
                "let s = \"RmsProp\"; let n = RmsPropConfig; let c = Cifar10; let q = MNIST_MEAN;\n",
                "use crate::data::order::shuffle_into;\n",
                "fn f() { rms_step(); Classification::new(); crate::backend::Device::cpu(1); }\n",
                "#[cfg(test)]\npub(in crate::train) mod tests { use crate::models::LeNet; fn t() { LeNet::new(); } }\n",
            ),
        ),
        file(
            "src/train/task.rs",
            "pub trait Task {}\npub struct Classification;\nimpl Task for Classification {}\nimpl<T: Task> Task for Box<T> {}\n",
        ),
        file("src/bin/bumpgrad/main.rs", "use crate::ops::relu;\nuse bumpgrad::train::run;\nmod hints;\n"),
        file("src/ops/x.rs", "use crate::autograd::Step;\nuse crate::backend::Backend;\n"),
        file("src/ops/relu/mod.rs", "pub struct Saved;\n"),
        file("src/ops/conv2d/mod.rs", ""),
        file(
            "src/autograd/tape.rs",
            concat!(
                "use crate::ops;\nuse crate::ops::KERNELS;\n",
                "enum Node { Relu(ops::relu::Saved), Conv(ops::conv2d::Saved) }\n",
                "fn f() { crate::ops::conv2d::forward(); }\n",
            ),
        ),
        file("src/tensor/x.rs", "use crate::autograd::Step;\n"),
        file("src/foo.rs", "use crate::ops::relu;\n"),
    ]
}

const PLANTED_SHARED: &[&str] = &["src/data/order.rs"];

/// The check itself, on a planted doc and planted files: each violation is
/// reported where it is written, with the rule it breaks, and nothing else.
#[test]
fn planted_violations_are_reported() {
    let arch = Architecture::parse(PLANTED_DOC).unwrap();
    let files = planted_files();
    let report = check(&arch, &files, &[], PLANTED_SHARED);
    let want: BTreeSet<(&str, usize, &str)> = [
        ("src/backend/x.rs", 1, "crate::ops::relu"),
        ("src/memory/x.rs", 1, "crate::autograd::Step"),
        ("src/memory/x.rs", 1, "crate::backend::BackendError"),
        ("src/memory/x.rs", 5, "crate::ops::relu::forward"),
        ("src/memory/x.rs", 6, "Backend::Cuda"),
        ("src/memory/x.rs", 9, "crate::Step"),
        ("src/memory/x.rs", 9, "crate::P"),
        ("src/memory/x.rs", 10, "crate::tensor::Shape"),
        ("src/memory/x.rs", 10, "crate::tensor::Tensor"),
        ("src/memory/x.rs", 14, "crate::backend::Backend::Cpu"),
        ("src/memory/x.rs", 14, "crate::backend::Backend::Dry"),
        ("src/memory/x.rs", 14, "Backend::Cpu"),
        ("src/memory/x.rs", 14, "Backend::Dry"),
        ("src/memory/x.rs", 16, "DeviceKind::Dry"),
        ("src/memory/x.rs", 16, "DeviceKind::Cpu"),
        ("src/memory/x.rs", 16, "crate::backend::DeviceKind::Cpu"),
        ("src/memory/y.rs", 4, "crate::ops::relu"),
        ("src/memory/y.rs", 5, "DeviceKind::Dry"),
        ("src/memory/mod.rs", 2, "crate::data::Images"),
        ("src/memory/deep.rs", 3, "crate::ops::relu"),
        ("src/data/idx.rs", 1, "crate::ops::gather::ByteImages"),
        ("src/models/lenet.rs", 1, "crate::backend::cuda::Kernel"),
        ("src/optim/rmsprop.rs", 1, "crate::backend::Backend"),
        ("src/optim/rmsprop.rs", 1, "crate::backend::cuda::Grid"),
        ("src/optim/mod.rs", 8, "crate::Device"),
        ("src/train/x.rs", 1, "crate::models::lenet"),
        ("src/train/x.rs", 1, "crate::models::lenet::Config"),
        ("src/train/x.rs", 2, "LeNet"),
        ("src/train/x.rs", 3, "RmsPropConfig"),
        ("src/train/x.rs", 3, "Cifar10"),
        ("src/train/x.rs", 3, "MNIST_MEAN"),
        ("src/train/x.rs", 5, "rms_step"),
        ("src/train/x.rs", 5, "Classification"),
        ("src/train/task.rs", 2, "Classification"),
        ("src/train/task.rs", 3, "Classification"),
        ("src/autograd/tape.rs", 1, "crate::ops"),
        ("src/autograd/tape.rs", 2, "crate::ops::KERNELS"),
        ("src/autograd/tape.rs", 3, "crate::ops::relu::Saved"),
        ("src/autograd/tape.rs", 3, "crate::ops::conv2d::Saved"),
        ("src/autograd/tape.rs", 4, "crate::ops::conv2d::forward"),
        ("src/tensor/x.rs", 1, "crate::autograd::Step"),
    ]
    .into_iter()
    .collect();
    assert_eq!(report.reported(), want, "\n{report}");
    assert_eq!(report.unassigned, ["src/foo.rs"], "{report}");
    assert!(report.lists.is_empty(), "{report}");

    // Each is reported with the rule it breaks, as the doc words it.
    let rule_of = |file: &str, what: &str| {
        report
            .over
            .iter()
            .flat_map(|o| &o.found)
            .find(|v| v.file == file && v.what == what)
            .map(|v| v.rule.clone())
            .unwrap_or_default()
    };
    let memory = "memory → runtime, autograd, ops, data; or a match or comparison on a device kind";
    assert_eq!(
        rule_of("src/backend/x.rs", "crate::ops::relu"),
        "runtime → ops, optim, autograd, train"
    );
    assert_eq!(rule_of("src/memory/x.rs", "Backend::Cuda"), memory);
    assert_eq!(rule_of("src/memory/x.rs", "crate::backend::BackendError"), memory);
    assert_eq!(
        rule_of("src/data/idx.rs", "crate::ops::gather::ByteImages"),
        "data → ops, autograd"
    );
    assert_eq!(
        rule_of("src/optim/rmsprop.rs", "crate::backend::Backend"),
        "models, optim → runtime"
    );
    assert_eq!(
        rule_of("src/autograd/tape.rs", "crate::ops::relu::Saved"),
        "autograd → a named op"
    );
    assert_eq!(
        rule_of("src/autograd/tape.rs", "crate::ops::KERNELS"),
        format!("autograd uses ops, a layer above it: {ORDER}")
    );
    assert_eq!(
        rule_of("src/train/x.rs", "Cifar10"),
        "train → a concrete model, optimizer, task or data set by name"
    );
    assert_eq!(
        rule_of("src/memory/x.rs", "crate::P"),
        format!("memory uses tensor, a layer above it: {ORDER}")
    );
    assert_eq!(
        rule_of("src/tensor/x.rs", "crate::autograd::Step"),
        format!("tensor uses autograd, a layer above it: {ORDER}")
    );
    let printed = report.to_string();
    assert!(
        printed.contains(&format!("src/memory/x.rs:5: `crate::ops::relu::forward`: {memory}")),
        "{printed}"
    );
    assert!(
        printed.contains("files in no layer") && printed.contains("  src/foo.rs"),
        "{printed}"
    );

    // What the name rules look for was generated from the planted source.
    let names = {
        let stripped: Vec<(&str, String)> = files.iter().map(|(f, s)| (f.as_str(), strip(s))).collect();
        Names::of(&arch, &stripped, PLANTED_SHARED)
    };
    assert_eq!(
        names.ops,
        ["crate::ops::conv2d", "crate::ops::relu"].map(String::from).into()
    );
    assert_eq!(
        names.device_kinds.keys().collect::<Vec<_>>(),
        ["Backend", "DeviceKind"],
        "BackendError has a variant for one device folder, not for each"
    );
    assert_eq!(
        names.concrete_modules,
        [
            "crate::data::cifar",
            "crate::data::idx",
            "crate::data::mnist",
            "crate::models::lenet",
            "crate::optim::rmsprop"
        ]
        .map(String::from)
        .into()
    );
    assert_eq!(
        names.concrete_names,
        ["Classification", "LeNet", "RmsProp", "rms_step"]
            .map(String::from)
            .into()
    );
}

/// Known violations are tolerated as often as listed, no more; an entry
/// listing more than the code has, or what it no longer has, fails.
#[test]
fn known_violations_only_shrink() {
    let arch = Architecture::parse(PLANTED_DOC).unwrap();
    let files = planted_files();
    let report = check(&arch, &files, &[], PLANTED_SHARED);
    // Every violation listed as often as it occurs: nothing is reported.
    let exact: Vec<Known> = report
        .over
        .iter()
        .map(|o| {
            let lines = o.found.iter().map(|v| v.line).collect::<BTreeSet<_>>().len();
            known(o.found[0].file.clone().leak(), o.found[0].what.clone().leak(), lines)
        })
        .collect();
    let clean = check(&arch, &files, &exact, PLANTED_SHARED);
    assert!(clean.over.is_empty() && clean.stale.is_empty(), "{clean}");
    assert_eq!(clean.tolerated, exact.iter().map(|k| k.count).sum::<usize>());

    // One more line with a tolerated violation is over the count.
    let mut more = files.clone();
    let tape = more.iter_mut().find(|(f, _)| f == "src/autograd/tape.rs").unwrap();
    tape.1.push_str("fn g() { crate::ops::conv2d::forward(); }\n");
    let report = check(&arch, &more, &exact, PLANTED_SHARED);
    assert_eq!(
        report.reported(),
        [
            ("src/autograd/tape.rs", 4, "crate::ops::conv2d::forward"),
            ("src/autograd/tape.rs", 5, "crate::ops::conv2d::forward")
        ]
        .into(),
        "{report}"
    );
    assert!(
        report.to_string().contains(
            "src/autograd/tape.rs:4,5: `crate::ops::conv2d::forward`: autograd → a named op (2 found, KNOWN tolerates 1)"
        ),
        "{report}"
    );

    // An entry counting more than the code has, or one it no longer has.
    let mut stale = exact;
    let forward = stale
        .iter()
        .position(|k| k.what == "crate::ops::conv2d::forward")
        .unwrap();
    stale[forward].count = 2;
    stale.push(known("src/backend/x.rs", "crate::ops::conv2d", 1));
    let report = check(&arch, &files, &stale, PLANTED_SHARED);
    assert!(report.over.is_empty(), "{report}");
    let found: Vec<(&str, &str, usize)> = report.stale.iter().map(|(k, n)| (k.file, k.what, *n)).collect();
    assert_eq!(
        found,
        [
            ("src/autograd/tape.rs", "crate::ops::conv2d::forward", 1),
            ("src/backend/x.rs", "crate::ops::conv2d", 0)
        ]
    );
    assert!(report.to_string().contains("KNOWN says 2, found 1"), "{report}");
}

/// The doc is read strictly: what the test cannot read, it says, and where.
#[test]
fn a_doc_that_cannot_be_read_fails_with_why() {
    let arch = Architecture::parse(PLANTED_DOC).unwrap();
    assert_eq!(arch.layers.len(), 13);
    assert_eq!(arch.layers[0].paths, ["src/bin/"]);
    assert!(arch.layers[5].paths.is_empty(), "tasks: —");
    assert_eq!(arch.rules.len(), 9, "{:#?}", arch.rules);

    let broken = |from: &str, to: &str| {
        assert!(PLANTED_DOC.contains(from), "{from}");
        Architecture::parse(&PLANTED_DOC.replacen(from, to, 1)).unwrap_err()
    };
    let cases = [
        ("| Layer | Folders |", "| Layers | Folders |", "no layer table"),
        ("|---|---|---|", "", "is not followed by its `|---|` row"),
        ("`src/data/` |", "src/data |", "`src/data` is not a backticked path"),
        (
            "`src/data/` |",
            "`data/` |",
            "`data/` is not a folder `src/…/` or a file `src/….rs`",
        ),
        ("`src/data/` |", "`src/data/` (and more) |", "is not a backticked path"),
        (
            "| data | `src/data/` | files |\n",
            "| data | `src/data/` | files | extra |\n",
            "4 cells where the header has 3",
        ),
        ("| tensor |", "| memory |", "the layer `memory` has two rows"),
        (
            "| tensor | `src/tensor/`",
            "| tensor | `src/memory/`",
            "`src/memory/` is in the layers tensor and memory",
        ),
        (
            "| optim | `src/optim/` | optimizers |\n",
            "",
            "`optim` is neither a layer of the table",
        ),
        (
            "- **models, optim",
            "- **models, tensors",
            "`tensors` is not a layer of the table",
        ),
        (
            "runtime → ops, optim",
            "runtime → ops, optimizers",
            "`optimizers` is neither a layer of the table nor a rule",
        ),
        (
            "- **autograd → a named op.** Why.",
            "- autograd → a named op. Why.",
            "opens with its bold sentence",
        ),
        ("- **autograd → a named op.** Why.\n", "", "no longer says `a named op`"),
        ("a named op", "an op by name", "`an op by name` is neither a layer"),
        ("## Never", "## Nope", "no `## Never` section"),
    ];
    for (from, to, why) in cases {
        let err = broken(from, to);
        assert!(err.contains(why), "{from:?} → {to:?}: {err}");
    }
    // A rule by name needs the layers its names come from.
    let without_models = PLANTED_DOC
        .replacen("| models | `src/models/` | networks |\n", "", 1)
        .replacen("- **models, optim → runtime.**", "- **optim → runtime.**", 1);
    let err = Architecture::parse(&without_models).unwrap_err();
    assert!(err.contains("checking it needs the layer `models`"), "{err}");
    // A line number where there is one.
    assert!(broken("`src/data/` |", "src/data |").starts_with("line 13, layer data:"));
}

/// A row taken out of the table leaves its files in no layer.
#[test]
fn a_layer_missing_from_the_table_leaves_its_files_unchecked_and_fails() {
    let doc = PLANTED_DOC.replacen("| tensor | `src/tensor/` | handles |\n", "", 1);
    let arch = Architecture::parse(&doc).unwrap();
    let report = check(&arch, &planted_files(), &[], PLANTED_SHARED);
    assert_eq!(report.unassigned, ["src/foo.rs", "src/tensor/x.rs"], "{report}");
}

#[test]
fn identifiers_split_into_words() {
    let cases: [(&str, &[&str]); 6] = [
        ("MnistCnn", &["mnist", "cnn"]),
        ("MNIST_MEAN", &["mnist", "mean"]),
        ("Cifar10", &["cifar", "10"]),
        ("SGDConfig", &["sgd", "config"]),
        ("AdamW", &["adam", "w"]),
        ("ResNet18", &["res", "net", "18"]),
    ];
    for (ident, words) in cases {
        assert_eq!(name_words(ident), words, "{ident}");
    }
}
