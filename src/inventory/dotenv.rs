//! A dotenv parser that never executes anything.
//!
//! `container.env` files are shell-flavoured `KEY=value` files (the seed sources them with bash).
//! We read them as data, with the shell's quoting rules where they are unambiguous, and we refuse
//! anything a shell would *evaluate* instead of silently producing a different value than bash
//! would:
//!
//! * blank lines and `# comment` lines are skipped; an `export ` prefix is accepted;
//! * `KEY=value` — unquoted; a ` #` (whitespace, then `#`) starts a trailing comment;
//!   whitespace after the value is trimmed; whitespace right after `=` or inside the value is an
//!   error (bash would run the rest as a command, or split it);
//! * `KEY='value'` — literal, no escapes (POSIX single quotes);
//! * `KEY="value"` — `\"`, `\\`, `\$` and `` \` `` are unescaped;
//! * after a closing quote only whitespace and a `# comment` may follow;
//! * `$(…)`, backticks, `$VAR` and `${VAR}` outside single quotes are input errors (a literal `$`
//!   goes in single quotes or as `\$` in double quotes);
//! * control characters (C0 but the tab, DEL, C1; ESC starts terminal escape sequences) are
//!   refused outside whole-line comments: values are printed to terminals later;
//! * keys match `[A-Za-z_][A-Za-z0-9_]*`; a key given twice in one file: the last one wins, as in
//!   bash, with a warning naming both lines ([`lint`], which also warns about a known key written
//!   in another case, e.g. `memory` for `MEMORY`).
//!
//! We keep our own parser (instead of e.g. `dotenvy`) because the contract is part of the product:
//! every key carries its line number for error messages, and substitutions are rejected rather
//! than performed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Location, Problem, Problems};

/// One `KEY=value` assignment and where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// The value after unquoting.
    pub value: String,
    /// The file it came from.
    pub file: PathBuf,
    /// 1-based line number.
    pub line: usize,
}

/// The parsed assignments of one file, in file order.
pub type Entries = Vec<Entry>;

/// Parses `text` (the contents of `file`, which is only used in problems).
///
/// # Errors
/// Every malformed line is reported as a [`crate::error::Problem`] naming `file` and the line.
pub fn parse(file: &Path, text: &str) -> Result<Entries, Problems> {
    let read = parse_lenient(file, text);
    read.problems.into_result().map(|_| read.entries)
}

/// What one file's lines gave, good and bad together (see [`parse_lenient`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lenient {
    /// The lines that parsed cleanly, in file order.
    pub entries: Entries,
    /// The lines that did not, as (1-based line, the key the line assigns when it can still be
    /// told: the text before `=` is a valid key), in file order.
    pub unreadable: Vec<(usize, Option<String>)>,
    /// False when the file as a whole could not be read (missing, not UTF-8): nothing is known
    /// of any of its keys.
    pub readable: bool,
    /// One problem per unreadable line (or one for the file).
    pub problems: Problems,
}

/// Parses `text` like [`parse`], but keeps the lines that parsed cleanly next to the problems of
/// the others, so that a caller can still check what was read (resolve's cross-checks of vmid,
/// IP and hostname) and report every problem of a run at once. A bad line does not taint the
/// good ones: each line is an assignment of its own, as in bash.
pub fn parse_lenient(file: &Path, text: &str) -> Lenient {
    let mut read = Lenient { readable: true, ..Lenient::default() };
    // A UTF-8 byte order mark (some Windows editors write one) is not part of the first key.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (idx, raw) in text.lines().enumerate() {
        let line_no = idx + 1;
        let parsed = match control_character(raw) {
            Some(msg) => Err(msg),
            None => parse_line(raw),
        };
        match parsed {
            Ok(None) => {}
            Ok(Some((key, value))) => read.entries.push(Entry { key, value, file: file.to_path_buf(), line: line_no }),
            Err(msg) => {
                read.problems.add(Location::line(file, line_no), msg);
                read.unreadable.push((line_no, assigned_key(raw)));
            }
        }
    }
    read
}

