//! The house's rules, held by `cargo test` rather than by prose (as rust-analyzer's `tidy.rs`
//! holds that codebase's). Each rule reads the repository's files and fails naming the file and
//! line of every violation:
//!
//! 1. no `Result<_, String>` (nor `type Error = String`) in product code, but the allowlist's;
//! 2. no product file over [`MAX_LINES`] lines of product code, but the allowlist's;
//! 3. no import circle between the top-level modules of a crate;
//! 4. ARCHITECTURE.md's crate table is `cargo metadata`'s: one row per workspace crate, its
//!    workspace dependencies exactly, the rows in floor order;
//! 5. no relative link in README.md, ARCHITECTURE.md or docs/ that points nowhere;
//! 6. every test ARCHITECTURE.md's invariants name exists: each `` `path.rs` `` there is a file,
//!    and each `` `name` `` in the parentheses after it is a `fn name` in that file;
//! 7. each wire format has one home: the crate that speaks it (rmcp for MCP, …) is a dependency
//!    of that one crate's product code only ([`WIRE_HOMES`]; tests may use it, as peers);
//! 8. the lints rustc holds for the house are on: the workspace's `[workspace.lints.rust]` denies
//!    `unreachable_pub` (a `pub` item no other crate can reach is `pub(crate)`, so what a crate
//!    offers is what it exports), and every crate's `Cargo.toml` takes the workspace's lints.
//!
//! Product code is every `.rs` file under `src/` and `crates/*/src/`, less what is a test: a
//! file named `tests.rs` or `*_tests.rs`, a file in a folder named `tests`, and a
//! `#[cfg(test)] mod … { … }` block. Each checker has a self-check below that feeds it a
//! violation and asserts it is reported, so no checker can pass by seeing nothing.
//!
//! Fast by design: file reading and one `cargo metadata --no-deps`, no build.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// The most lines a product file may hold, test modules not counted.
const MAX_LINES: usize = 700;

/// Files allowed `Result<_, String>` (or `type Error = String`): the file, how many it holds
/// (a change either way fails, so the list stays true), and why.
const STRING_ERRORS_ALLOWED: &[(&str, usize, &str)] = &[(
    "crates/prompts/src/fence.rs",
    2,
    "`TryFrom<String> for Fence` (its `type Error` and `try_from`), serde's `try_from` for a stored fence \
         token: serde shows the text as is, and no caller decides on its kind",
)];

/// Product files allowed past [`MAX_LINES`], and why. An entry whose file is back under the limit
/// fails, so the list holds only what is still over.
const LONG_FILES_ALLOWED: &[(&str, &str)] = &[];

/// Each wire format's one home: the crate that speaks it, the only crate whose product code may
/// depend on it, and why. The binary's tests may (they are MCP clients and servers of their own).
const WIRE_HOMES: &[(&str, &str, &str)] = &[
    (
        "rmcp",
        "picogent-mcp",
        "MCP's messages: the tools, the loop and the model client speak picogent's own `ToolDefinition` and \
         `ToolResult`, which the MCP crate's `wire` translates",
    ),
    ("tokio-tungstenite", "picogent-tracker", "the tracker's event stream"),
    ("async-openai", "picogent-llm", "the OpenAI API's messages"),
];

// ---------------------------------------------------------------------------------------------
// The rules, on the repository.

#[test]
fn no_string_errors_in_product_code() {
    let violations = string_errors_past(&product_sources(&root()), STRING_ERRORS_ALLOWED);
    fail_on("`Result<_, String>` in product code (use a typed error)", violations);
}

#[test]
fn no_long_product_files() {
    let violations = long_files_past(&product_sources(&root()), LONG_FILES_ALLOWED);
    fail_on(&format!("product files over {MAX_LINES} lines (split them)"), violations);
}

#[test]
fn no_import_circle_between_modules() {
    let mut violations = Vec::new();
    for src in crate_sources(&root()) {
        let sources = rust_sources(&root(), &src);
        violations.extend(module_knots(&sources));
    }
    fail_on("top-level modules of a crate that import each other in a circle", violations);
}

#[test]
fn architecture_table_is_cargo_metadata() {
    let crates = workspace_crates(&cargo_metadata());
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md is readable");
    fail_on("ARCHITECTURE.md's crate table disagrees with `cargo metadata`", crate_table_problems(&text, &crates));
}

#[test]
fn wire_formats_have_one_home_each() {
    fail_on("a wire format's crate is a dependency outside its home", wire_problems(&cargo_metadata(), &root()));
}

#[test]
fn the_house_lints_are_on_everywhere() {
    let root = root();
    let read = |path: &Path| std::fs::read_to_string(path).expect("a Cargo.toml is readable");
    let mut manifests = vec![("Cargo.toml".to_string(), read(&root.join("Cargo.toml")))];
    for folder in crate_sources(&root).into_iter().filter_map(|src| src.parent().map(Path::to_path_buf)) {
        if folder != root {
            let path = folder.join("Cargo.toml");
            let shown = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
            manifests.push((shown, read(&path)));
        }
    }
    fail_on("the house's lints are not on", lint_problems(&manifests));
}

#[test]
fn relative_links_point_somewhere() {
    let root = root();
    let mut violations = Vec::new();
    for file in markdown_files(&root) {
        let text = std::fs::read_to_string(&file).expect("markdown file is readable");
        violations.extend(dead_links(&root, &file, &text));
    }
    fail_on("relative links that point nowhere", violations);
}

#[test]
fn the_invariants_name_tests_that_exist() {
    let root = root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md is readable");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).ok();
    let (named, violations) = invariant_tests(&text, read);
    assert!(named >= 20, "the invariants name {named} tests; the section was not found or not read");
    fail_on("tests named by ARCHITECTURE.md's invariants that do not exist", violations);
}

// ---------------------------------------------------------------------------------------------
// Self-checks: each checker reports a violation fed to it.

