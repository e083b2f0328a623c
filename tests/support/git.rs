//! The one way the tests run `git`: isolated from the host's and the user's configuration, with
//! a fixed identity and fixed dates, so fixture repositories are the same on every machine.
//!
//! Every run gets `GIT_CONFIG_GLOBAL=/dev/null` and `GIT_CONFIG_NOSYSTEM=1` (no global or system
//! config: no signing, hooks path, URL rewrites or default branch from the host), a private
//! `HOME` without `XDG_CONFIG_HOME` (no global excludes or attributes either), no inherited
//! `GIT_DIR` / `GIT_WORK_TREE` / `GIT_INDEX_FILE`, and these settings: `protocol.file.allow=always`
//! (local paths as submodule URLs), `init.defaultBranch=main`, `commit.gpgsign=false`. Author and
//! committer are `Fixture <fixture@example.invalid>` at 2026-01-01T00:00:00Z.
//!
//! Nothing here touches the network: URLs are local paths or loopback (the Gitea double).

use std::path::Path;
use std::process::{Command, Output};

/// The identity of every fixture commit.
pub const NAME: &str = "Fixture";
/// The e-mail address of every fixture commit.
pub const EMAIL: &str = "fixture@example.invalid";
/// The author and committer date of every fixture commit.
pub const DATE: &str = "2026-01-01T00:00:00Z";

/// The settings every run gets, as `GIT_CONFIG_KEY_n` / `GIT_CONFIG_VALUE_n` pairs.
const CONFIG: &[(&str, &str)] =
    &[("protocol.file.allow", "always"), ("init.defaultBranch", "main"), ("commit.gpgsign", "false")];

/// A `git` command in `dir` with the isolated environment (see the module docs); add arguments
/// and run it.
pub fn command(dir: &Path) -> Command {
    let home = std::env::temp_dir().join("pgo-fixture-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_COUNT", CONFIG.len().to_string())
        .env("GIT_AUTHOR_NAME", NAME)
        .env("GIT_AUTHOR_EMAIL", EMAIL)
        .env("GIT_COMMITTER_NAME", NAME)
        .env("GIT_COMMITTER_EMAIL", EMAIL)
        .env("GIT_AUTHOR_DATE", DATE)
        .env("GIT_COMMITTER_DATE", DATE)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE");
    for (i, (key, value)) in CONFIG.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), key).env(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
    cmd
}

/// Runs `git args…` in `dir`; returns the whole output, whatever the exit status (for callers
/// that inspect a failure or time the run).
pub fn git_output(dir: &Path, args: &[&str]) -> Output {
    command(dir).args(args).output().expect("git runs")
}

/// Runs `git args…` in `dir`; returns stdout, trimmed. Panics with git's stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_output(dir, args);
    assert!(out.status.success(), "git {args:?} in {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("git prints UTF-8").trim().to_string()
}