/// The key a line that failed to parse meant to assign: the text before its first `=` (after an
/// optional `export `) when that is a valid key, else `None`.
fn assigned_key(raw: &str) -> Option<String> {
    let line = raw.trim_start();
    let line = match line.strip_prefix("export") {
        Some(rest) if rest.starts_with([' ', '\t']) => rest.trim_start(),
        _ => line,
    };
    let (key, _) = line.split_once('=')?;
    is_key(key).then(|| key.to_string())
}

/// Reads and parses `path`; `display` is the path used in problems (usually repo-relative).
///
/// # Errors
/// An unreadable file or malformed lines, as problems.
pub fn parse_file(path: &Path, display: &Path) -> Result<Entries, Problems> {
    let read = parse_file_lenient(path, display);
    read.problems.into_result().map(|_| read.entries)
}

/// Reads and parses `path` like [`parse_file`], keeping what parsed (see [`parse_lenient`]); a
/// file that cannot be read or is not UTF-8 gives no entries and `readable: false`.
pub fn parse_file_lenient(path: &Path, display: &Path) -> Lenient {
    let unreadable = |location: Location, message: String| {
        let mut problems = Problems::new();
        problems.add(location, message);
        Lenient { problems, ..Lenient::default() }
    };
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => parse_lenient(display, &text),
            Err(e) => {
                let (line, column, byte) = first_invalid_byte(e.as_bytes(), e.utf8_error().valid_up_to());
                unreadable(
                    Location::line(display, line),
                    format!(
                        "file is not valid UTF-8 text: byte 0x{byte:02X} at column {column} is not UTF-8; save the file as UTF-8"
                    ),
                )
            }
        },
        Err(e) => unreadable(Location::file(display), format!("cannot read file: {e}")),
    }
}

/// Where the first byte that is not UTF-8 sits: `(line, column, byte)`, both 1-based, the
/// column counted in bytes; `at` is the offset of that byte (`Utf8Error::valid_up_to`).
fn first_invalid_byte(bytes: &[u8], at: usize) -> (usize, usize, u8) {
    let before = &bytes[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    (line, at - line_start + 1, bytes.get(at).copied().unwrap_or(0))
}

/// The problem with a line holding a control character, if it does: any C0 control but the
/// tab (ESC starts terminal escape sequences), DEL, or a C1 control (U+0080–U+009F, which some
/// terminals also read as escapes). Values end up in tables, logs and messages printed to a
/// terminal, so they are refused rather than carried along. Whole-line comments are never
/// printed and are not checked; a `\r` ending the line (a CRLF file) is not a problem; a tab is
/// a problem only where whitespace is (outside quotes, see [`parse_value`]).
fn control_character(raw: &str) -> Option<String> {
    if raw.trim_start().starts_with('#') {
        return None;
    }
    let raw = raw.strip_suffix('\r').unwrap_or(raw);
    let (column, c) = raw.chars().enumerate().find(|&(_, c)| c.is_control() && c != '\t')?;
    let name = match c {
        '\u{1b}' => " (ESC, starts a terminal escape sequence)",
        '\r' => " (carriage return)",
        '\0' => " (NUL)",
        '\u{7f}' => " (DEL)",
        _ => "",
    };
    Some(format!(
        "control character U+{:04X}{name} at column {}: env files hold printable text only (a tab is allowed inside \
         quotes)",
        c as u32,
        column + 1
    ))
}

/// Layers entry lists: later lists override earlier ones, key by key. The result maps each key to
/// the entry that won, so errors can point at the file and line the value came from.
pub fn layer<'a>(layers: impl IntoIterator<Item = &'a Entries>) -> BTreeMap<String, Entry> {
    let mut map = BTreeMap::new();
    for entries in layers {
        for e in entries {
            map.insert(e.key.clone(), e.clone());
        }
    }
    map
}

