//! Error types shared by every step, and which layer uses which kind of error.
//!
//! Two families of failure matter to the user and to the exit code:
//!
//! * **input problems** ([`Problems`]): something in the monorepo, a config file or the command
//!   line is wrong. Every problem names the file and, where known, the line or JSON key, so a run
//!   reports *all* of them at once and exits with code 2;
//! * **operational failures** (everything else, carried as [`anyhow::Error`] with context): the
//!   input was fine but an API, a host or a tool failed. Exit code 1.
//!
//! # Who returns what
//!
//! * **Clients and data modules return typed errors** (`thiserror`), so a caller can tell the
//!   cases apart and a test can match on them: [`crate::artifact::ArtifactError`],
//!   [`crate::gitea::GiteaError`], [`crate::pve::PveError`], [`crate::git::GitError`], the
//!   LXC, SSH, bundle and snapshot-store errors. Validators of names the user writes return one
//!   too ([`crate::gitea::VariableNameError`], [`crate::steps::rewrite::RepoNameError`],
//!   [`crate::steps::resolve::GlobalNameError`]); their message is what ends up in a
//!   [`Problem`]. Readers of the user's files ([`crate::settings`], the inventory) collect
//!   [`Problems`] instead of stopping at the first one.
//! * **Backends and steps add context** (`anyhow`): inside a step (configure's engines,
//!   publishing a repository, provisioning through a backend) a failure gets `.context(…)`
//!   naming the container, the API call or the file, and the step returns this module's
//!   [`Error`] at its boundary: [`Error::Input`] for problems, [`Error::Usage`], or
//!   [`Error::Failed`] wrapping the `anyhow` chain. A few small helpers below the steps
//!   (`keys`, `net`) return `anyhow` directly; their callers are steps.
//! * **The CLI** reports an [`Error`] at the edge (every problem as an Actions annotation, a
//!   failure with its whole context chain, secrets redacted) and exits with
//!   [`Error::exit_code`].
//!
//! # Hints
//!
//! A remedy the user can apply ("re-run with --allow-recreate", "run `pct unlock 101` on node
//! pve1") is data, a [`Hint`], never prose inside a message: a [`Problem`] carries one in
//! [`Problem::hint`], an `anyhow` failure carries [`Hinted`] (as its error or as a context) in
//! its chain ([`hints`] finds them). The text is made in one place, [`Hint::render`], for the
//! [`EntryPoint`] the user runs: the binary's options, `./local/run.sh`'s options, or the
//! workflow input or setting of a Gitea Actions run. The CLI sets the entry point once
//! ([`set_entry_point`], from [`crate::settings::entry_point`]); a hint is rendered for it
//! whenever the error is shown or written into an artifact.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};

mod hint;

pub use hint::{EntryPoint, Hint, Hinted, Step, TimeoutOption, WithoutSnapshot, entry_point, hints, set_entry_point};

/// Exit code for success.
pub const EXIT_OK: i32 = 0;
/// Exit code for an operational failure (API error, unreachable host, failed task …).
pub const EXIT_FAILURE: i32 = 1;
/// Exit code for invalid input or usage (bad `container.env`, unknown option …).
pub const EXIT_INPUT: i32 = 2;

/// The pseudo-file naming the process environment in a [`Location`] (the key is the variable).
pub const ENVIRONMENT: &str = "environment";

/// The pseudo-file naming a setting that is set nowhere in a [`Location`]: the key names every
/// place it can be given (see [`crate::settings::setting_names`]), e.g. `PROXMOX_TEMPLATE or
/// proxmox.template in local/config.json`.
pub const SETTINGS: &str = "settings";

