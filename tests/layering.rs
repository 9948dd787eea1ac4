//! The arrows of ARCHITECTURE.md that must never exist, checked on the
//! source: every `.rs` file under `src/` is read, its comments dropped and
//! its string and char literals blanked, and the crate paths it uses are
//! collected — `use` declarations (grouped ones expanded, `super::` and
//! `self::` resolved, the root's re-exports such as `crate::Step` mapped to
//! their layer) and inline paths (`crate::ops::relu::forward(..)`). Each
//! file's layer is its folder under `src/`; a path into a layer its layer
//! must never use is a violation, and so is a textual one: a backend variant
//! matched in `memory`, a concrete model, optimizer or data set named in
//! `train`.
//!
//! Violations that other work is removing are listed in [`KNOWN`], each with
//! who removes it; an entry that no longer matches anything fails the test
//! too, so the list only shrinks. The binary (`src/bin/`) is its own crate
//! (its `crate::` is not the library's) and is not checked here.
//!
//! The check is a function over `(file, source)` pairs, so the self-test at
//! the bottom feeds it planted violations and holds it to reporting them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

/// The layers, by their folder (or file) under `src/`.
const LAYERS: &[&str] = &[
    "backend",
    "memory",
    "tensor",
    "autograd",
    "ops",
    "nn",
    "models",
    "optim",
    "distributed",
    "train",
    "data",
    "checkpoint",
];

/// A layer, the layers it must never use, why (ARCHITECTURE.md, "Never"),
/// and whether the rule holds in its tests too.
///
/// Models' and optimizers' own tests may use the backend: a test makes the
/// device its arena lives on (`Device::cpu(1)`), as the training loop does
/// for real; what the rule keeps out is the model or optimizer itself
/// reaching past ops and nn. Tests are `#[cfg(test)] mod … { }` blocks and
/// files named `tests.rs` or `tests_*.rs`.
const NEVER: &[(&str, &[&str], &str, Tests)] = &[
    (
        "backend",
        &["ops", "optim", "autograd", "distributed", "train", "models", "nn"],
        "the backend must never use ops, optim, autograd, distributed, train, models or nn: a device compiles the kernel sources it is handed",
        Tests::Checked,
    ),
    (
        "memory",
        &[
            "tensor",
            "autograd",
            "ops",
            "nn",
            "models",
            "optim",
            "distributed",
            "train",
            "data",
            "checkpoint",
        ],
        "memory must never use autograd, ops, data or any layer above it: the arena hands out bytes, through the backend alone",
        Tests::Checked,
    ),
    (
        "data",
        &["autograd", "ops", "nn", "models", "optim", "distributed", "train"],
        "data must never use ops or anything above memory and tensor: files are read before anything runs",
        Tests::Checked,
    ),
    (
        "models",
        &["backend"],
        "models must never use the backend: they use ops and nn",
        Tests::Exempt,
    ),
    (
        "optim",
        &["backend"],
        "optimizers must never use the backend: they use ops and nn",
        Tests::Exempt,
    ),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tests {
    Checked,
    Exempt,
}

/// What `memory` must never match on: the backend's variants.
const BACKEND_VARIANTS: &[&str] = &["Cpu", "Cuda", "Dry", "*"];
const VARIANT_RULE: &str =
    "memory must never match on a backend variant: device capabilities are reached through methods of Backend";

/// Concrete models, optimizers and data sets `train` must never name: the
/// CLI chooses them and the training loop takes them through traits.
const CONCRETE_NAMES: &[&str] = &[
    "MnistCnn",
    "Sgd",
    "AdamW",
    "ResidentMnist",
    "ResidentSplit",
    "MnistHost",
    "MNIST_NORMALIZE",
];
/// Their modules, as path prefixes.
const CONCRETE_MODULES: &[&str] = &[
    "crate::models::mnist_cnn",
    "crate::optim::sgd",
    "crate::optim::adamw",
    "crate::data::mnist",
];
const CONCRETE_RULE: &str =
    "train must never name a concrete model, optimizer or data set: it takes them through traits, the CLI picks them";

/// A violation that other work removes: the file, the path (or name) it
/// uses, and who removes it. Delete an entry when its fix lands (the test
/// says which entries no longer match anything).
struct Known {
    file: &'static str,
    what: &'static str,
    removed_by: &'static str,
}

const fn known(file: &'static str, what: &'static str, removed_by: &'static str) -> Known {
    Known { file, what, removed_by }
}

/// Empty: every arrow ARCHITECTURE.md forbids is gone. An entry is for a
/// violation whose fix is under way, and names who removes it.
const KNOWN: &[Known] = &[];

/// One arrow or name that must not be there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Violation {
    file: String,
    line: usize,
    /// The crate path used, or the name written.
    what: String,
    rule: &'static str,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: `{}`: {}", self.file, self.line, self.what, self.rule)
    }
}