/// Warnings about one file's entries that do not stop the run (the values are still used):
///
/// * a key set more than once: the last one wins (as in bash), and the warning sits on that
///   line and names the earlier ones;
/// * a key that is one of `known` in another case (`memory` for `MEMORY`): keys are
///   case-sensitive, so it is not read as the known key but passed on as an extra one.
///
/// Each warning is a [`Problem`] at the file, line and key. Values are never quoted (an extra
/// key may hold a secret).
pub fn lint(entries: &[Entry], known: &[&str]) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut lines: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for e in entries {
        lines.entry(e.key.as_str()).or_default().push(e.line);
    }
    for e in entries {
        let seen = &lines[e.key.as_str()];
        if seen.len() > 1 && seen.last() == Some(&e.line) {
            let earlier: Vec<String> = seen[..seen.len() - 1].iter().map(usize::to_string).collect();
            out.push(Problem::new(
                Location::line(&e.file, e.line).with_key(&e.key),
                format!(
                    "`{}` is set more than once in this file (also on line{} {}); the last one (line {}) wins",
                    e.key,
                    if earlier.len() > 1 { "s" } else { "" },
                    earlier.join(", "),
                    e.line
                ),
            ));
        }
        if !known.contains(&e.key.as_str())
            && let Some(k) = known.iter().find(|k| k.eq_ignore_ascii_case(&e.key))
        {
            out.push(Problem::new(
                Location::line(&e.file, e.line).with_key(&e.key),
                format!(
                    "`{}` is not `{k}` (keys are case-sensitive): it is passed on as an extra key and `{k}` is \
                     not set by it; did you mean {k}?",
                    e.key
                ),
            ));
        }
    }
    out.sort_by_key(|p| p.location.line);
    out
}

