//! Gitea/GitHub Actions I/O: workflow commands and step outputs.
//!
//! Gitea Actions runs workflows with act, which implements GitHub's workflow commands; both set
//! `GITHUB_ACTIONS=true` and Gitea also sets `GITEA_ACTIONS=true`. Both runners read workflow
//! commands from stdout *and* stderr of a step (GitHub's runner feeds both streams to its command
//! parser; act, which Gitea's act_runner embeds, writes both through one line writer). We emit
//! them on **stderr**, next to our logs: stdout stays clean for `--json` (a user may redirect it to
//! a file), and a `::group::` cannot be reordered against the log lines it encloses, as it could be
//! across two pipes.
//!
//! Every workflow command of the process is written here, through [`command`], which escapes the
//! message and the property values as the runners require (a `%`, CR or LF in a message would
//! otherwise be decoded, or end the command and start another line the runner may read as a
//! command of its own):
//!
//! * [`mask`] — `::add-mask::VALUE` for every secret the process learns, before anything could
//!   print it;
//! * [`Group`] — `::group::NAME` … `::endgroup::` around a step;
//! * [`error_annotation`] — `::error file=F,line=L::MSG` for input problems;
//! * [`warn_problem`] — `::warning file=F,line=L::MSG` (and a log line) for input warnings;
//! * [`error_message`], [`warning_message`] — `::error::MSG`, `::warning::MSG` without a file;
//! * [`set_outputs`] — appends `key=value` (or a heredoc for multi-line values) to `$GITHUB_OUTPUT`;
//! * [`summary`] — appends Markdown to the job summary (`$GITHUB_STEP_SUMMARY`), with
//!   [`markdown_cell`] to put any text into a table cell.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Problem, terminal_safe};

/// True when running under Gitea or GitHub Actions (`GITEA_ACTIONS` or `GITHUB_ACTIONS` set to
/// a non-empty value other than `false`).
pub fn in_actions() -> bool {
    ["GITEA_ACTIONS", "GITHUB_ACTIONS"]
        .iter()
        .any(|v| std::env::var(v).map(|s| !s.is_empty() && s != "false").unwrap_or(false))
}

static MASKED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Secrets of at least this many characters are masked wherever they occur, also inside other
/// text; shorter ones only where they stand as a whole value (see [`redact`]).
///
/// The runners (GitHub's `SecretMasker`, act's log writer) replace every occurrence of an
/// `::add-mask::` value, so a one-letter password would turn every such letter of the job log
/// into `***` ("e***tension"), and the original project's default password `gitops` would turn
/// every "proxmox-gitops" into "proxmox-***". Short values are therefore not registered with the
/// runner at all; this process still masks them as whole values in everything it prints. From 8
/// characters on (tokens, tickets, generated passwords) a value inside other text is taken to be
/// the secret.
pub const MIN_MASK_ANYWHERE: usize = 8;

/// Registers a secret value so it is replaced by `***` in what this process prints and, under
/// Actions, in the job log.
///
/// Emits `::add-mask::` once per distinct value (and per line of a multi-line value) of at least
/// [`MIN_MASK_ANYWHERE`] characters when running under Actions; every value is remembered so
/// [`redact`] can scrub it. Empty values are ignored (masking "" would blank the whole log).
pub fn mask(secret: &str) {
    let mut guard = MASKED.lock().unwrap_or_else(|e| e.into_inner());
    let set = guard.get_or_insert_with(HashSet::new);
    for part in std::iter::once(secret).chain(secret.lines()) {
        let part = part.trim_end_matches('\r');
        if part.is_empty() || !set.insert(part.to_string()) {
            continue;
        }
        if in_actions() && !part.contains('\n') && part.chars().count() >= MIN_MASK_ANYWHERE {
            let mut out = std::io::stderr().lock();
            let _ = writeln!(out, "{}", command("add-mask", &[], part));
            let _ = out.flush();
        }
    }
}