/// What the check found: violations not known, and known entries that no
/// longer match anything.
struct Report<'k> {
    violations: Vec<Violation>,
    stale: Vec<&'k Known>,
}

impl Report<'_> {
    fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.stale.is_empty()
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.violations.is_empty() {
            writeln!(
                f,
                "{} layering violation(s) (ARCHITECTURE.md, \"Never\"):",
                self.violations.len()
            )?;
            for v in &self.violations {
                writeln!(f, "  {v}")?;
            }
        }
        if !self.stale.is_empty() {
            writeln!(
                f,
                "KNOWN entries that no longer match anything; delete them from tests/layering.rs:"
            )?;
            for k in &self.stale {
                writeln!(f, "  {}: `{}` (was removed by {})", k.file, k.what, k.removed_by)?;
            }
        }
        Ok(())
    }
}

/// Checks `(file, source)` pairs (files as `src/...` paths) against the
/// rules; `known` violations are not reported, but known entries that match
/// nothing are.
fn check<'k>(files: &[(String, String)], known: &'k [Known]) -> Report<'k> {
    let stripped: Vec<(&str, String)> = files.iter().map(|(f, s)| (f.as_str(), strip(s))).collect();
    let roots = stripped
        .iter()
        .find(|(f, _)| *f == "src/lib.rs")
        .map(|(_, code)| root_reexports(code))
        .unwrap_or_default();
    let mut found = BTreeSet::new();
    for (file, code) in &stripped {
        if file.starts_with("src/bin/") {
            continue;
        }
        let Some(layer) = layer_of_file(file) else { continue };
        let tests = test_spans(code);
        let in_test = |offset: usize| is_test_file(file) || tests.iter().any(|t| t.contains(&offset));
        for (offset, line, path) in crate_paths(file, code) {
            let target = layer_of_path(&path, &roots);
            for &(from, never, rule, in_tests) in NEVER {
                let applies = in_tests == Tests::Checked || !in_test(offset);
                if from == layer && applies && target.is_some_and(|t| never.contains(&t)) {
                    found.insert(violation(file, line, &path, rule));
                }
            }
            if layer == "memory" {
                for v in BACKEND_VARIANTS {
                    if path.ends_with(&format!("backend::Backend::{v}")) {
                        found.insert(violation(file, line, &format!("Backend::{v}"), VARIANT_RULE));
                    }
                }
            }
            if layer == "train" && CONCRETE_MODULES.iter().any(|m| is_under(&path, m)) {
                found.insert(violation(file, line, &path, CONCRETE_RULE));
            }
        }
        if layer == "memory" {
            for (line, word) in words(code) {
                let after = &code[word.end..];
                if &code[word.clone()] == "Backend" && after.starts_with("::") {
                    let variant = ident_at(&after[2..]);
                    if BACKEND_VARIANTS.contains(&variant) {
                        found.insert(violation(file, line, &format!("Backend::{variant}"), VARIANT_RULE));
                    }
                }
            }
        }
        if layer == "train" {
            for (line, word) in words(code) {
                if CONCRETE_NAMES.contains(&&code[word.clone()]) {
                    found.insert(violation(file, line, &code[word], CONCRETE_RULE));
                }
            }
        }
    }
    let is_known = |v: &Violation| known.iter().any(|k| k.file == v.file && k.what == v.what);
    Report {
        stale: known
            .iter()
            .filter(|k| !found.iter().any(|v| k.file == v.file && k.what == v.what))
            .collect(),
        violations: found.into_iter().filter(|v| !is_known(v)).collect(),
    }
}

fn violation(file: &str, line: usize, what: &str, rule: &'static str) -> Violation {
    Violation {
        file: file.to_string(),
        line,
        what: what.to_string(),
        rule,
    }
}