#[test]
fn self_check_invariant_tests() {
    let text = "# A\n\n## Invariants, and the tests that hold them\n\n- **One.** `tests/a.rs`\n  (`there`,\n  `gone`), `tests/b.rs`.\n- **Two.** `tests/missing.rs` (`x`).\n\n## Next\n\n`tests/a.rs` (`not_checked`)\n";
    let read = |path: &str| match path {
        "tests/a.rs" => Some("fn there() {}\nfn gone_soon() {}\n".to_string()),
        "tests/b.rs" => Some(String::new()),
        _ => None,
    };
    let (named, violations) = invariant_tests(text, read);
    let said: Vec<String> = violations.iter().map(|v| v.to_string()).collect();
    assert_eq!(named, 5, "{said:?}");
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].starts_with("ARCHITECTURE.md:7:") && said[0].contains("`gone`"), "{said:?}");
    assert!(said[1].starts_with("ARCHITECTURE.md:8:") && said[1].contains("tests/missing.rs"), "{said:?}");
}

#[test]
fn self_check_string_errors() {
    let text = r###"
//! Docs may say Result<(), String> freely.
use std::collections::BTreeMap;
fn f() -> Result<(), String> { Ok(()) }
fn nested() -> Result<BTreeMap<String, String>, PromptArgumentsError> { todo!() }
fn bool_one() -> Result<bool, String> { todo!() }
fn closure(_: impl FnMut(&str) -> Result<bool, String>) {}
fn arrow() -> Result<Box<dyn Fn() -> u8>, Error> { todo!() }
fn spread() -> std::result::Result<
    Vec<u8>,
    std::string::String,
> { todo!() }
fn option() -> Result<Option<String>, StateError> { todo!() }
const TEXT: &str = "Result<(), String>";
impl TryFrom<u8> for Thing {
    type Error = String;
    fn try_from(_: u8) -> Result<Self, Self::Error> { todo!() }
}
#[cfg(test)]
#[allow(unused)]
mod tests {
    fn in_a_test() -> Result<(), String> { Ok(()) }
}
const RAW: &str = r##"fn g() -> Result<(), String> "# "##;
const QUOTE: char = '"';
fn h<'a>(_: &'a [u8]) -> Result<u8, String> { let _ = b"\"'"; todo!() }
"###;
    let source = Source::new("crates/x/src/lib.rs", text);
    let lines: Vec<usize> = string_errors(&source).iter().map(|v| v.line).collect();
    assert_eq!(lines, [4, 6, 7, 9, 16, 26], "{:?}", string_errors(&source));

    // The allowlist covers its count in its file, and nothing else.
    let one = "fn f() -> Result<(), String> { Ok(()) }\n";
    let sources = [Source::new("a.rs", one), Source::new("b.rs", one), Source::new("c.rs", "")];
    let past = |allowed: &[(&str, usize, &str)]| -> Vec<String> {
        string_errors_past(&sources, allowed).iter().map(|v| v.to_string()).collect()
    };
    assert_eq!(past(&[("a.rs", 1, "why"), ("b.rs", 1, "why")]), Vec::<String>::new());
    assert_eq!(past(&[("a.rs", 1, "why")]), ["b.rs:1: `Result<(), String>`"]);
    let wrong_count = past(&[("a.rs", 2, "why"), ("b.rs", 1, "why")]);
    assert!(wrong_count.len() == 2 && wrong_count[0].contains("the allowlist says 2"), "{wrong_count:?}");
    let stale = past(&[("a.rs", 1, "why"), ("b.rs", 1, "why"), ("c.rs", 1, "why")]);
    assert!(stale.len() == 1 && stale[0].contains("remove the entry"), "{stale:?}");
}

#[test]
fn self_check_long_files() {
    let long = "fn f() {}\n".repeat(MAX_LINES + 1);
    let mut with_tests = "fn f() {}\n".repeat(MAX_LINES - 10);
    with_tests.push_str("#[cfg(test)]\nmod tests {\n");
    with_tests.push_str(&"    fn t() {}\n".repeat(50));
    with_tests.push_str("}\n");
    let sources = [
        Source::new("crates/x/src/long.rs", &long),
        Source::new("crates/x/src/short.rs", "fn f() {}\n"),
        Source::new("crates/x/src/with_tests.rs", &with_tests),
    ];
    let paths: Vec<String> = long_files(&sources).into_iter().map(|v| v.path).collect();
    assert_eq!(paths, ["crates/x/src/long.rs"]);
    assert!(long_files_past(&sources, &[("crates/x/src/long.rs", "why")]).is_empty());
    let stale = long_files_past(&sources, &[("crates/x/src/long.rs", "why"), ("crates/x/src/short.rs", "why")]);
    assert!(stale.len() == 1 && stale[0].message.contains("remove the entry"), "{stale:?}");

    // What counts as product code: not test files, not files in a `tests` folder, not other trees.
    let dir = tempfile::tempdir().unwrap();
    for file in [
        "src/main.rs",
        "crates/x/src/lib.rs",
        "crates/x/src/a/b.rs",
        "crates/x/src/tests.rs",
        "crates/x/src/queue_tests.rs",
        "crates/x/src/tests/mod.rs",
        "crates/x/tests/it.rs",
        "crates/x/benches/b.rs",
        "tests/t.rs",
    ] {
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "fn f() {}\n").unwrap();
    }
    let found: Vec<String> = product_sources(dir.path()).into_iter().map(|s| s.path).collect();
    assert_eq!(found, ["crates/x/src/a/b.rs", "crates/x/src/lib.rs", "src/main.rs"]);
}

#[test]
fn self_check_module_knots() {
    let sources = [
        Source::new("crates/x/src/lib.rs", "mod a; mod b; mod c; mod d; mod e;"),
        Source::new("crates/x/src/a.rs", "use crate::b::Thing;"),
        Source::new("crates/x/src/b/mod.rs", "mod inner;"),
        Source::new("crates/x/src/b/inner.rs", "use crate::{c::More, self};"),
        Source::new("crates/x/src/c.rs", "fn f() { super::a::go() }"),
        // Edges only in comments, strings and test modules do not count.
        Source::new("crates/x/src/d.rs", "// crate::e\nconst T: &str = \"crate::e\";\n"),
        Source::new("crates/x/src/e.rs", "use crate::f;\n#[cfg(test)]\nmod tests { use crate::d; }"),
        Source::new("crates/x/src/f.rs", "mod inner { use super::d; }"),
    ];
    let knots = module_knots(&sources);
    assert_eq!(knots.len(), 1, "{knots:?}");
    assert_eq!(knots[0].message, "a circle between modules a, b, c: a → b, b → c, c → a");
}