/// Where in the user's input a problem sits: a file, and optionally a 1-based line or a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// Path of the file, as given to the user (relative to the repository root when possible).
    pub file: PathBuf,
    /// 1-based line number, when the problem is on one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The key (dotenv key or JSON path such as `proxmox.host`) the problem is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl Location {
    /// A location naming only a file.
    pub fn file(file: impl Into<PathBuf>) -> Self {
        Self { file: file.into(), line: None, key: None }
    }

    /// A location naming a file and a 1-based line.
    pub fn line(file: impl Into<PathBuf>, line: usize) -> Self {
        Self { file: file.into(), line: Some(line), key: None }
    }

    /// A problem with the environment variable `var` (file `environment`, key `var`).
    pub fn environment(var: impl Into<String>) -> Self {
        Self::file(ENVIRONMENT).with_key(var)
    }

    /// A setting that is not set anywhere (file [`SETTINGS`]); `names` says where it can be set,
    /// as [`crate::settings::setting_names`] gives it.
    pub fn setting(names: impl Into<String>) -> Self {
        Self::file(SETTINGS).with_key(names)
    }

    /// True when `file` names a file or directory of the user's repository, false for the
    /// pseudo-files [`ENVIRONMENT`], [`SETTINGS`] and command-line options (`--stage`, `--ref` …). Actions
    /// annotations (`::error file=…`) are only attached to real files.
    pub fn is_file(&self) -> bool {
        let f = self.file.to_string_lossy();
        !(f == ENVIRONMENT || f == SETTINGS || f.starts_with('-') || f.is_empty())
    }

    /// Adds the key the problem is about.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, " ({key})")?;
        }
        Ok(())
    }
}

/// One problem with the user's input: where, what was expected, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Where the problem is.
    pub location: Location,
    /// What is wrong and what was expected, as one sentence for a human (without the hint).
    pub message: String,
    /// The remedy, rendered after the message for the entry point ([`Problem::text`]). Not
    /// serialized: the JSON shape of a problem stays `{location, message}`.
    #[serde(skip)]
    pub hint: Option<Hint>,
}

impl Problem {
    /// Creates a problem at `location`.
    pub fn new(location: Location, message: impl Into<String>) -> Self {
        Self { location, message: message.into(), hint: None }
    }

    /// The problem with the remedy `hint`.
    pub fn with_hint(mut self, hint: Hint) -> Self {
        self.hint = Some(hint);
        self
    }

    /// The message and, when there is one, its hint rendered for the entry point
    /// ([`entry_point`]): `message; hint`.
    pub fn text(&self) -> String {
        match &self.hint {
            Some(h) => format!("{}; {}", self.message, h.render(entry_point())),
            None => self.message.clone(),
        }
    }
}

/// Shown with control characters escaped ([`terminal_safe`]): file names, keys and messages
/// quote the user's files.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&terminal_safe(&format!("{}: {}", self.location, self.text())))
    }
}

/// All input problems found in one run (never empty when returned as an error).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problems(pub Vec<Problem>);

impl Problems {
    /// An empty collection.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a problem.
    pub fn push(&mut self, problem: Problem) {
        self.0.push(problem);
    }

    /// Records a problem at `location` with `message`.
    pub fn add(&mut self, location: Location, message: impl Into<String>) {
        self.0.push(Problem::new(location, message));
    }

