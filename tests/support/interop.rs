//! The MCP peers the interop tests drive (PyPI and npm packages) are installed on first use, so
//! `cargo test` on a fresh machine sets itself up: `tests/interop/install.sh` is idempotent and
//! quick when everything is already there. `.ci/run` runs it before the tests as well.
#![allow(unreachable_pub)] // `pub` is for the tests that include it, not an API

use std::path::Path;
use std::sync::OnceLock;

/// Runs `tests/interop/install.sh` once per test binary. A failure panics with the script's
/// output: the tests that need the peers fail, not skip.
pub fn ensure_installed() {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    let outcome = INSTALLED.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let output = std::process::Command::new("bash")
            .arg(root.join("tests/interop/install.sh"))
            .current_dir(root)
            .output()
            .map_err(|e| format!("cannot run tests/interop/install.sh: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "tests/interop/install.sh failed (it needs python3 with venv, npm, and the PyPI and npm registries):\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    });
    if let Err(message) = outcome {
        panic!("{message}");
    }
}
