//! Running picogent as a service: the systemd unit in `deploy/` is one systemd accepts
//! (`systemd-analyze verify`, with no warning), hardened as docs/running.md says; the
//! Containerfile builds in two stages and runs as a user of its own (`tests/container.rs` builds
//! and runs the image).

use std::path::Path;
use std::process::Command;

const UNIT: &str = include_str!("../deploy/picogent.service");
const CONTAINERFILE: &str = include_str!("../deploy/Containerfile");

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let verify = Command::new("systemd-analyze").arg("--version").output();
    assert!(
        verify.is_ok_and(|out| out.status.success()),
        "systemd-analyze is not installed: apt-get install systemd (Debian)"
    );
    // `verify` checks that the program exists: the unit as installed, pointing at this build.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("picogent.service");
    std::fs::write(&unit, UNIT.replace("/usr/local/bin/picogent", env!("CARGO_BIN_EXE_picogent"))).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&unit).current_dir(dir.path()).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    let ours: Vec<&str> = said.lines().filter(|line| line.contains("picogent.service")).collect();
    assert!(ours.is_empty(), "systemd warns about the unit: {said}");
    for setting in [
        "User=picogent",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "StateDirectory=picogent",
        "EnvironmentFile=-/etc/picogent/picogent.env",
        "CapabilityBoundingSet=\n",
        "RestartPreventExitStatus=3",
    ] {
        assert!(UNIT.contains(setting), "the unit has {setting:?}");
    }
    assert_eq!(picogent::runtime::presence::EXIT_ANOTHER_COPY, 3, "RestartPreventExitStatus names it");
}

#[test]
fn the_containerfile_builds_in_two_stages_and_runs_as_a_user_of_its_own() {
    let stages: Vec<&str> = CONTAINERFILE.lines().filter(|line| line.starts_with("FROM ")).collect();
    assert_eq!(stages.len(), 2, "{stages:?}");
    let user = CONTAINERFILE.lines().rev().find_map(|line| line.strip_prefix("USER "));
    assert!(user.is_some_and(|user| user != "root" && user != "0"), "it runs as {user:?}");
    assert!(CONTAINERFILE.contains("COPY --from=build /src/target/release/picogent"));
    // What it copies is in the repository.
    for copied in CONTAINERFILE.lines().filter_map(|line| line.strip_prefix("COPY ")) {
        if copied.starts_with("--from") || copied.starts_with(". ") {
            continue;
        }
        let source = copied.split_whitespace().next().unwrap();
        assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join(source).exists(), "{source}");
    }
    // The image's command is one the binary takes.
    let out = Command::new(env!("CARGO_BIN_EXE_picogent")).args(["run", "--help"]).output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("--config"));
}