#[test]
fn self_check_crate_table() {
    let crates = vec![
        Crate { name: "picogent-support".into(), dependencies: BTreeSet::new() },
        Crate { name: "picogent-tracker".into(), dependencies: ["picogent-support".to_string()].into() },
        Crate {
            name: "picogent".into(),
            dependencies: ["picogent-support".to_string(), "picogent-tracker".to_string()].into(),
        },
    ];
    let good = "\
# Architecture

| crate | its one job | depends on |
|---|---|---|
| `picogent-support` | what every floor shares | — |
| `picogent-tracker` | the tracker's client \\| its contract | support |
| `picogent` | the binary | support, tracker |

After.
";
    assert!(crate_table_problems(good, &crates).is_empty(), "{:?}", crate_table_problems(good, &crates));

    let bad = "\
| crate | its one job | depends on |
|---|---|---|
| `picogent-tracker` | the tracker's client | support |
| `picogent` | the binary | tracker, web |
| `picogent-tracker` | again | support |
| `picogent-ghost` | not a crate | — |
|  | no name | — |
| `picogent-web` | two | cells | extra |
";
    let problems: Vec<String> = crate_table_problems(bad, &crates).into_iter().map(|v| v.to_string()).collect();
    let expected = [
        "ARCHITECTURE.md:3: `picogent-tracker` depends on `picogent-support`, whose row is not above it",
        "ARCHITECTURE.md:4: `picogent` depends on support, tracker, the row says tracker, web",
        "ARCHITECTURE.md:4: `picogent` depends on `picogent-support`, whose row is not above it",
        "ARCHITECTURE.md:5: `picogent-tracker` has a second row",
        "ARCHITECTURE.md:6: `picogent-ghost` is not a crate of the workspace",
        "ARCHITECTURE.md:7: a row's first cell is a crate's name in backticks, like `picogent-support`",
        "ARCHITECTURE.md:8: a row has three cells, this one 4",
        "ARCHITECTURE.md:0: `picogent-support` has no row in the crate table",
    ];
    assert_eq!(problems, expected);
    assert_eq!(crate_table_problems("no table here", &crates).len(), 1);
    let long_job = format!(
        "| crate | its one job | depends on |\n|---|---|---|\n| `picogent-support` | {} | — |\n",
        "x".repeat(200)
    );
    assert!(crate_table_problems(&long_job, &crates[..1]).iter().any(|v| v.message.contains("one line")));
}

#[test]
fn self_check_wire_homes() {
    let metadata = serde_json::json!({"packages": [
        {"name": "picogent-mcp", "manifest_path": "/nowhere/crates/mcp/Cargo.toml",
         "dependencies": [{"name": "rmcp", "kind": null}]},
        {"name": "picogent-tools", "manifest_path": "/nowhere/crates/tools/Cargo.toml",
         "dependencies": [{"name": "rmcp", "kind": null}, {"name": "serde", "kind": null}]},
        {"name": "picogent", "manifest_path": "/nowhere/Cargo.toml",
         "dependencies": [{"name": "rmcp", "kind": "dev"}, {"name": "async-openai", "kind": "build"}]},
    ]});
    let problems: Vec<String> = wire_problems(metadata.to_string().as_bytes(), Path::new("/nowhere"))
        .into_iter()
        .map(|v| v.to_string())
        .collect();
    assert_eq!(
        problems,
        [
            "crates/tools/Cargo.toml:0: `picogent-tools` depends on `rmcp`, whose one home is `picogent-mcp` \
             (MCP's messages: the tools, the loop and the model client speak picogent's own `ToolDefinition` and \
             `ToolResult`, which the MCP crate's `wire` translates)",
            "Cargo.toml:0: `picogent` depends on `async-openai`, whose one home is `picogent-llm` (the OpenAI API's \
             messages)",
        ]
    );
}

#[test]
fn self_check_lints() {
    let good_root =
        "[workspace]\n\n[workspace.lints.rust]\nunreachable_pub = \"deny\"\n\n[package]\n\n[lints]\nworkspace = true\n";
    let good_crate = "[package]\nname = \"x\"\n\n[lints]\nworkspace = true\n\n[dependencies]\n";
    let manifests =
        [("Cargo.toml".to_string(), good_root.to_string()), ("crates/x/Cargo.toml".into(), good_crate.into())];
    assert!(lint_problems(&manifests).is_empty(), "{:?}", lint_problems(&manifests));
    let manifests = [
        ("Cargo.toml".to_string(), good_root.replace("\"deny\"", "\"warn\"")),
        ("crates/x/Cargo.toml".into(), good_crate.replace("workspace = true", "workspace = false")),
    ];
    let problems: Vec<String> = lint_problems(&manifests).into_iter().map(|v| v.to_string()).collect();
    assert_eq!(
        problems,
        [
            "Cargo.toml:0: `[workspace.lints.rust]` does not hold `unreachable_pub = \"deny\"`",
            "crates/x/Cargo.toml:0: no `[lints]` table with `workspace = true`: the crate does not take the house's lints",
        ]
    );
}

#[test]
fn self_check_dead_links() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("docs/img")).unwrap();
    std::fs::write(dir.path().join("docs/img/a.png"), "").unwrap();
    std::fs::write(dir.path().join("docs/there.md"), "").unwrap();
    let text = "\
[ok](there.md) [ok too](there.md#a-part) ![img](img/a.png) [up](../docs/there.md)
[web](https://example.com/x) [mail](mailto:a@b.c) [anchor](#here) [titled](there.md \"A title\")
[gone](missing.md) and `[code](not-a-link.md)`
```
[in a block](also-not.md)
```
[ref]: gone-too.md
";
    let file = dir.path().join("docs/page.md");
    let found: Vec<String> = dead_links(dir.path(), &file, text).into_iter().map(|v| v.to_string()).collect();
    assert_eq!(found, ["docs/page.md:3: `missing.md` does not exist", "docs/page.md:7: `gone-too.md` does not exist"]);
    std::fs::write(&file, text).unwrap();
    std::fs::write(dir.path().join("README.md"), "[x](nowhere.md)").unwrap();
    let files: Vec<PathBuf> = markdown_files(dir.path());
    assert!(files.contains(&dir.path().join("README.md")) && files.contains(&file), "{files:?}");
}

