//! Every relative link of README.md and docs/*.md resolves: the file (or
//! folder) exists, and a `#fragment` names a heading of the Markdown file it
//! points into, as GitHub makes its anchors.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The Markdown pages whose links are checked.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The text outside fenced code blocks: a link-like string in a code sample
/// (`x.linear(s, w)`, `[0, 1)`) is not a link.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            // Inline code spans hold flags like `--betas B1,B2`, never links.
            let mut in_code = false;
            for part in line.split('`') {
                if !in_code {
                    out.push_str(part);
                }
                in_code = !in_code;
            }
            out.push('\n');
        }
    }
    out
}

/// Targets of inline links `[text](target)` and `![alt](target)`, and of
/// reference definitions `[name]: target`.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(at) = text[i..].find("](") {
        let start = i + at + 2;
        let end = text[start..].find(')').map(|e| start + e).unwrap_or(text.len());
        let target = text[start..end].split_whitespace().next().unwrap_or("").to_string();
        found.push(target);
        i = start;
    }
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix('[') {
            if let Some((_, target)) = rest.split_once("]: ") {
                found.push(target.trim().to_string());
            }
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, punctuation dropped but for
/// `-` and `_`, spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut set = BTreeSet::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            set.insert(slug(line.trim_start_matches('#').replace('`', "").as_str()));
        }
    }
    set
}

/// What is wrong with `target` as a link from `page`, if anything.
fn broken(page: &Path, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link".into());
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, fragment) = match target.split_once('#') {
        Some((f, frag)) => (f, Some(frag)),
        None => (target, None),
    };
    let path = if file.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().expect("a page has a folder").join(file)
    };
    if !path.exists() {
        return Some(format!("{} does not exist", path.display()));
    }
    if let Some(fragment) = fragment {
        if path.extension().is_some_and(|e| e == "md") {
            let text = std::fs::read_to_string(&path).expect("a Markdown page reads");
            if !anchors(&text).contains(fragment) {
                return Some(format!("{} has no heading #{fragment}", path.display()));
            }
        }
    }
    None
}

#[test]
fn every_relative_link_of_the_readme_and_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages(root) {
        let text = std::fs::read_to_string(&page).expect("a page reads");
        for target in links(&prose(&text)) {
            checked += 1;
            if let Some(why) = broken(&page, &target) {
                problems.push(format!("{}: ({target}): {why}", page.display()));
            }
        }
    }
    assert!(checked > 20, "only {checked} links found: the reader is broken");
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(
        slug("Adding an op, a model, an optimizer"),
        "adding-an-op-a-model-an-optimizer"
    );
    assert_eq!(slug("Mixed precision (bf16)"), "mixed-precision-bf16");
    assert_eq!(
        slug("`bumpgrad train`: every flag".replace('`', "").as_str()),
        "bumpgrad-train-every-flag"
    );
}

#[test]
fn a_missing_file_or_heading_is_caught() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = root.join("README.md");
    assert!(broken(&readme, "docs/no-such-page.md").is_some());
    assert!(broken(&readme, "docs/models.md#no-such-heading").is_some());
    assert!(broken(&readme, "docs/models.md#adding-an-op-a-model-an-optimizer").is_none());
    assert_eq!(
        links("see [a](b.md) and ![c](d.svg)\n[e]: https://x"),
        ["b.md", "d.svg", "https://x"]
    );
}

/// The README tells a new user how to run the tests; CI must run that same
/// command, so what the README promises is what CI checks.
#[test]
fn ci_runs_the_readmes_test_command() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md reads");
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run reads");
    let after = readme
        .split("Run the tests")
        .nth(1)
        .expect("the README says how to run the tests");
    let command = after
        .lines()
        .skip_while(|l| !l.starts_with("```"))
        .nth(1)
        .expect("a command block follows")
        .trim();
    assert!(
        command.starts_with("cargo test"),
        "the README's test command: {command}"
    );
    assert!(
        ci.lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains(command)),
        ".ci/run does not run the README's test command `{command}`"
    );
}