fn is_under(path: &str, prefix: &str) -> bool {
    path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with("::"))
}

/// `src/memory/arena.rs` → `memory`; `src/rng.rs`, `src/lib.rs` → none.
fn layer_of_file(file: &str) -> Option<&'static str> {
    let rest = file.strip_prefix("src/")?;
    let first = rest.split('/').next()?;
    let first = first.strip_suffix(".rs").unwrap_or(first);
    LAYERS.iter().copied().find(|&l| l == first)
}

/// The layer a crate path leads into: `crate::ops::relu` → `ops`;
/// `crate::Step` → the layer the root re-exports it from.
fn layer_of_path(path: &str, roots: &BTreeMap<String, &'static str>) -> Option<&'static str> {
    let first = path.strip_prefix("crate::")?.split("::").next()?;
    LAYERS
        .iter()
        .copied()
        .find(|&l| l == first)
        .or_else(|| roots.get(first).copied())
}

/// The names the crate root re-exports, by the layer they come from
/// (`pub use autograd::{Grads, Step};` → Grads, Step → autograd).
fn root_reexports(lib: &str) -> BTreeMap<String, &'static str> {
    let mut out = BTreeMap::new();
    for (_, tree, _) in use_declarations(lib) {
        for (path, alias) in expand(&tree) {
            let path = path.strip_prefix("crate::").unwrap_or(&path).to_string();
            let Some(layer) = layer_of_path(&format!("crate::{path}"), &BTreeMap::new()) else {
                continue;
            };
            let name = alias.unwrap_or_else(|| path.rsplit("::").next().unwrap_or_default().to_string());
            if name != "*" && name != layer {
                out.insert(name, layer);
            }
        }
    }
    out
}