// ---------------------------------------------------------------------------------------------
// Reading the repository.

/// `cargo metadata --no-deps` of the workspace, as JSON.
fn cargo_metadata() -> Vec<u8> {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One violation: where, and what.
#[derive(Debug)]
struct Violation {
    path: String,
    line: usize,
    message: String,
}

impl Violation {
    fn new(path: &str, line: usize, message: String) -> Violation {
        Violation { path: path.to_string(), line, message }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}:{}: {}", self.path, self.line, self.message)
    }
}

fn fail_on(rule: &str, violations: Vec<Violation>) {
    if !violations.is_empty() {
        let list: Vec<String> = violations.iter().map(|v| format!("  {v}")).collect();
        panic!("tidy: {rule}:\n{}\n", list.join("\n"));
    }
}

/// A Rust file: its path from the repository's root, and its code with comments, string and
/// character literals and `#[cfg(test)] mod … { … }` blocks blanked out (every byte but newlines
/// made a space, so offsets and line numbers stay those of the file).
struct Source {
    path: String,
    code: String,
    /// The file's lines, less those of its test modules.
    product_lines: usize,
}

impl Source {
    fn new(path: &str, text: &str) -> Source {
        let mut code = blank_comments_and_literals(text);
        let test_lines = blank_test_modules(&mut code);
        Source {
            path: path.to_string(),
            code: String::from_utf8(code).unwrap(),
            product_lines: text.lines().count() - test_lines,
        }
    }

    fn line_of(&self, offset: usize) -> usize {
        self.code.as_bytes()[..offset].iter().filter(|&&b| b == b'\n').count() + 1
    }
}

/// The `src` folders of the root package and of every crate under `crates/`.
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let mut found = vec![root.join("src")];
    if let Ok(entries) = std::fs::read_dir(root.join("crates")) {
        for entry in entries {
            let src = entry.unwrap().path().join("src");
            if src.is_dir() {
                found.push(src);
            }
        }
    }
    found.retain(|src| src.is_dir());
    found.sort();
    found
}

/// Every product file of every crate, sorted by path.
fn product_sources(root: &Path) -> Vec<Source> {
    let mut sources: Vec<Source> = crate_sources(root).iter().flat_map(|src| rust_sources(root, src)).collect();
    sources.sort_by(|a, b| a.path.cmp(&b.path));
    sources
}

/// The product files under one `src` folder: test files and folders left out.
fn rust_sources(root: &Path, src: &Path) -> Vec<Source> {
    let mut sources = Vec::new();
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    folders.push(path);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let relative = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
                sources.push(Source::new(&relative, &text));
            }
        }
    }
    sources.sort_by(|a, b| a.path.cmp(&b.path));
    sources
}