fn is_key(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Parses one line: `Ok(None)` for blank/comment lines.
fn parse_line(raw: &str) -> Result<Option<(String, String)>, String> {
    let line = raw.trim_start();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let line = match line.strip_prefix("export") {
        Some(rest) if rest.starts_with([' ', '\t']) => rest.trim_start(),
        _ => line,
    };
    let Some(eq) = line.find('=') else {
        return Err(format!("expected KEY=value, found `{}`", raw.trim()));
    };
    let key = &line[..eq];
    if !is_key(key) {
        return Err(format!(
            "invalid key `{}`: expected letters, digits and `_`, not starting with a digit, \
             and no spaces around `=`",
            key.trim()
        ));
    }
    let value = parse_value(&line[eq + 1..])?;
    Ok(Some((key.to_string(), value)))
}

/// The message for a substitution a shell would evaluate; `found` is the whole reference as
/// written (`$HOME`, `${HOME}`, `$(id)`, `` `id` ``, see [`reference_at`]).
fn substitution_error(found: &str) -> String {
    let what = if found.starts_with('`') {
        if found.len() > 1 && found.ends_with('`') {
            format!("the backtick substitution {found}")
        } else {
            "a backtick (`)".to_string()
        }
    } else {
        format!("`{found}`")
    };
    format!(
        "{what} would be evaluated by a shell; substitutions are not supported in env files \
         (put a literal `$` or backtick in single quotes, or escape it with `\\` in double quotes)"
    )
}

/// Longest reference quoted in a message, in characters; longer ones end in `…`.
const MAX_REFERENCE: usize = 60;

/// The whole substitution starting at `chars[i]` (a `$` or a backtick) as written, for messages:
/// `$NAME`, `$1` / `$@` (one special character), `${…}` up to its `}`, `$(…)` up to its matching
/// `)`, `` `…` `` up to the next backtick; an unterminated one runs to the end of the value.
fn reference_at(chars: &[char], i: usize) -> String {
    let end = match (chars[i], chars.get(i + 1)) {
        ('`', _) => chars[i + 1..].iter().position(|&c| c == '`').map_or(chars.len(), |p| i + 1 + p + 1),
        ('$', Some('{')) => chars[i + 2..].iter().position(|&c| c == '}').map_or(chars.len(), |p| i + 2 + p + 1),
        ('$', Some('(')) => {
            let mut depth = 0usize;
            let mut end = chars.len();
            for (j, &c) in chars.iter().enumerate().skip(i + 1) {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        }
        ('$', Some(c)) if c.is_ascii_alphabetic() || *c == '_' => {
            i + 1 + chars[i + 1..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_').count()
        }
        _ => (i + 2).min(chars.len()),
    };
    let r: String = chars[i..end].iter().collect();
    if r.chars().count() > MAX_REFERENCE {
        format!("{}…", r.chars().take(MAX_REFERENCE).collect::<String>())
    } else {
        r
    }
}

/// Checks what follows a closing quote: whitespace, then optionally a comment.
fn trailing(rest: &str) -> Result<(), String> {
    let t = rest.trim_start();
    if t.is_empty() {
        return Ok(());
    }
    if t.starts_with('#') {
        if t.len() < rest.len() {
            return Ok(());
        }
        // `"a"#b` — bash would glue `#b` to the value; refuse the ambiguity.
        return Err("a comment after a closing quote needs a space before `#`".into());
    }
    Err(format!("unexpected text after the closing quote: `{t}`"))
}

fn check_dollar(chars: &[char], i: usize) -> Result<(), String> {
    match chars.get(i + 1) {
        Some(c) if "({@*#?$!-_".contains(*c) || c.is_ascii_alphanumeric() => {
            Err(substitution_error(&reference_at(chars, i)))
        }
        _ => Ok(()),
    }
}

fn parse_value(v: &str) -> Result<String, String> {
    let trimmed = v.trim_start_matches([' ', '\t']);
    if trimmed.len() < v.len() && !trimmed.is_empty() && !trimmed.starts_with('#') {
        // `KEY= value` assigns "" and runs `value` as a command in bash.
        return Err(format!(
            "space after `=`: a shell would run `{}` as a command; write KEY=value or quote the value",
            trimmed.trim_end()
        ));
    }
    let v = trimmed;
    let chars: Vec<char> = v.chars().collect();
    match chars.first() {
        Some('\'') => {
            let Some(end) = chars[1..].iter().position(|&c| c == '\'') else {
                return Err("unterminated single quote (multi-line values are not supported)".into());
            };
            let value: String = chars[1..1 + end].iter().collect();
            trailing(&chars[2 + end..].iter().collect::<String>())?;
            Ok(value)
        }
        Some('"') => {
            let mut out = String::new();
            let mut i = 1;
            while i < chars.len() {
                match chars[i] {
                    '\\' => {
                        match chars.get(i + 1) {
                            Some(c @ ('"' | '\\' | '$' | '`')) => out.push(*c),
                            Some(c) => {
                                out.push('\\');
                                out.push(*c);
                            }
                            None => return Err("unterminated double quote".into()),
                        }
                        i += 2;
                    }
                    '"' => {
                        trailing(&chars[i + 1..].iter().collect::<String>())?;
                        return Ok(out);
                    }
                    '`' => return Err(substitution_error(&reference_at(&chars, i))),
                    '$' => {
                        check_dollar(&chars, i)?;
                        out.push('$');
                        i += 1;
                    }
                    c => {
                        out.push(c);
                        i += 1;
                    }
                }
            }
            Err("unterminated double quote (multi-line values are not supported)".into())
        }
        _ => {
            let mut out = String::new();
            let mut i = 0;
            while i < chars.len() {
                let c = chars[i];
                match c {
                    '#' if i == 0 || chars[i - 1].is_whitespace() => break,
                    '`' => return Err(substitution_error(&reference_at(&chars, i))),
                    '$' => {
                        check_dollar(&chars, i)?;
                        out.push('$');
                    }
                    '\'' | '"' => {
                        return Err("quotes in the middle of a value are not supported; quote the whole value".into());
                    }
                    '\\' => return Err("backslash in an unquoted value; quote the value".into()),
                    ';' | '|' | '&' | '<' | '>' | '(' | ')' => {
                        return Err(format!(
                            "`{c}` in an unquoted value would be interpreted by a shell; quote the value"
                        ));
                    }
                    _ => out.push(c),
                }
                i += 1;
            }
            let trimmed = out.trim_end();
            if trimmed.contains([' ', '\t']) {
                return Err("unquoted value contains whitespace; quote the whole value".into());
            }
            Ok(trimmed.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Result<(String, String), String> {
        parse_line(line).map(|o| o.expect("an assignment"))
    }

    #[test]
    fn forms() {
        assert_eq!(one("A=1").unwrap(), ("A".into(), "1".into()));
        assert_eq!(one("export A=1").unwrap(), ("A".into(), "1".into()));
        assert_eq!(one("A=\"192.168.1.2\"").unwrap().1, "192.168.1.2");
        assert_eq!(one("A='x $y `z`'").unwrap().1, "x $y `z`");
        assert_eq!(one("A=\"a \\\"b\\\" \\$c\"  # note").unwrap().1, "a \"b\" $c");
        assert_eq!(one("A=val # comment").unwrap().1, "val");
        assert_eq!(one("A=val#notcomment").unwrap().1, "val#notcomment");
        assert_eq!(one("A=").unwrap().1, "");
        assert_eq!(one("A=\"\"").unwrap().1, "");
        assert_eq!(one("A=50$").unwrap().1, "50$");
        assert_eq!(one("A=   # nothing").unwrap().1, "");
        assert_eq!(one("A=\u{20}").unwrap().1, "");
        assert_eq!(parse_line("   # c").unwrap(), None);
        assert_eq!(parse_line("").unwrap(), None);
    }

    #[test]
    fn refusals() {
        for bad in [
            "A=$(id)",
            "A=\"$(id)\"",
            "A=`id`",
            "A=\"`id`\"",
            "A=$HOME",
            "A=\"${HOME}\"",
            "A=x y",
            "A=\"open",
            "A='open",
            "1A=x",
            "A B=x",
            "A =x",
            "just text",
            "A=\"x\"y",
            "A=a;b",
            "A= x",
            "A=\t'x'",
        ] {
            assert!(parse_line(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn substitutions_are_named_whole() {
        let named = |line: &str| {
            let e = parse_line(line).unwrap_err();
            let tail = " would be evaluated by a shell; substitutions are not supported in env files (put a literal \
                        `$` or backtick in single quotes, or escape it with `\\` in double quotes)";
            e.strip_suffix(tail).unwrap_or_else(|| panic!("{line}: {e}")).to_string()
        };
        assert_eq!(named("EXTRA=$HOME/x"), "`$HOME`");
        assert_eq!(named("EXTRA=\"a $HOME_DIR2.x\""), "`$HOME_DIR2`");
        assert_eq!(named("EXTRA=${HOME}/x"), "`${HOME}`");
        assert_eq!(named("EXTRA=\"${HOME:-/root}\""), "`${HOME:-/root}`");
        assert_eq!(named("EXTRA=\"$(id -u)\""), "`$(id -u)`");
        assert_eq!(named("EXTRA=\"$(cat $(ls))x\""), "`$(cat $(ls))`");
        assert_eq!(named("EXTRA=$1"), "`$1`");
        assert_eq!(named("EXTRA=$@"), "`$@`");
        assert_eq!(named("EXTRA=`id`"), "the backtick substitution `id`");
        assert_eq!(named("EXTRA=\"a `id -u` b\""), "the backtick substitution `id -u`");
        assert_eq!(named("EXTRA=\"`open\""), "a backtick (`)");
        assert_eq!(named("EXTRA=\"${open\""), "`${open\"`");
        let long = format!("EXTRA=\"$({})\"", "x".repeat(100));
        assert_eq!(named(&long), format!("`$({}…`", "x".repeat(58)));
    }

    #[test]
    fn lint_warns_about_repeated_keys_and_wrong_case() {
        let file = Path::new("libs/app/container.env");
        let text = "ID=120\nCORES=1\nmemory=512\nCORES=2\nEXTRA=x\nCORES=0\nMemory=1\n";
        let entries = parse(file, text).unwrap();
        let got: Vec<String> = lint(&entries, &["ID", "CORES", "MEMORY"]).iter().map(|p| p.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "libs/app/container.env:3 (memory): `memory` is not `MEMORY` (keys are case-sensitive): it is passed on \
                 as an extra key and `MEMORY` is not set by it; did you mean MEMORY?",
                "libs/app/container.env:6 (CORES): `CORES` is set more than once in this file (also on lines 2, 4); the \
                 last one (line 6) wins",
                "libs/app/container.env:7 (Memory): `Memory` is not `MEMORY` (keys are case-sensitive): it is passed on \
                 as an extra key and `MEMORY` is not set by it; did you mean MEMORY?",
            ]
        );
        // Last one wins all the same.
        assert_eq!(layer([&entries])["CORES"].value, "0");
        assert_eq!(lint(&parse(file, "ID=1\nCORES=2\nOTHER=x\n").unwrap(), &["ID", "CORES"]), vec![]);
    }

    #[test]
    fn control_characters_are_refused_with_their_column() {
        let file = Path::new("libs/x/container.env");
        let got = |text: &str| parse(file, text).unwrap_err().iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let tail = ": env files hold printable text only (a tab is allowed inside quotes)";
        let esc = "U+001B (ESC, starts a terminal escape sequence) at column 8";
        for (text, at) in [
            ("A=1\nNAME=\"x\u{1b}[2Jy\"\n", format!("2: control character {esc}")),
            ("A=a\u{7}b\n", "1: control character U+0007 at column 4".into()),
            ("A='\u{7f}'\n", "1: control character U+007F (DEL) at column 4".into()),
            ("A=\"\u{9b}31m\"\n", "1: control character U+009B at column 4".into()),
            ("A=x\ry\n", "1: control character U+000D (carriage return) at column 4".into()),
            ("A\0=x\n", "1: control character U+0000 (NUL) at column 2".into()),
        ] {
            assert_eq!(got(text), vec![format!("libs/x/container.env:{at}{tail}")], "{text:?}");
        }
        // Allowed: a tab inside quotes, CRLF line ends, anything in a whole-line comment.
        let ok = parse(file, "A=\"a\tb\"\r\nB='c'\r\n# \u{1b}[31m comment\n").unwrap();
        assert_eq!(ok.iter().map(|e| e.value.as_str()).collect::<Vec<_>>(), vec!["a\tb", "c"]);
    }

    #[test]
    fn invalid_utf8_names_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("container.env");
        std::fs::write(&path, b"ID=120\nIP=10.0.3.20\nNAME=caf\xe9\n").unwrap();
        let got = parse_file(&path, Path::new("libs/x/container.env")).unwrap_err();
        assert_eq!(
            got.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
            vec![
                "libs/x/container.env:3: file is not valid UTF-8 text: byte 0xE9 at column 9 is not UTF-8; save the \
                  file as UTF-8"
            ]
        );
    }

    #[test]
    fn lenient_keeps_the_good_lines_and_names_the_keys_of_the_bad_ones() {
        let read = parse_lenient(
            Path::new("f.env"),
            "MEMORY=2 GB\nID=120\nexport NAME=$(id)\nnot an assignment\nIP=10.0.3.2\nX=\u{1b}[31m\n",
        );
        assert_eq!(
            read.entries.iter().map(|e| (e.key.as_str(), e.value.as_str(), e.line)).collect::<Vec<_>>(),
            vec![("ID", "120", 2), ("IP", "10.0.3.2", 5)]
        );
        assert_eq!(
            read.unreadable,
            vec![(1, Some("MEMORY".into())), (3, Some("NAME".into())), (4, None), (6, Some("X".into()))]
        );
        assert!(read.readable);
        assert_eq!(read.problems.0.len(), 4);
        assert!(parse(Path::new("f.env"), "MEMORY=2 GB\nID=120\n").is_err(), "parse stays strict");
    }

    #[test]
    fn problems_carry_lines() {
        let err = parse(Path::new("libs/x/container.env"), "A=1\n\nB=$(rm -rf /)\nC='x\n").unwrap_err();
        let lines: Vec<_> = err.iter().map(|p| p.location.line.unwrap()).collect();
        assert_eq!(lines, vec![3, 4]);
        assert!(err.0[0].message.contains("$("), "{}", err.0[0].message);
        assert_eq!(err.0[0].location.file, Path::new("libs/x/container.env"));
    }
}