/// Every crate path `code` (stripped) uses, with its line: the leaves of
/// its `use` declarations and its inline `crate::`, `super::` and `self::`
/// paths, resolved to `crate::...`.
fn crate_paths(file: &str, code: &str) -> Vec<(usize, usize, String)> {
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
    let declarations = use_declarations(code);
    for (start, tree, _) in &declarations {
        let line = line_at(code, *start);
        for (path, _) in expand(tree) {
            if let Some(resolved) = resolve(&path, &module_at(*start)) {
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
        if !matches!(head, "crate" | "super" | "self") || in_use(word.start) {
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
        if path.contains("::") {
            if let Some(resolved) = resolve(&path, &module_at(word.start)) {
                out.push((word.start, line, resolved));
            }
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

/// A path as seen from `module`, as a `crate::` path; `None` for one that
/// leaves the crate (`std::…`, a dependency, a local name).
fn resolve(path: &str, module: &[String]) -> Option<String> {
    let mut segments = path.split("::");
    let mut base: Vec<String> = match segments.next()? {
        "crate" | "$crate" => Vec::new(),
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
            let item = item
                .strip_prefix("pub(crate)")
                .or_else(|| item.strip_prefix("pub"))
                .unwrap_or(item);
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
fn the_arrows_that_must_never_exist_do_not() {
    let files = sources();
    assert!(
        files.iter().any(|(f, _)| f == "src/memory/arena.rs") && files.len() > 50,
        "the sources were not found: {} files",
        files.len()
    );
    let report = check(&files, KNOWN);
    assert!(report.is_clean(), "{report}");
}

/// The check itself, on planted files: each violation is reported where it
/// is written, and nothing else is.
#[test]
fn planted_violations_are_reported() {
    let file = |name: &str, source: &str| (name.to_string(), source.to_string());
    let files = vec![
        file(
            "src/lib.rs",
            "pub mod memory;\npub use autograd::{Grads, Step};\npub use backend::Device;\npub use tensor::{Param as P};\n",
        ),
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
            ),
        ),
        file("src/memory/mod.rs", "mod x;\nuse super::data::Images;\nuse self::x::Y;\n"),
        file(
            "src/memory/deep.rs",
            "#[cfg(test)]\nmod tests {\n    use super::super::super::ops::relu;\n    use super::Local;\n}\n",
        ),
        file(
            "src/data/x.rs",
            "use crate::ops::gather::ByteImages;\nuse crate::tensor::Shape;\nuse crate::memory::Buf;\n",
        ),
        file("src/models/x.rs", "use crate::backend::cuda::Kernel;\nuse crate::ops::relu;\n"),
        file("src/optim/x.rs", "use crate::{backend::{Backend, cuda::Grid}, ops::relu};\n"),
        file(
            "src/optim/y.rs",
            "#[cfg(test)]\n#[allow(unused)]\nmod tests {\n    use crate::backend::Device;\n}\nuse crate::Device;\n",
        ),
        file("src/models/tests.rs", "use crate::backend::Device;\n"),
        file(
            "src/train/x.rs",
            "use crate::models::mnist_cnn::{self, Config};\nlet m = MnistCnn::new(); // Sgd\nlet s = \"AdamW\"; let n = SgdConfig;\n",
        ),
        file("src/bin/bumpgrad/main.rs", "use crate::ops::relu;\n"),
        file("src/ops/x.rs", "use crate::autograd::Step;\nuse crate::backend::Backend;\n"),
    ];
    let report = check(&files, &[]);
    let got: BTreeSet<(&str, usize, &str)> = report
        .violations
        .iter()
        .map(|v| (v.file.as_str(), v.line, v.what.as_str()))
        .collect();
    let want: BTreeSet<(&str, usize, &str)> = [
        ("src/backend/x.rs", 1, "crate::ops::relu"),
        ("src/memory/x.rs", 1, "crate::autograd::Step"),
        ("src/memory/x.rs", 5, "crate::ops::relu::forward"),
        ("src/memory/x.rs", 6, "Backend::Cuda"),
        ("src/memory/x.rs", 9, "crate::Step"),
        ("src/memory/x.rs", 9, "crate::P"),
        ("src/memory/x.rs", 10, "crate::tensor::Shape"),
        ("src/memory/x.rs", 10, "crate::tensor::Tensor"),
        ("src/memory/x.rs", 14, "Backend::Cpu"),
        ("src/memory/x.rs", 14, "Backend::Dry"),
        ("src/memory/mod.rs", 2, "crate::data::Images"),
        ("src/memory/deep.rs", 3, "crate::ops::relu"),
        ("src/data/x.rs", 1, "crate::ops::gather::ByteImages"),
        ("src/models/x.rs", 1, "crate::backend::cuda::Kernel"),
        ("src/optim/x.rs", 1, "crate::backend::Backend"),
        ("src/optim/x.rs", 1, "crate::backend::cuda::Grid"),
        ("src/optim/y.rs", 6, "crate::Device"),
        ("src/train/x.rs", 1, "crate::models::mnist_cnn"),
        ("src/train/x.rs", 1, "crate::models::mnist_cnn::Config"),
        ("src/train/x.rs", 2, "MnistCnn"),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want, "\n{report}");
    // Each is reported with the rule it breaks.
    let rule_of = |file: &str, what: &str| {
        report
            .violations
            .iter()
            .find(|v| v.file == file && v.what == what)
            .map(|v| v.rule)
    };
    assert_eq!(rule_of("src/backend/x.rs", "crate::ops::relu"), Some(NEVER[0].2));
    assert_eq!(rule_of("src/memory/x.rs", "Backend::Cuda"), Some(VARIANT_RULE));
    assert_eq!(
        rule_of("src/data/x.rs", "crate::ops::gather::ByteImages"),
        Some(NEVER[2].2)
    );
    assert_eq!(rule_of("src/optim/x.rs", "crate::backend::Backend"), Some(NEVER[4].2));
    assert_eq!(rule_of("src/train/x.rs", "MnistCnn"), Some(CONCRETE_RULE));
    let printed = report.to_string();
    assert!(
        printed.contains(&format!(
            "src/memory/x.rs:5: `crate::ops::relu::forward`: {}",
            NEVER[1].2
        )),
        "{printed}"
    );

    // A known violation is not reported; a known entry matching nothing is.
    let known = [
        known("src/backend/x.rs", "crate::ops::relu", "a planted fix"),
        known("src/backend/x.rs", "crate::ops::conv2d", "a fix that landed"),
    ];
    let report = check(&files[..2], &known);
    assert!(report.violations.is_empty(), "{report}");
    assert_eq!(report.stale.len(), 1, "{report}");
    assert_eq!(report.stale[0].what, "crate::ops::conv2d");
    assert!(report.to_string().contains("no longer match anything"), "{report}");
}
