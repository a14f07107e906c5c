//! git for the coding tests: a command run as a person would, and a bare repository with
//! `src/date.py` on `main` as the team's remote.
#![allow(unreachable_pub)] // `pub` is for the tests that include it, not an API

use std::path::{Path, PathBuf};
use std::process::Command;

/// `git ARGS` in `dir`, as alice; its output, trimmed. Panics with git's message when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "alice")
        .env("GIT_AUTHOR_EMAIL", "alice@example.com")
        .env("GIT_COMMITTER_NAME", "alice")
        .env("GIT_COMMITTER_EMAIL", "alice@example.com")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A bare repository `app.git` in `dir` with `src/date.py` on `main`: the team's remote.
pub fn remote(dir: &Path) -> PathBuf {
    let seed = dir.join("seed");
    std::fs::create_dir_all(seed.join("src")).unwrap();
    git(&seed, &["init", "--quiet", "-b", "main"]);
    std::fs::write(seed.join("src/date.py"), "def parse():\n    return \"2020-01-01\"\n").unwrap();
    git(&seed, &["add", "."]);
    git(&seed, &["commit", "--quiet", "-m", "start"]);
    let bare = dir.join("app.git");
    git(dir, &["clone", "--quiet", "--bare", seed.to_str().unwrap(), bare.to_str().unwrap()]);
    bare
}
