//! The borrow checker enforces the arena's promise: a step tensor cannot be
//! kept past its reset, and the persistent region cannot be touched while a
//! step runs. Each file under `compile_fail/` must be refused by rustc, and
//! for the reason it was written to show; each under `compile_pass/` must
//! build and run.
//!
//! A `compile_fail` file marks the line rustc must reject with
//! `//~ ERROR <what>`, where `<what>` is the error code (`E0521`) or, for an
//! error that has none, its message (`lifetime may not live long enough`).
//! The test fails when a file compiles, when a marked error is missing, and
//! when any error is not one of the marked ones (a typo's E0425, a moved
//! line): the reason a file fails is checked, not just that it fails.
//!
//! Codes and lines, not rustc's whole wording: the wording changes between
//! releases, and the toolchain is not pinned (a pin would make every machine
//! without that exact release download it, or fail where none can be
//! downloaded).

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One test file, as a binary of the scratch crate.
struct Case {
    bin: String,
    path: PathBuf,
    /// The errors the file marks: (line, code or message).
    marked: Vec<(u64, String)>,
    must_fail: bool,
}

fn cases(dir: &str, must_fail: bool) -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(dir);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let source = std::fs::read_to_string(&path).unwrap();
            let marked = source
                .lines()
                .zip(1..)
                .filter_map(|(text, line)| {
                    text.split_once("//~ ERROR ")
                        .map(|(_, what)| (line, what.trim().to_string()))
                })
                .collect();
            let stem = path.file_stem().unwrap().to_str().unwrap();
            let bin = format!("{}_{stem}", if must_fail { "fail" } else { "pass" });
            Case {
                bin,
                path,
                marked,
                must_fail,
            }
        })
        .collect()
}

/// An error rustc reported, where it points.
#[derive(Debug)]
struct Reported {
    line: u64,
    code: Option<String>,
    message: String,
    rendered: String,
}

impl Reported {
    fn is(&self, what: &str) -> bool {
        self.code.as_deref() == Some(what) || self.message.contains(what)
    }
}

#[test]
fn step_tensors_cannot_outlive_their_step() {
    let mut all = cases("compile_fail", true);
    all.extend(cases("compile_pass", false));
    for case in all.iter().filter(|c| c.must_fail) {
        assert!(!case.marked.is_empty(), "{} marks no `//~ ERROR`", case.path.display());
    }

    // A scratch crate with one binary per file, depending on this one, built
    // once with cargo (offline, with this crate's lock file, as trybuild does).
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lifetimes");
    std::fs::create_dir_all(&root).unwrap();
    // The library with the features these tests were built with (the
    // program's are not needed).
    let features = if cfg!(feature = "cuda") { "\"cuda\"" } else { "" };
    let mut manifest = format!(
        "[package]\nname = \"bumpgrad-lifetimes\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nbumpgrad = {{ path = {:?}, default-features = false, features = [{features}] }}\n\n\
         [workspace]\n\n[profile.dev]\ndebug = false\n",
        env!("CARGO_MANIFEST_DIR")
    );
    for case in &all {
        manifest += &format!("\n[[bin]]\nname = {:?}\npath = {:?}\n", case.bin, case.path);
    }
    std::fs::write(root.join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"),
        root.join("Cargo.lock"),
    )
    .unwrap();
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(&root)
        .env("CARGO_TARGET_DIR", root.join("target"))
        .args([
            "build",
            "--bins",
            "--keep-going",
            "--offline",
            "--message-format=json",
            "--color=never",
        ])
        .output()
        .expect("run cargo");

    let mut errors: BTreeMap<String, Vec<Reported>> = BTreeMap::new();
    let mut executables: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut library_built = false;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let target = msg["target"]["name"].as_str().unwrap_or_default().to_string();
        match msg["reason"].as_str() {
            Some("compiler-artifact") => {
                library_built |= target == "bumpgrad";
                if let Some(exe) = msg["executable"].as_str() {
                    executables.insert(target, exe.into());
                }
            }
            Some("compiler-message") if msg["message"]["level"] == "error" => {
                let m = &msg["message"];
                let spans = m["spans"].as_array().cloned().unwrap_or_default();
                // "aborting due to N previous errors" points nowhere.
                let Some(primary) = spans.iter().find(|s| s["is_primary"] == true) else {
                    continue;
                };
                errors.entry(target).or_default().push(Reported {
                    line: primary["line_start"].as_u64().unwrap_or(0),
                    code: m["code"]["code"].as_str().map(String::from),
                    message: m["message"].as_str().unwrap_or_default().to_string(),
                    rendered: m["rendered"].as_str().unwrap_or_default().to_string(),
                });
            }
            _ => {}
        }
    }
    let cargo_said = String::from_utf8_lossy(&out.stderr);
    // Without the library no file was judged (offline and a crate missing,
    // say): say so rather than blame the files.
    assert!(
        library_built,
        "bumpgrad was not built for the test files:\n{cargo_said}"
    );

    let mut wrong = Vec::new();
    for case in &all {
        let name = case
            .path
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(&case.path)
            .display();
        let reported = errors.get(&case.bin).map(Vec::as_slice).unwrap_or_default();
        if !case.must_fail {
            match (reported, executables.get(&case.bin)) {
                ([], Some(exe)) => {
                    let run = Command::new(exe).output().expect("run a compile_pass binary");
                    if !run.status.success() {
                        wrong.push(format!(
                            "{name} built but failed: {}",
                            String::from_utf8_lossy(&run.stderr)
                        ));
                    }
                }
                ([], None) => wrong.push(format!("{name} was not built:\n{cargo_said}")),
                (errors, _) => wrong.extend(errors.iter().map(|e| format!("{name} must compile:\n{}", e.rendered))),
            }
            continue;
        }
        if reported.is_empty() {
            wrong.push(match executables.get(&case.bin) {
                Some(_) => format!("{name} compiled, but must be refused: {:?}", case.marked),
                None => format!("{name} was neither built nor refused:\n{cargo_said}"),
            });
            continue;
        }
        for (line, what) in &case.marked {
            if !reported.iter().any(|e| e.line == *line && e.is(what)) {
                wrong.push(format!(
                    "{name}:{line}: expected error {what:?}, which rustc did not report"
                ));
            }
        }
        for e in reported {
            if !case.marked.iter().any(|(line, what)| e.line == *line && e.is(what)) {
                wrong.push(format!(
                    "{name}:{}: an error the file does not mark:\n{}",
                    e.line, e.rendered
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
