//! The git command-line tool, for what gix cannot do: push, fetch over HTTP with credentials,
//! commits and submodule bookkeeping in a working copy.
//!
//! * Every call is an argv vector (`Command::args`), never a shell string.
//! * Credentials never appear in a URL or an argument: git asks for them through `GIT_ASKPASS`,
//!   a tiny script (written once to a private temp directory, mode 0700) that prints
//!   `$PGO_GIT_USERNAME` or `$PGO_GIT_PASSWORD` from **its own environment**, which it inherits
//!   from the git child process; only that child gets those variables. Stored credential
//!   helpers are switched off (`-c credential.helper=`) so nothing is written to disk, and
//!   `GIT_TERMINAL_PROMPT=0` makes a missing credential an error instead of a hang.
//! * Commits made by the tool are deterministic (fixed identity, date given by the caller), so
//!   the same input always yields the same commit ids: that is what makes publishing twice a
//!   no-op.
//! * The user's and system's git configuration cannot change the result: hooks are off
//!   (`core.hooksPath=/dev/null`), signing is off, and `GIT_CONFIG_NOSYSTEM=1`.
//!
//! Errors ([`GitError`]) carry the arguments, the exit status and git's stderr with every
//! registered secret redacted (see [`crate::actions::redact`]).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use secrecy::{ExposeSecret, SecretString};

/// Name and e-mail of commits made by the tool.
pub const TOOL_IDENTITY: (&str, &str) = ("proxmox-gitops", "proxmox-gitops@localhost");

/// Errors running git.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// git could not be started.
    #[error("cannot run git (is it installed?): {0}")]
    Spawn(#[source] std::io::Error),
    /// git exited with a failure.
    #[error("`git {args}` in {dir} failed ({status}): {stderr}")]
    Failed {
        /// The arguments, space-joined (never holds a secret).
        args: String,
        /// The working directory.
        dir: PathBuf,
        /// Exit status.
        status: String,
        /// git's stderr, trimmed, secrets redacted.
        stderr: String,
    },
    /// The askpass helper could not be written.
    #[error("cannot prepare the git credential helper: {0}")]
    Askpass(#[source] std::io::Error),
}

/// HTTP credentials handed to git through `GIT_ASKPASS`.
#[derive(Clone)]
pub struct Credentials {
    /// User name (for token auth: the token owner's login).
    pub username: String,
    /// Password or access token.
    pub secret: SecretString,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, ***)", self.username)
    }
}

/// A configured git runner.
#[derive(Debug)]
pub struct Git {
    credentials: Option<Credentials>,
    askpass: Option<tempfile::TempDir>,
}

const ASKPASS: &str = "#!/bin/sh\n# proxmox-gitops: answers git's credential prompts from this process's environment.\ncase \"$1\" in\n  Username*|username*) printf '%s\\n' \"$PGO_GIT_USERNAME\" ;;\n  *) printf '%s\\n' \"$PGO_GIT_PASSWORD\" ;;\nesac\n";

impl Git {
    /// A runner without credentials (local operations, anonymous fetches).
    pub fn new() -> Git {
        Git { credentials: None, askpass: None }
    }

    /// A runner answering HTTP authentication with `credentials`.
    ///
    /// # Errors
    /// [`GitError::Askpass`] when the helper script cannot be written.
    pub fn with_credentials(credentials: Credentials) -> Result<Git, GitError> {
        let dir = tempfile::Builder::new().prefix("pgo-askpass-").tempdir().map_err(GitError::Askpass)?;
        let script = dir.path().join("askpass.sh");
        std::fs::write(&script, ASKPASS).map_err(GitError::Askpass)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).map_err(GitError::Askpass)?;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).map_err(GitError::Askpass)?;
        }
        Ok(Git { credentials: Some(credentials), askpass: Some(dir) })
    }

    /// The base command: `git -C dir` with the isolating options and environment.
    fn command(&self, dir: &Path) -> Command {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(dir);
        for c in [
            "credential.helper=",
            "core.hooksPath=/dev/null",
            "commit.gpgsign=false",
            "tag.gpgsign=false",
            "protocol.file.allow=always",
            "init.defaultBranch=main",
            "advice.detachedHead=false",
        ] {
            cmd.arg("-c").arg(c);
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("LC_ALL", "C")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .env_remove("PGO_GIT_USERNAME")
            .env_remove("PGO_GIT_PASSWORD")
            .stdin(Stdio::null());
        match (&self.credentials, &self.askpass) {
            (Some(c), Some(dir)) => {
                cmd.env("GIT_ASKPASS", dir.path().join("askpass.sh"))
                    .env("SSH_ASKPASS", dir.path().join("askpass.sh"))
                    .env("PGO_GIT_USERNAME", &c.username)
                    .env("PGO_GIT_PASSWORD", c.secret.expose_secret());
            }
            _ => {
                cmd.env("GIT_ASKPASS", "/bin/false").env_remove("SSH_ASKPASS");
            }
        }
        cmd
    }

    /// Runs `git -C dir ARGS` with extra environment `env`; returns stdout (trimmed at the end).
    ///
    /// # Errors
    /// [`GitError::Spawn`], or [`GitError::Failed`] with the redacted stderr.
    pub fn run_env<I, S>(&self, dir: &Path, args: I, env: &[(&str, &OsStr)]) -> Result<String, GitError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_os_string()).collect();
        let mut cmd = self.command(dir);
        cmd.args(&args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let shown = args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
        tracing::debug!("git -C {} {shown}", dir.display());
        let out = cmd.output().map_err(GitError::Spawn)?;
        if !out.status.success() {
            return Err(GitError::Failed {
                args: crate::actions::redact(&shown),
                dir: dir.to_path_buf(),
                status: out.status.to_string(),
                stderr: crate::actions::redact(String::from_utf8_lossy(&out.stderr).trim()),
            });
        }
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        while s.ends_with('\n') || s.ends_with('\r') {
            s.pop();
        }
        Ok(s)
    }

    /// Runs `git -C dir ARGS`; returns stdout (see [`Git::run_env`]).
    pub fn run<I, S>(&self, dir: &Path, args: I) -> Result<String, GitError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.run_env(dir, args, &[])
    }

    /// Runs `git -C dir ARGS` and reports only whether it succeeded (e.g. `cat-file -e`).
    pub fn check<I, S>(&self, dir: &Path, args: I) -> Result<bool, GitError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.command(dir);
        cmd.args(args).stdout(Stdio::null()).stderr(Stdio::null());
        Ok(cmd.status().map_err(GitError::Spawn)?.success())
    }

    /// Commits the index of `dir` as the tool, dated `date` (`@<unix seconds> +0000`), with
    /// `message`; returns the new commit id.
    pub fn commit(&self, dir: &Path, message: &str, date: &str) -> Result<String, GitError> {
        let env = commit_env(date);
        let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, OsStr::new(v.as_str()))).collect();
        self.run_env(dir, ["commit", "-q", "--no-verify", "-m", message], &env)?;
        self.run(dir, ["rev-parse", "HEAD"])
    }

    /// Commits `tree` with `parents` as the tool (see [`Git::commit`]) without touching any ref.
    pub fn commit_tree(
        &self,
        dir: &Path,
        tree: &str,
        parents: &[&str],
        message: &str,
        date: &str,
    ) -> Result<String, GitError> {
        let env = commit_env(date);
        let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, OsStr::new(v.as_str()))).collect();
        let mut args = vec!["commit-tree".to_string(), tree.to_string(), "-m".into(), message.into()];
        for p in parents {
            args.push("-p".into());
            args.push((*p).to_string());
        }
        self.run_env(dir, &args, &env)
    }

    /// `git ls-remote URL REFS…` → `(ref, id)` pairs.
    pub fn ls_remote(&self, dir: &Path, url: &str, refs: &[&str]) -> Result<Vec<(String, String)>, GitError> {
        let mut args = vec!["ls-remote", "--", url];
        args.extend_from_slice(refs);
        let out = self.run(dir, &args)?;
        Ok(out.lines().filter_map(|l| l.split_once('\t')).map(|(id, r)| (r.to_string(), id.to_string())).collect())
    }
}