fn is_ident(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// The text with comments and the insides of string and character literals made spaces
/// (newlines kept). A lifetime (`'a`) is not a literal.
fn blank_comments_and_literals(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to.min(bytes.len())] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&b| b == b'\n').map_or(bytes.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0, i);
            while j < bytes.len() {
                if bytes[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if bytes[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if is_ident(bytes[i]) {
            let start = i;
            while i < bytes.len() && is_ident(bytes[i]) {
                i += 1;
            }
            // `b"…"` and `b'…'`: the prefix is a word, and its literal is read next time round.
            let word = &bytes[start..i];
            if (word == b"r" || word == b"br" || word == b"cr") && i < bytes.len() && matches!(bytes[i], b'"' | b'#') {
                let hashes = bytes[i..].iter().take_while(|&&b| b == b'#').count();
                if bytes.get(i + hashes) == Some(&b'"') {
                    let open = i + hashes + 1;
                    let mut close = Vec::from([b'"']);
                    close.extend(std::iter::repeat_n(b'#', hashes));
                    let end =
                        bytes[open..].windows(close.len()).position(|w| w == close).map_or(bytes.len(), |n| open + n);
                    blank(&mut out, open, end);
                    i = end + close.len();
                }
            }
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if bytes[i] == b'\'' {
            if bytes.get(i + 1) == Some(&b'\\') {
                let mut j = i + 2;
                while j < bytes.len() && bytes[j] != b'\'' {
                    j += 1;
                }
                blank(&mut out, i + 1, j);
                i = j + 1;
            } else {
                let width = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                if bytes.get(i + 1 + width) == Some(&b'\'') {
                    blank(&mut out, i + 1, i + 1 + width);
                    i += width + 2;
                } else {
                    i += 1; // a lifetime
                }
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Blanks every `#[cfg(test)] mod name { … }` (other attributes between allowed) in code already
/// cleared of comments and literals; returns how many lines they held.
fn blank_test_modules(code: &mut [u8]) -> usize {
    let mut lines = 0;
    let mut from = 0;
    while let Some(found) = find(&code[from..], b"#[cfg(test)]") {
        let start = from + found;
        let mut i = start + b"#[cfg(test)]".len();
        loop {
            while i < code.len() && code[i].is_ascii_whitespace() {
                i += 1;
            }
            if code[i..].starts_with(b"#[") {
                i = match_close(code, i + 1).map_or(code.len(), |end| end + 1);
            } else {
                break;
            }
        }
        if code[i..].starts_with(b"pub") {
            i += 3;
            while i < code.len() && (code[i].is_ascii_whitespace() || code[i] == b'(') {
                i = if code[i] == b'(' { match_close(code, i).map_or(code.len(), |end| end + 1) } else { i + 1 };
            }
        }
        let is_module = code[i..].starts_with(b"mod") && code.get(i + 3).is_some_and(|b| b.is_ascii_whitespace());
        let open = code[i..].iter().position(|&b| b == b'{' || b == b';').map(|n| i + n);
        match open {
            Some(open) if is_module && code[open] == b'{' => {
                let end = match_close(code, open).unwrap_or(code.len() - 1);
                let newlines = code[start..=end].iter().filter(|&&b| b == b'\n').count();
                // The lines from the attribute's to the closing brace's, both included.
                lines += newlines + 1;
                for byte in &mut code[start..=end] {
                    if *byte != b'\n' {
                        *byte = b' ';
                    }
                }
                from = end + 1;
            }
            _ => from = start + 1,
        }
    }
    lines
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// The offset of the bracket that closes the one at `open` (`(`, `[` or `{`).
fn match_close(code: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &byte) in code.iter().enumerate().skip(open) {
        match byte {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// A token of code: an identifier (or number) or one punctuation byte, with its offset.
fn tokens(code: &str) -> Vec<(usize, &str)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_whitespace() {
            i += 1;
        } else if is_ident(bytes[i]) {
            let start = i;
            while i < bytes.len() && is_ident(bytes[i]) {
                i += 1;
            }
            found.push((start, &code[start..i]));
        } else {
            let width = code[i..].chars().next().map_or(1, char::len_utf8);
            found.push((i, &code[i..i + width]));
            i += width;
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Rule 1: `Result<_, String>`.

/// Every `Result<T, String>` (however the generics nest or the lines break) and every
/// `type Error = String` / `type Err = String` in a file.
fn string_errors(source: &Source) -> Vec<Violation> {
    let tokens = tokens(&source.code);
    let text = |range: &[(usize, &str)]| range.iter().map(|(_, t)| *t).collect::<String>();
    let is_string = |written: &str| matches!(written, "String" | "std::string::String" | "alloc::string::String");
    let mut found = Vec::new();
    for (index, &(offset, token)) in tokens.iter().enumerate() {
        if token == "type" && matches!(tokens.get(index + 1), Some((_, "Error" | "Err"))) {
            let end = tokens[index..].iter().position(|(_, t)| *t == ";").map_or(tokens.len(), |n| index + n);
            if tokens.get(index + 2).map(|(_, t)| *t) == Some("=") && is_string(&text(&tokens[index + 3..end])) {
                found.push(Violation::new(&source.path, source.line_of(offset), "`type Error = String`".into()));
            }
        }
        if token != "Result" {
            continue;
        }
        let mut i = index + 1;
        if text(&tokens[i..(i + 2).min(tokens.len())]) == "::" {
            i += 2;
        }
        if tokens.get(i).map(|(_, t)| *t) != Some("<") {
            continue;
        }
        // The generic arguments: split at commas outside any bracket, up to the closing `>`.
        let (mut depth, mut arguments, mut current) = (0i32, Vec::new(), Vec::new());
        i += 1;
        while i < tokens.len() {
            let token = tokens[i].1;
            match token {
                "-" if tokens.get(i + 1).map(|(_, t)| *t) == Some(">") => {
                    current.push("->");
                    i += 2;
                    continue;
                }
                "<" | "(" | "[" => depth += 1,
                ">" | ")" | "]" if depth > 0 => depth -= 1,
                ">" => break,
                ")" | "]" | "{" | "}" | ";" => {
                    arguments.clear();
                    break;
                }
                "," if depth == 0 => {
                    arguments.push(current.concat());
                    current.clear();
                    i += 1;
                    continue;
                }
                _ => {}
            }
            current.push(token);
            i += 1;
        }
        if !current.is_empty() {
            arguments.push(current.concat());
        }
        if arguments.len() == 2 && is_string(&arguments[1]) {
            found.push(Violation::new(
                &source.path,
                source.line_of(offset),
                format!("`Result<{}, String>`", arguments[0].replace(',', ", ")),
            ));
        }
    }
    found
}

/// The string errors of every source that its allowlist entry does not cover, and the entries
/// that no longer match (a file holding fewer than its entry says, or none).
fn string_errors_past(sources: &[Source], allowed: &[(&str, usize, &str)]) -> Vec<Violation> {
    let mut per_file: BTreeMap<&str, Vec<Violation>> = BTreeMap::new();
    for source in sources {
        for found in string_errors(source) {
            per_file.entry(source.path.as_str()).or_default().push(found);
        }
    }
    let mut violations = Vec::new();
    for &(path, count, _) in allowed {
        match per_file.remove(path) {
            Some(found) if found.len() == count => {}
            Some(found) => {
                violations.push(Violation::new(
                    path,
                    found[0].line,
                    format!(
                        "{} `Result<_, String>` here, the allowlist says {count}: make a new one a typed error, \
                         or correct STRING_ERRORS_ALLOWED in tests/tidy.rs",
                        found.len()
                    ),
                ));
                violations.extend(found);
            }
            None => violations.push(Violation::new(
                path,
                0,
                "allowlisted in STRING_ERRORS_ALLOWED but holds no `Result<_, String>`: remove the entry".into(),
            )),
        }
    }
    violations.extend(per_file.into_values().flatten());
    violations
}

// ---------------------------------------------------------------------------------------------
// Rule 2: long files.

fn long_files(sources: &[Source]) -> Vec<Violation> {
    sources
        .iter()
        .filter(|source| source.product_lines > MAX_LINES)
        .map(|source| {
            Violation::new(
                &source.path,
                MAX_LINES + 1,
                format!("{} lines of product code, over {MAX_LINES} (test modules not counted)", source.product_lines),
            )
        })
        .collect()
}

/// The long files that the allowlist does not name, and the entries whose file is no longer long.
fn long_files_past(sources: &[Source], allowed: &[(&str, &str)]) -> Vec<Violation> {
    let mut violations = long_files(sources);
    let over: BTreeSet<String> = violations.iter().map(|v| v.path.clone()).collect();
    violations.retain(|v| !allowed.iter().any(|(path, _)| *path == v.path));
    for (path, _) in allowed {
        if !over.contains(*path) {
            violations.push(Violation::new(
                path,
                0,
                format!("allowlisted in LONG_FILES_ALLOWED but not over {MAX_LINES} lines: remove the entry"),
            ));
        }
    }
    violations
}

// ---------------------------------------------------------------------------------------------
// Rule 3: import circles between the top-level modules of a crate.

/// The top-level modules of one crate's sources that import each other in a circle (a strongly
/// connected component of more than one), one violation each. A module is the first part of a
/// file's path under `src/` (a file's stem, or a folder); an edge is a path to another module
/// (`crate::x`, `crate::{x, …}`, or `super::x` where `super` is the crate's root) in code, not in
/// comments, strings or test modules. `lib.rs` and `main.rs` assemble and are left out.
fn module_knots(sources: &[Source]) -> Vec<Violation> {
    let mut modules: BTreeMap<String, BTreeMap<String, (String, usize)>> = BTreeMap::new();
    let mut src_path = String::new();
    for source in sources {
        let Some((src, within)) =
            source.path.split_once("/src/").or_else(|| source.path.strip_prefix("src/").map(|w| ("", w)))
        else {
            continue;
        };
        src_path = format!("{src}/src/").trim_start_matches('/').to_string();
        let parts: Vec<&str> = within.trim_end_matches(".rs").split('/').collect();
        if parts.len() == 1 && matches!(parts[0], "lib" | "main") {
            continue;
        }
        // The file's module path, for `super`: `a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`.
        let mut path: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
        if path.last().map(String::as_str) == Some("mod") {
            path.pop();
        }
        let module = path[0].clone();
        let edges = modules.entry(module.clone()).or_default();
        for (target, offset) in module_references(&source.code, &path) {
            if target != module {
                edges.entry(target).or_insert_with(|| (source.path.clone(), source.line_of(offset)));
            }
        }
    }
    let names: Vec<String> = modules.keys().cloned().collect();
    let graph: Vec<Vec<usize>> = names
        .iter()
        .map(|name| modules[name].keys().filter_map(|target| names.iter().position(|n| n == target)).collect())
        .collect();
    let mut knots = Vec::new();
    for component in strongly_connected(&graph) {
        if component.len() < 2 {
            continue;
        }
        let members: BTreeSet<usize> = component.into_iter().collect();
        let mut edges = Vec::new();
        let mut place = None;
        for &from in &members {
            for (target, (path, line)) in &modules[&names[from]] {
                if names.iter().position(|n| n == target).is_some_and(|to| members.contains(&to)) {
                    edges.push(format!("{} → {target}", names[from]));
                    place.get_or_insert((path.clone(), *line));
                }
            }
        }
        let list: Vec<&str> = members.iter().map(|&m| names[m].as_str()).collect();
        let (path, line) = place.unwrap_or((src_path.clone(), 0));
        knots.push(Violation::new(
            &path,
            line,
            format!("a circle between modules {}: {}", list.join(", "), edges.join(", ")),
        ));
    }
    knots
}

/// The crate's top-level modules a file's code names, with where: `crate::x`, `crate::{x, y}`,
/// and `super::…::x` that climbs to the crate's root. `path` is the file's module path; inline
/// `mod name { … }` blocks are followed so that `super` in them is read right.
fn module_references(code: &str, path: &[String]) -> Vec<(String, usize)> {
    let tokens = tokens(code);
    let at = |i: usize| tokens.get(i).map_or("", |(_, t)| *t);
    let is_path_separator = |i: usize| at(i) == ":" && at(i + 1) == ":";
    let mut found = Vec::new();
    // Inline modules: their names and the brace depth inside them.
    let (mut depth, mut inline): (usize, Vec<(String, usize)>) = (0, Vec::new());
    let mut i = 0;
    while i < tokens.len() {
        match at(i) {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            "mod" if at(i + 2) == "{" => {
                inline.push((at(i + 1).to_string(), depth + 1));
            }
            "crate" if is_path_separator(i + 1) => {
                found.extend(named_after(&tokens, i + 3));
            }
            "super" if at(i.wrapping_sub(1)) != ":" => {
                let mut climbs = 1;
                let mut next = i + 1;
                while is_path_separator(next) && at(next + 2) == "super" {
                    climbs += 1;
                    next += 3;
                }
                let here = path.len() + inline.len();
                if climbs == here && is_path_separator(next) {
                    found.extend(named_after(&tokens, next + 2));
                }
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The first names of a path's continuation at token `i`: `x` of `x::…`, or each item's first
/// name in `{x, y::z, self}`.
fn named_after(tokens: &[(usize, &str)], i: usize) -> Vec<(String, usize)> {
    let is_name = |t: &str| t.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_') && t != "self";
    match tokens.get(i) {
        Some(&(offset, name)) if is_name(name) => vec![(name.to_string(), offset)],
        Some(&(_, "{")) => {
            let mut found = Vec::new();
            let (mut depth, mut item_start) = (0, true);
            for &(offset, token) in &tokens[i..] {
                match token {
                    "{" => {
                        depth += 1;
                        item_start = depth == 1;
                    }
                    "}" => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    "," if depth == 1 => item_start = true,
                    _ if item_start && depth == 1 => {
                        if is_name(token) {
                            found.push((token.to_string(), offset));
                        }
                        item_start = false;
                    }
                    _ => {}
                }
            }
            found
        }
        _ => Vec::new(),
    }
}

/// Tarjan's strongly connected components of a graph given as each node's successors.
fn strongly_connected(graph: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct Walk<'a> {
        graph: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, node: usize) {
            self.index[node] = Some(self.next);
            self.low[node] = self.next;
            self.next += 1;
            self.stack.push(node);
            self.on_stack[node] = true;
            for &to in &self.graph[node] {
                match self.index[to] {
                    None => {
                        self.visit(to);
                        self.low[node] = self.low[node].min(self.low[to]);
                    }
                    Some(index) if self.on_stack[to] => self.low[node] = self.low[node].min(index),
                    Some(_) => {}
                }
            }
            if Some(self.low[node]) == self.index[node] {
                let mut component = Vec::new();
                loop {
                    let top = self.stack.pop().unwrap();
                    self.on_stack[top] = false;
                    component.push(top);
                    if top == node {
                        break;
                    }
                }
                self.components.push(component);
            }
        }
    }
    let n = graph.len();
    let mut walk = Walk {
        graph,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        components: Vec::new(),
    };
    for node in 0..n {
        if walk.index[node].is_none() {
            walk.visit(node);
        }
    }
    walk.components
}

// ---------------------------------------------------------------------------------------------
// Rule 4: ARCHITECTURE.md's crate table.

/// A workspace crate and the workspace crates it depends on (normal dependencies only).
#[derive(Debug)]
struct Crate {
    name: String,
    dependencies: BTreeSet<String>,
}

/// What keeps the house's lints from holding: the root's `[workspace.lints.rust]` not denying
/// `unreachable_pub`, or a manifest (the first is the root's) without `[lints] workspace = true`.
fn lint_problems(manifests: &[(String, String)]) -> Vec<Violation> {
    // The lines of `table` in `text`, up to the next table.
    fn table<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        let mut lines = text.lines().skip_while(|line| line.trim() != name);
        if lines.next().is_none() {
            return Vec::new();
        }
        lines.take_while(|line| !line.trim_start().starts_with('[')).map(str::trim).collect()
    }
    let mut problems = Vec::new();
    if let Some((path, text)) = manifests.first()
        && !table(text, "[workspace.lints.rust]").contains(&"unreachable_pub = \"deny\"")
    {
        problems.push(Violation::new(
            path,
            0,
            "`[workspace.lints.rust]` does not hold `unreachable_pub = \"deny\"`".into(),
        ));
    }
    for (path, text) in manifests {
        if !table(text, "[lints]").contains(&"workspace = true") {
            problems.push(Violation::new(
                path,
                0,
                "no `[lints]` table with `workspace = true`: the crate does not take the house's lints".into(),
            ));
        }
    }
    problems
}

/// Every dependency (not a test's) of a crate on a wire format's crate outside its home, at its
/// line in the crate's `Cargo.toml` (0 when the manifest cannot be read).
fn wire_problems(metadata: &[u8], root: &Path) -> Vec<Violation> {
    let metadata: serde_json::Value = serde_json::from_slice(metadata).expect("cargo metadata prints JSON");
    let mut problems = Vec::new();
    for package in metadata["packages"].as_array().expect("cargo metadata lists packages") {
        let name = package["name"].as_str().unwrap_or_default();
        let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
        let shown = manifest.strip_prefix(root).unwrap_or(&manifest).display().to_string();
        let text = std::fs::read_to_string(&manifest).unwrap_or_default();
        for dependency in package["dependencies"].as_array().into_iter().flatten() {
            if dependency["kind"].as_str() == Some("dev") {
                continue;
            }
            let dependency = dependency["name"].as_str().unwrap_or_default();
            let Some((_, home, why)) = WIRE_HOMES.iter().find(|(wire, home, _)| *wire == dependency && *home != name)
            else {
                continue;
            };
            let line = text
                .lines()
                .position(|line| line.strip_prefix(dependency).is_some_and(|rest| rest.starts_with([' ', '.', '='])))
                .map_or(0, |index| index + 1);
            problems.push(Violation::new(
                &shown,
                line,
                format!("`{name}` depends on `{dependency}`, whose one home is `{home}` ({why})"),
            ));
        }
    }
    problems
}

fn workspace_crates(metadata: &[u8]) -> Vec<Crate> {
    let metadata: serde_json::Value = serde_json::from_slice(metadata).expect("cargo metadata prints JSON");
    let packages = metadata["packages"].as_array().expect("cargo metadata lists packages");
    let members: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|package| Crate {
            name: package["name"].as_str().unwrap().to_string(),
            dependencies: package["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|dependency| dependency["kind"].is_null())
                .filter_map(|dependency| dependency["name"].as_str())
                .filter(|name| members.contains(name))
                .map(str::to_string)
                .collect(),
        })
        .collect()
}

/// The header of the crate table; its rows follow the separator line, up to the first line not
/// starting with `|`. A row is `` | `picogent-x` | one line | a, b | `` with the dependencies by
/// their names less `picogent-`, or `—` for none.
const TABLE_HEADER: &str = "| crate | its one job | depends on |";
const MAX_JOB_CHARS: usize = 160;

fn crate_table_problems(text: &str, crates: &[Crate]) -> Vec<Violation> {
    let file = "ARCHITECTURE.md";
    let problem = |line: usize, message: String| Violation::new(file, line, message);
    let lines: Vec<&str> = text.lines().collect();
    let headers: Vec<usize> =
        lines.iter().enumerate().filter(|(_, l)| l.trim() == TABLE_HEADER).map(|(n, _)| n).collect();
    let [header] = headers[..] else {
        return vec![problem(0, format!("expected one crate table, headed `{TABLE_HEADER}`; found {}", headers.len()))];
    };
    let short = |name: &str| name.strip_prefix("picogent-").unwrap_or(name).to_string();
    let by_short: BTreeMap<String, &Crate> = crates.iter().map(|c| (short(&c.name), c)).collect();
    let mut problems = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (number, line) in lines.iter().enumerate().skip(header + 2) {
        let number = number + 1;
        if !line.starts_with('|') {
            break;
        }
        let cells = split_row(line);
        let [name, job, depends] = &cells[..] else {
            problems.push(problem(number, format!("a row has three cells, this one {}", cells.len())));
            continue;
        };
        let Some(name) = name.strip_prefix('`').and_then(|n| n.strip_suffix('`')).filter(|n| !n.is_empty()) else {
            problems.push(problem(
                number,
                "a row's first cell is a crate's name in backticks, like `picogent-support`".into(),
            ));
            continue;
        };
        if seen.iter().any(|s| s == name) {
            problems.push(problem(number, format!("`{name}` has a second row")));
            continue;
        }
        seen.push(name.to_string());
        let Some(krate) = crates.iter().find(|c| c.name == name) else {
            problems.push(problem(number, format!("`{name}` is not a crate of the workspace")));
            continue;
        };
        if job.is_empty() || job.chars().count() > MAX_JOB_CHARS {
            problems.push(problem(number, format!("`{name}`'s job is one line of at most {MAX_JOB_CHARS} characters")));
        }
        let listed: Vec<String> =
            if *depends == "—" { Vec::new() } else { depends.split(',').map(|d| d.trim().to_string()).collect() };
        let listed_set: BTreeSet<String> = listed.iter().cloned().collect();
        let actual: BTreeSet<String> = krate.dependencies.iter().map(|d| short(d)).collect();
        if listed_set != actual || listed_set.len() != listed.len() {
            let actual_text = if actual.is_empty() {
                "—".to_string()
            } else {
                actual.iter().cloned().collect::<Vec<_>>().join(", ")
            };
            problems.push(problem(number, format!("`{name}` depends on {actual_text}, the row says {depends}")));
        }
        for dependency in &krate.dependencies {
            let above = by_short.get(&short(dependency)).is_some_and(|c| seen[..seen.len() - 1].contains(&c.name));
            if !above {
                problems
                    .push(problem(number, format!("`{name}` depends on `{dependency}`, whose row is not above it")));
            }
        }
    }
    for krate in crates {
        if !seen.contains(&krate.name) {
            problems.push(problem(0, format!("`{}` has no row in the crate table", krate.name)));
        }
    }
    problems
}

/// A table row's cells, trimmed; `\|` is a `|` inside a cell.
fn split_row(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cells.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => cells.push(String::new()),
            _ => cells.last_mut().unwrap().push(c),
        }
    }
    cells.iter().map(|c| c.trim().to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// Rule 5: relative links.

/// README.md, ARCHITECTURE.md and every `.md` under docs/.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md"].iter().map(|name| root.join(name)).filter(|p| p.is_file()).collect();
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The relative links of a markdown text (`[text](target)`, `![alt](target)` and `[label]: target`,
/// not inside code) whose file does not exist, resolved from the file's folder (or from the root
/// when it starts with `/`). Web, mail and `#anchor`-only links are not checked.
fn dead_links(root: &Path, file: &Path, text: &str) -> Vec<Violation> {
    let shown = file.strip_prefix(root).unwrap_or(file).to_string_lossy().replace('\\', "/");
    let folder = file.parent().unwrap();
    let mut found = Vec::new();
    let mut in_code_block = false;
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_code_block = !in_code_block;
            continue;
        }
        if in_code_block {
            continue;
        }
        let line = without_code_spans(line);
        let mut targets = Vec::new();
        if let Some(rest) = line.trim_start().strip_prefix('[')
            && let Some((label, target)) = rest.split_once("]:")
            && !label.is_empty()
            && !label.contains(']')
        {
            targets.push(target.trim().to_string());
        }
        let mut from = 0;
        while let Some(found) = line[from..].find("](") {
            let start = from + found + 2;
            let mut depth = 1;
            let mut end = line.len();
            for (i, c) in line[start..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = start + i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            targets.push(line[start..end].to_string());
            from = end.min(line.len());
        }
        for target in targets {
            let target = target.trim();
            let target = match target.strip_prefix('<') {
                Some(inside) => inside.split('>').next().unwrap_or(""),
                None => target.split_whitespace().next().unwrap_or(""),
            };
            if target.is_empty()
                || target.starts_with('#')
                || ["http://", "https://", "mailto:"].iter().any(|scheme| target.starts_with(scheme))
            {
                continue;
            }
            let path = target.split(['#', '?']).next().unwrap().replace("%20", " ");
            let resolved = match path.strip_prefix('/') {
                Some(from_root) => root.join(from_root),
                None => folder.join(&path),
            };
            if !resolved.exists() {
                found.push(Violation::new(&shown, number + 1, format!("`{target}` does not exist")));
            }
        }
    }
    found
}

/// A line with its inline code spans (`` `…` ``) made spaces.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(open) = rest.find('`') {
        out.push_str(&rest[..open]);
        let ticks = rest[open..].chars().take_while(|&c| c == '`').count();
        let fence = "`".repeat(ticks);
        let after = &rest[open + ticks..];
        match after.find(&fence) {
            Some(close) => {
                out.push_str(&" ".repeat(ticks * 2 + close));
                rest = &after[close + ticks..];
            }
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The section of ARCHITECTURE.md that lists the invariants and their tests.
const INVARIANTS_HEADING: &str = "## Invariants";

/// How many tests the invariants section names (files and functions), and those that do not
/// exist. `read` gives a file's text by its path from the root.
fn invariant_tests(text: &str, read: impl Fn(&str) -> Option<String>) -> (usize, Vec<Violation>) {
    let mut violations = Vec::new();
    let mut named = 0;
    let mut inside = false;
    // The file the last path named, its text, and whether the parentheses after it are open.
    let mut file: Option<(String, Option<String>)> = None;
    let mut open = false;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.starts_with("## ") {
            inside = line.starts_with(INVARIANTS_HEADING);
            file = None;
            open = false;
            continue;
        }
        if !inside {
            continue;
        }
        let mut rest = line;
        while !rest.is_empty() {
            let next_tick = rest.find('`');
            let next_open = rest.find('(');
            let next_close = rest.find(')');
            let first = [next_tick, next_open, next_close].into_iter().flatten().min();
            let Some(at) = first else { break };
            match rest.as_bytes()[at] {
                b'(' => {
                    open = file.is_some();
                    rest = &rest[at + 1..];
                }
                b')' => {
                    open = false;
                    rest = &rest[at + 1..];
                }
                _ => {
                    let after = &rest[at + 1..];
                    let Some(end) = after.find('`') else { break };
                    let word = &after[..end];
                    rest = &after[end + 1..];
                    if word.ends_with(".rs") && !word.contains(' ') {
                        named += 1;
                        let found = read(word);
                        if found.is_none() {
                            violations.push(Violation::new(
                                "ARCHITECTURE.md",
                                number,
                                format!("{word} does not exist"),
                            ));
                        }
                        file = Some((word.to_string(), found));
                        open = false;
                    } else if open
                        && let Some((path, Some(code))) = &file
                        && word.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric())
                    {
                        named += 1;
                        if !code.contains(&format!("fn {word}(")) {
                            violations.push(Violation::new(
                                "ARCHITECTURE.md",
                                number,
                                format!("`{word}` is not a test in {path}"),
                            ));
                        }
                    }
                }
            }
        }
    }
    (named, violations)
}