    /// Records a problem at `location` with `message` and the remedy `hint`.
    pub fn add_hinted(&mut self, location: Location, message: impl Into<String>, hint: Hint) {
        self.0.push(Problem::new(location, message).with_hint(hint));
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of problems.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Appends all problems of `other`.
    pub fn extend(&mut self, other: Problems) {
        self.0.extend(other.0);
    }

    /// `Ok(())` when empty, otherwise `Err(self)`; the problems are sorted by file and line so
    /// the report reads top to bottom.
    pub fn into_result(mut self) -> Result<(), Problems> {
        if self.0.is_empty() {
            Ok(())
        } else {
            self.0.sort_by(|a, b| (&a.location.file, a.location.line).cmp(&(&b.location.file, b.location.line)));
            Err(self)
        }
    }

    /// Iterates over the problems.
    pub fn iter(&self) -> impl Iterator<Item = &Problem> {
        self.0.iter()
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(f, "{n} problem{} in the input:", if n == 1 { "" } else { "s" })?;
        for p in &self.0 {
            writeln!(f, "  {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}

/// The error every step returns: either bad input (exit 2) or an operational failure (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input is invalid; every problem found is listed.
    #[error("{0}")]
    Input(Problems),
    /// A command-line usage error that clap could not catch (e.g. conflicting settings).
    #[error("{0}")]
    Usage(String),
    /// The step failed while acting (API, SSH, tool …), with context.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl Error {
    /// Exit code for this error: [`EXIT_INPUT`] for input and usage, [`EXIT_FAILURE`] otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Input(_) | Error::Usage(_) => EXIT_INPUT,
            Error::Failed(_) => EXIT_FAILURE,
        }
    }

    /// A single input problem as an error.
    pub fn input(location: Location, message: impl Into<String>) -> Self {
        let mut p = Problems::new();
        p.add(location, message);
        Error::Input(p)
    }
}

impl From<Problems> for Error {
    fn from(p: Problems) -> Self {
        Error::Input(p)
    }
}

/// Result alias for step functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Renders `path` relative to `root` when it lies below it, for messages users can click.
pub fn display_path(root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(root).map(Path::to_path_buf).unwrap_or_else(|_| path.to_path_buf())
}

/// True for a character that must not reach a terminal raw: C0 and C1 control characters and
/// DEL (they start escape sequences, move the cursor, ring the bell …) and the Unicode
/// bidirectional controls (which reorder what is shown, "Trojan Source").
fn unsafe_for_terminal(c: char, keep_newlines: bool) -> bool {
    (c.is_control() && !(keep_newlines && matches!(c, '\n' | '\t')))
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape_for_terminal(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    if !text.chars().any(|c| unsafe_for_terminal(c, keep_newlines)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_for_terminal(c, keep_newlines) {
            // `\n`, `\r`, `\t` by name, everything else as `\u{1b}`.
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` made safe to print on a terminal (or into an Actions log, which renders ANSI
/// sequences): every control character except newline and tab, and every Unicode bidirectional
/// control, is shown escaped as Rust writes it (`\u{1b}`, `\r`, `\u{202e}`), so an escape
/// sequence in a value from a user's file or in a remote system's error text is shown, never
/// executed. Text without such characters is returned unchanged (borrowed).
///
/// For error reports and log text, which may span lines; see [`terminal_safe_line`] for a value
/// that must stay on one line.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    escape_for_terminal(text, true)
}

/// As [`terminal_safe`], and newline and tab are escaped too (`\n`, `\t`): for one table cell or
/// one value on a line of its own.
pub fn terminal_safe_line(text: &str) -> Cow<'_, str> {
    escape_for_terminal(text, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_executed() {
        assert_eq!(terminal_safe("red \u{1b}[31mX\u{1b}[0m"), "red \\u{1b}[31mX\\u{1b}[0m");
        assert_eq!(terminal_safe("bell\u{7}del\u{7f}csi\u{9b}"), "bell\\u{7}del\\u{7f}csi\\u{9b}");
        assert_eq!(terminal_safe("over\rwrite"), "over\\rwrite");
        assert_eq!(terminal_safe("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(terminal_safe("two\nlines\tand a tab"), "two\nlines\tand a tab");
        assert_eq!(terminal_safe_line("two\nlines\tand a tab"), "two\\nlines\\tand a tab");
        assert_eq!(terminal_safe_line("\u{1b}]0;title\u{7}"), "\\u{1b}]0;title\\u{7}");
    }

    #[test]
    fn safe_text_is_borrowed_unchanged() {
        for t in ["", "plain", "ünïcödé ✓ 日本", "a: b (c) 50%", "x\ny"] {
            assert!(matches!(terminal_safe(t), Cow::Borrowed(s) if s == t), "{t:?}");
        }
        assert!(matches!(terminal_safe_line("ünïcödé ✓"), Cow::Borrowed(_)));
    }

    #[test]
    fn problems_display_escaped() {
        let p = Problem::new(Location::line("libs/a\u{1b}[2J/container.env", 3).with_key("X"), "bad `\u{1b}[31m`");
        let shown = p.to_string();
        assert!(!shown.contains('\u{1b}'), "{shown}");
        assert!(shown.contains("\\u{1b}[31m"), "{shown}");
        assert!(shown.contains("\\u{1b}[2J"), "{shown}");
    }
}