impl Default for Git {
    fn default() -> Self {
        Git::new()
    }
}

/// The environment of a deterministic tool commit dated `date`.
fn commit_env(date: &str) -> Vec<(&'static str, String)> {
    vec![
        ("GIT_AUTHOR_NAME", TOOL_IDENTITY.0.into()),
        ("GIT_AUTHOR_EMAIL", TOOL_IDENTITY.1.into()),
        ("GIT_COMMITTER_NAME", TOOL_IDENTITY.0.into()),
        ("GIT_COMMITTER_EMAIL", TOOL_IDENTITY.1.into()),
        ("GIT_AUTHOR_DATE", date.into()),
        ("GIT_COMMITTER_DATE", date.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_commits_and_errors() {
        let d = tempfile::tempdir().unwrap();
        let git = Git::new();
        git.run(d.path(), ["init", "-q"]).unwrap();
        std::fs::write(d.path().join("f"), "x").unwrap();
        git.run(d.path(), ["add", "f"]).unwrap();
        let a = git.commit(d.path(), "one [skip ci]", "@1700000000 +0000").unwrap();
        let tree = git.run(d.path(), ["rev-parse", "HEAD^{tree}"]).unwrap();
        let b = git.commit_tree(d.path(), &tree, &[], "one [skip ci]", "@1700000000 +0000").unwrap();
        assert_eq!(a, b, "same tree, message, identity and date give the same commit");
        let e = git.run(d.path(), ["rev-parse", "--verify", "nope"]).unwrap_err();
        assert!(e.to_string().contains("`git rev-parse --verify nope`"), "{e}");
        assert!(!git.check(d.path(), ["cat-file", "-e", "0000000000000000000000000000000000000001"]).unwrap());
    }

    #[test]
    fn askpass_answers_from_the_child_environment() {
        let git = Git::with_credentials(Credentials {
            username: "alice".into(),
            secret: SecretString::from("s3cret-value".to_string()),
        })
        .unwrap();
        let script = git.askpass.as_ref().unwrap().path().join("askpass.sh");
        let text = std::fs::read_to_string(&script).unwrap();
        assert!(!text.contains("s3cret-value"));
        let cmd = git.command(Path::new("."));
        let envs: Vec<_> = cmd.get_envs().collect();
        assert!(envs.iter().any(|(k, v)| *k == "PGO_GIT_PASSWORD" && v.unwrap() == "s3cret-value"));
        assert!(!cmd.get_args().any(|a| a.to_string_lossy().contains("s3cret-value")));
        // git runs the script itself; here `sh` reads it. Executing a file this process has just
        // written races with other test threads' fork+exec (the child holds the write descriptor
        // until its exec: ETXTBSY), so the test checks the mode and runs the text.
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&script).unwrap().permissions().mode() & 0o777, 0o700);
        let out = Command::new("sh")
            .arg(&script)
            .arg("Password for 'http://alice@127.0.0.1': ")
            .env("PGO_GIT_PASSWORD", "pw")
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"pw\n");
        let out = Command::new("sh")
            .arg(&script)
            .arg("Username for 'http://127.0.0.1': ")
            .env("PGO_GIT_USERNAME", "alice")
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"alice\n");
    }
}