/// Replaces every value registered with [`mask`] in `text` by `***`, longest first.
///
/// A value of at least [`MIN_MASK_ANYWHERE`] characters is replaced wherever it occurs; a
/// shorter one only where it stands as a value of its own, between whitespace, quotes, brackets
/// or `=:,;@/|` (see `replace_whole`): with the password `x`, `x`, `pw=x.` and `user:x@host` are
/// masked, `extension` and `x-ray` are not.
/// Used on text that comes from elsewhere (a tool's output, a remote log tail) before it is
/// logged or stored in an artifact, and on every message the CLI prints.
pub fn redact(text: &str) -> String {
    let guard = MASKED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(set) = guard.as_ref() else { return text.to_string() };
    let mut secrets: Vec<&String> = set.iter().collect();
    // Longest first, so a secret containing another is replaced whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_string();
    for s in secrets {
        if !out.contains(s.as_str()) {
            continue;
        }
        out = if s.chars().count() >= MIN_MASK_ANYWHERE {
            out.replace(s.as_str(), "***")
        } else {
            replace_whole(&out, s)
        };
    }
    out
}

/// The characters that end a value in text: whitespace, quotes, brackets and the separators of
/// `key=value`, `user:password@host`, lists and paths.
fn value_boundary(c: Option<char>) -> bool {
    c.is_none_or(|c| c.is_whitespace() || "'\"`()[]{}<>=:,;@/|".contains(c))
}

/// `text` with every occurrence of `value` that stands as a value of its own replaced by `***`:
/// a [`value_boundary`] right before it, and right after it (after any `.`, `!` or `?` that end
/// a sentence). With `value` = `e`, `e`, `(e)`, `pw=e.` and `user:e@host` are masked, `extension`,
/// `e.g.` and `e-mail` are not.
fn replace_whole(text: &str, value: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    let mut from = 0;
    while let Some(at) = text[from..].find(value).map(|i| i + from) {
        let end = at + value.len();
        let after = text[end..].trim_start_matches(['.', '!', '?']);
        if !value_boundary(text[..at].chars().next_back()) || !value_boundary(after.chars().next()) {
            // Part of a longer word: go on after its first character.
            from = at + text[at..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        out.push_str(&text[rest..at]);
        out.push_str("***");
        rest = end;
        from = end;
    }
    out.push_str(&text[rest..]);
    out
}

/// Escapes a workflow-command message: `%` → `%25`, CR → `%0D`, LF → `%0A` (the runner's
/// `escapeData`; the runners decode these three, so any text comes back unchanged).
pub fn escape_data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// Escapes a workflow-command property value: as [`escape_data`], and also `:` → `%3A` and
/// `,` → `%2C` (the runner's `escapeProperty`), which would end the value.
pub fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// The workflow command `::NAME key=value,…::MESSAGE` (without the trailing newline), with every
/// property value escaped by [`escape_property`] and the message by [`escape_data`]: the result
/// is always one line. `name` and the keys are ours (`error`, `file` …) and taken as they are.
/// The message is not redacted here (an `add-mask` message is the secret itself).
pub fn command(name: &str, props: &[(&str, &str)], message: &str) -> String {
    let props: Vec<String> = props.iter().map(|(k, v)| format!("{k}={}", escape_property(v))).collect();
    let props = if props.is_empty() { String::new() } else { format!(" {}", props.join(",")) };
    format!("::{name}{props}::{}", escape_data(message))
}

/// The `::error …::` workflow command for an input problem (without the trailing newline).
///
/// `file=` names the problem's file and `line=` its line when known; a JSON or dotenv key is put
/// in front of the message (control characters escaped: the runner renders ANSI sequences).
/// Problems that are not about a file in the repository (the
/// environment, a command-line option: see [`crate::error::Location::is_file`]) get no `file=`
/// and carry their source in the message instead. Secrets are redacted from the message.
pub fn error_command(problem: &Problem) -> String {
    annotation_command("error", problem)
}

/// The `::warning …::` workflow command for a problem that does not stop the run (a repeated
/// key in an env file …), with `file=`/`line=` like [`error_command`].
pub fn warning_command(problem: &Problem) -> String {
    annotation_command("warning", problem)
}

/// `::<kind> file=…,line=…::MSG` (see [`error_command`]).
fn annotation_command(kind: &str, problem: &Problem) -> String {
    let loc = &problem.location;
    let file = loc.file.to_string_lossy();
    let line = loc.line.map(|l| l.to_string());
    let mut props = Vec::new();
    let mut msg = String::new();
    if loc.is_file() {
        props.push(("file", file.as_ref()));
        if let Some(line) = &line {
            props.push(("line", line.as_str()));
        }
    } else {
        msg.push_str(&format!("{}: ", loc.file.display()));
    }
    if let Some(key) = &loc.key {
        msg.push_str(&format!("{key}: "));
    }
    msg.push_str(&problem.text());
    command(kind, &props, &terminal_safe(&redact(&msg)))
}

/// Prints [`error_command`] for an input problem on stderr when under Actions (no-op otherwise).
pub fn error_annotation(problem: &Problem) {
    if in_actions() {
        eprintln!("{}", error_command(problem));
    }
}

/// Re-roots a repository-relative problem file for Actions annotations: the runner resolves
/// `file=` against `$GITHUB_WORKSPACE`, so when `repo` (`--repo`) is a directory below the
/// workspace its relative path is put in front.
pub fn workspace_relative(problem: &Problem, repo: &Path) -> Problem {
    let mut p = problem.clone();
    if !p.location.is_file() || p.location.file.is_absolute() {
        return p;
    }
    let Some(ws) = std::env::var_os("GITHUB_WORKSPACE").and_then(|w| Path::new(&w).canonicalize().ok()) else {
        return p;
    };
    if let Ok(repo) = repo.canonicalize()
        && let Ok(rel) = repo.strip_prefix(&ws)
        && !rel.as_os_str().is_empty()
    {
        p.location.file = rel.join(&p.location.file);
    }
    p
}

/// Reports a warning about the user's input in the repository at `repo`: a `WARN` log line
/// naming the file and line, and under Actions also [`warning_command`] (an annotation on that
/// line, see [`workspace_relative`]) on stderr.
pub fn warn_problem(problem: &Problem, repo: &Path) {
    tracing::warn!("{}", redact(&problem.to_string()));
    if in_actions() {
        eprintln!("{}", warning_command(&workspace_relative(problem, repo)));
    }
}

/// Prints `::error::MSG` for an operational failure on stderr when under Actions (no-op
/// otherwise).
pub fn error_message(msg: &str) {
    if in_actions() {
        eprintln!("{}", command("error", &[], &terminal_safe(&redact(msg))));
    }
}

/// Prints `::warning::MSG` on stderr when under Actions (no-op otherwise), for a warning that is
/// not about a line of the input (`--no-snapshot` destroying data …). Log it too: this is only
/// the annotation.
pub fn warning_message(msg: &str) {
    if in_actions() {
        eprintln!("{}", command("warning", &[], &terminal_safe(&redact(msg))));
    }
}

/// Whether a [`Group`] is open in this process. Actions logs cannot nest groups (the first
/// `::endgroup::` closes the outer one) and containers handled in parallel would interleave
/// theirs, so only the outermost group is written.
static GROUP_OPEN: AtomicBool = AtomicBool::new(false);

/// A `::group::` … `::endgroup::` pair around a step's log (on stderr, with the log), closed on
/// drop. Outside Actions it prints nothing; inside, only the outermost group of the process is
/// written (a group started while another is open prints nothing: its lines stay in the outer
/// group).
pub struct Group {
    active: bool,
}

impl Group {
    /// Opens a group named `name`.
    pub fn start(name: &str) -> Self {
        Self::start_if(in_actions(), name)
    }

    fn start_if(in_actions: bool, name: &str) -> Self {
        let active = in_actions && GROUP_OPEN.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        if active {
            eprintln!("{}", command("group", &[], name));
        }
        Group { active }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.active && GROUP_OPEN.swap(false, Ordering::SeqCst) {
            eprintln!("{}", command("endgroup", &[], ""));
        }
    }
}

/// Closes the open [`Group`], if any, now (its drop then prints nothing): what a command prints
/// afterwards — its final table — shows in the log without unfolding the group.
pub fn end_group() {
    if GROUP_OPEN.swap(false, Ordering::SeqCst) {
        eprintln!("{}", command("endgroup", &[], ""));
    }
}

/// The outputs every per-container step writes (`configure`, `snapshot`, `destroy`, like
/// `provision`): `succeeded` and `failed` (comma-separated container names) and `<step>_dir`
/// (the directory holding the step's artifacts, e.g. `<artifacts>/configure`).
///
/// # Errors
/// As for [`set_outputs`].
pub fn set_step_outputs(step: &str, dir: &Path, results: &[(&str, bool)]) -> std::io::Result<()> {
    let names = |ok: bool| results.iter().filter(|(_, o)| *o == ok).map(|(n, _)| *n).collect::<Vec<_>>().join(",");
    set_outputs(&[
        ("succeeded", names(true)),
        ("failed", names(false)),
        (&format!("{step}_dir"), dir.display().to_string()),
    ])
}

/// Appends step outputs to the file named by `$GITHUB_OUTPUT`, when that variable is set.
///
/// Single-line values are written as `key=value`; multi-line values (e.g. JSON) use the heredoc
/// form `key<<DELIM` … `DELIM` with a random delimiter that does not occur in the value (GitHub
/// docs, "Setting an output parameter"; Gitea's act_runner reads the same file format).
///
/// # Errors
/// Fails when the file cannot be opened or written.
pub fn set_outputs(outputs: &[(&str, String)]) -> std::io::Result<()> {
    match std::env::var_os("GITHUB_OUTPUT") {
        Some(path) if !path.is_empty() => write_outputs(Path::new(&path), outputs),
        _ => Ok(()),
    }
}

/// Writes `outputs` to `path` in the `$GITHUB_OUTPUT` format (see [`set_outputs`]).
pub fn write_outputs(path: &Path, outputs: &[(&str, String)]) -> std::io::Result<()> {
    let mut text = String::new();
    for (key, value) in outputs {
        if value.contains('\n') || value.contains('\r') {
            let delim = loop {
                let d = format!("ghadelimiter_{:016x}", rand::random::<u64>());
                if !value.contains(&d) {
                    break d;
                }
            };
            text.push_str(&format!("{key}<<{delim}\n{value}\n{delim}\n"));
        } else {
            text.push_str(&format!("{key}={value}\n"));
        }
    }
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(text.as_bytes())
}

/// The repository the workflow runs in, `OWNER/REPO`: `$GITHUB_REPOSITORY` (set by Gitea's and
/// GitHub's runners); `None` outside Actions or when empty.
pub fn repository() -> Option<String> {
    std::env::var("GITHUB_REPOSITORY").ok().filter(|v| !v.trim().is_empty())
}

/// The workflow run this process is a step of: `$GITHUB_RUN_ID` (set by Gitea's and GitHub's
/// runners), without whitespace; `None` outside Actions or when empty.
pub fn run_id() -> Option<String> {
    let id: String = std::env::var("GITHUB_RUN_ID").ok()?.chars().filter(|c| !c.is_whitespace()).collect();
    (!id.is_empty()).then_some(id)
}

/// Appends `markdown` to the job summary: the file named by `$GITHUB_STEP_SUMMARY`, when that
/// variable is set and not empty (GitHub docs, "Adding a job summary"; Gitea's act_runner sets
/// the same variable). Outside Actions it does nothing. A newline is added when `markdown` does
/// not end with one, so blocks appended by several steps stay apart; nothing is escaped here
/// (put user or tool text into table cells with [`markdown_cell`]). Secrets registered with
/// [`mask`] are redacted. Returns the file written, `None` outside Actions.
///
/// # Errors
/// The file cannot be opened or written.
pub fn summary(markdown: &str) -> std::io::Result<Option<std::path::PathBuf>> {
    match std::env::var_os("GITHUB_STEP_SUMMARY") {
        Some(path) if !path.is_empty() => {
            let path = std::path::PathBuf::from(path);
            write_summary(&path, markdown).map(|()| Some(path))
        }
        _ => Ok(None),
    }
}

/// Appends `markdown` to the summary file `path` (see [`summary`]).
///
/// # Errors
/// The file cannot be opened or written.
pub fn write_summary(path: &Path, markdown: &str) -> std::io::Result<()> {
    let mut text = redact(markdown);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(text.as_bytes())
}

/// `text` made safe for one cell of a Markdown table: one line (CR/LF become spaces), `|` and
/// the backslash escaped with a backslash, `&`, `<` and `>` as HTML entities (the summary
/// renders HTML), other control characters escaped ([`crate::error::terminal_safe_line`]); an
/// empty text becomes a single space so the row keeps its columns.
pub fn markdown_cell(text: &str) -> String {
    let one_line = text.replace("\r\n", " ").replace(['\r', '\n'], " ");
    let safe = crate::error::terminal_safe_line(&one_line);
    let cell =
        safe.replace('\\', "\\\\").replace('|', "\\|").replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    if cell.is_empty() { " ".into() } else { cell }
}

#[cfg(test)]
mod tests {

    #[test]
    fn summary_is_appended_with_a_final_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("summary.md");
        write_summary(&p, "### one\n").unwrap();
        write_summary(&p, "| a | b |\n|---|---|\n| 1 | 2 |").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "### one\n| a | b |\n|---|---|\n| 1 | 2 |\n");
    }

    #[test]
    fn markdown_cells_stay_one_cell() {
        assert_eq!(markdown_cell("plain"), "plain");
        assert_eq!(markdown_cell("a|b"), "a\\|b");
        assert_eq!(markdown_cell("two\nlines\r\nhere"), "two lines here");
        assert_eq!(markdown_cell("<script>"), "&lt;script&gt;");
        assert_eq!(markdown_cell("a&lt;b"), "a&amp;lt;b");
        assert_eq!(markdown_cell("back\\slash"), "back\\\\slash");
        assert_eq!(markdown_cell(""), " ");
        assert!(!markdown_cell("\u{1b}[31mred").contains('\u{1b}'));
    }

    #[test]
    fn only_the_outermost_group_is_written() {
        let outer = Group::start_if(true, "deploy");
        assert!(outer.active);
        let inner = Group::start_if(true, "provision alpha");
        assert!(!inner.active, "a nested group must not be written");
        drop(inner);
        assert!(GROUP_OPEN.load(Ordering::SeqCst), "the outer group stays open after an inner one ends");
        drop(outer);
        assert!(!GROUP_OPEN.load(Ordering::SeqCst));
        let outside = Group::start_if(false, "resolve");
        assert!(!outside.active);
        assert!(!GROUP_OPEN.load(Ordering::SeqCst));
    }
    use super::*;

    #[test]
    fn outputs_single_and_multiline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out");
        write_outputs(&p, &[("a", "1".into()), ("json", "{\n \"x\": 1\n}".into())]).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("a=1"));
        let head = lines.next().unwrap();
        let delim = head.strip_prefix("json<<").unwrap();
        assert!(delim.starts_with("ghadelimiter_"));
        assert_eq!(lines.next(), Some("{"));
        assert_eq!(lines.next(), Some(" \"x\": 1"));
        assert_eq!(lines.next(), Some("}"));
        assert_eq!(lines.next(), Some(delim));
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn short_secrets_are_masked_as_whole_values_only() {
        // Values no other test registers (the registry is process-wide).
        mask("q");
        mask("Zq7");
        assert_eq!(
            redact("template without arch and eqxtension, q.g. this; password q, user:q@host, (q), pw=q. q_x qq q-x"),
            "template without arch and eqxtension, q.g. this; password ***, user:***@host, (***), pw=***. q_x qq q-x"
        );
        assert_eq!(redact("Zq7 Zq7x xZq7 'Zq7' Zq7!"), "*** Zq7x xZq7 '***' ***!");
        // Below 8 characters a word like the original project's default password `gitops` does
        // not mask every "proxmox-gitops"; from 8 on a value is masked inside other text too.
        mask("Gq7tops");
        mask("Gq7tops8");
        assert_eq!(redact("proxmox-Gq7tops: password Gq7tops"), "proxmox-Gq7tops: password ***");
        assert_eq!(redact("proxmox-Gq7tops8x"), "proxmox-***x");
        assert_eq!(replace_whole("äqä q", "q"), "äqä ***", "letters beyond ASCII are part of a word");
        assert_eq!(replace_whole("qqq", "q"), "qqq");
        assert_eq!(replace_whole("q", "q"), "***");
        assert_eq!(replace_whole("", "q"), "");
    }

    #[test]
    fn redact_replaces_longest_first() {
        mask("hunter2");
        mask("hunter2-extended");
        assert_eq!(redact("x hunter2-extended y hunter2"), "x *** y ***");
    }

    #[test]
    fn error_commands() {
        use crate::error::Location;
        let p = Problem::new(Location::line("libs/a,b/container.env", 3).with_key("ID"), "bad: 50%");
        assert_eq!(error_command(&p), "::error file=libs/a%2Cb/container.env,line=3::ID: bad: 50%25");
        let p = Problem::new(Location::file("globals.json").with_key("x"), "expected a string");
        assert_eq!(error_command(&p), "::error file=globals.json::x: expected a string");
        let p = Problem::new(Location::environment("PROXMOX_PORT"), "expected a TCP port");
        assert_eq!(error_command(&p), "::error::environment: PROXMOX_PORT: expected a TCP port");
        let p = Problem::new(Location::file("--stage"), "must be a DNS label");
        assert_eq!(error_command(&p), "::error::--stage: must be a DNS label");
        let p = Problem::new(Location::line("libs/app/container.env", 5).with_key("CORES"), "set twice");
        assert_eq!(warning_command(&p), "::warning file=libs/app/container.env,line=5::CORES: set twice");
    }

    #[test]
    fn escaping() {
        assert_eq!(escape_property("a:b,c%\n"), "a%3Ab%2Cc%25%0A");
        assert_eq!(escape_data("50%\r\n"), "50%25%0D%0A");
        // `%` first: an already escaped-looking text survives the runner's decoding unchanged.
        assert_eq!(escape_data("%0A%25"), "%250A%2525");
        assert_eq!(escape_data(":,"), ":,", "data keeps `:` and `,`");
        assert_eq!(escape_data(""), "");
    }

    /// The runner's decoding (`unescapeData` / `unescapeProperty`), to check round trips.
    fn unescape(s: &str, property: bool) -> String {
        let mut out = s.replace("%0D", "\r").replace("%0A", "\n");
        if property {
            out = out.replace("%3A", ":").replace("%2C", ",");
        }
        out.replace("%25", "%")
    }

    #[test]
    fn commands_are_one_line_and_decode_to_their_text() {
        let texts = ["plain", "50% done", "two\nlines", "cr\r\nlf", "::warning::injected", "%0A", "a:b,c", ""];
        for t in texts {
            let c = command("warning", &[("file", t), ("line", "3")], t);
            assert_eq!(c.lines().count().max(1), 1, "{c:?}");
            assert!(!c.contains('\r'), "{c:?}");
            let (head, msg) = c.strip_prefix("::warning ").unwrap().split_once("::").unwrap();
            assert_eq!(unescape(msg, false), t);
            let (file, line) = head.split_once(',').unwrap();
            assert_eq!(unescape(file.strip_prefix("file=").unwrap(), true), t);
            assert_eq!(line, "line=3");
        }
        assert_eq!(command("endgroup", &[], ""), "::endgroup::");
        assert_eq!(command("add-mask", &[], "p%25w"), "::add-mask::p%2525w");
        assert_eq!(command("error", &[("title", "a,b")], "x\ny"), "::error title=a%2Cb::x%0Ay");
    }

    #[test]
    fn annotations_show_escape_sequences_escaped() {
        use crate::error::Location;
        let p = Problem::new(Location::line("libs/app/container.env", 2).with_key("X"), "value `\u{1b}[31mred`");
        assert_eq!(error_command(&p), "::error file=libs/app/container.env,line=2::X: value `\\u{1b}[31mred`");
    }

    #[test]
    fn problem_messages_are_escaped() {
        use crate::error::Location;
        let p = Problem::new(Location::line("libs/app/container.env", 2).with_key("X"), "line1\n::error::forged");
        assert_eq!(warning_command(&p), "::warning file=libs/app/container.env,line=2::X: line1%0A::error::forged");
    }
}
