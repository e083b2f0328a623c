//! Tasks: `tasks/<name>/` (a plain directory or a submodule) holding one script, run by its
//! own workflow (`.gitea/workflows/task.yml`, rendered by `publish`).
//!
//! Which file is the script (the first rule that matches, see [`select_script`]):
//!
//! 1. `default.*` (or `default`),
//! 2. `main.*` (or `main`),
//! 3. the only other script,
//!
//! counting only files that are scripts: starting with `#!`, with an execute bit, or ending in
//! `.sh`, `.bash`, `.rb`, `.py` or `.pl` (a `default.md` is documentation, not the script).
//!
//! Two files matching the first rule that matches (`default.sh` and `default.rb`), or several
//! scripts and neither name, are an input error naming the directory and the candidates.
//!
//! The script may carry a cron line, `# ! cron '<five fields>'` (the seed's form): the task is
//! then **scheduled** (`on.schedule` of its workflow); without one it runs on workflow dispatch
//! and on a push to its repository's `main`. An invalid expression is an input error at its
//! file:line. The line lives here, below the steps, because `resolve` (the inventory) and
//! `rewrite` (which renders each task repository's workflow) both read tasks.
//!
//! A `# ! ref release` line makes the task act on what is deployed: its workflow checks the
//! monorepo out at `release` instead of `main` (the default). `health` and `update` do: the
//! containers they check and upgrade are those `release` describes, so a lib merged to `main` but
//! not released yet is not reported missing (as `drift` compares with `release`).

use std::path::{Path, PathBuf};

use crate::error::{Location, Problems};

use super::Task;

/// Extensions that make a file a script without a shebang or an execute bit.
pub const SCRIPT_EXTENSIONS: &[&str] = &["sh", "bash", "rb", "py", "pl"];

/// Finds the `# ! cron '<expr>'` line in a script's text: `(line, expr)`, the line 1-based.
/// The expression may be in single or double quotes or bare; it is not validated here (see
/// [`parse_cron`]).
pub fn find_cron(text: &str) -> Option<(usize, String)> {
    find_directive(text, "cron")
}

/// Finds the `# ! ref <branch>` line in a script's text: `(line, branch)`, the line 1-based (see
/// the module docs; checked by [`read_task`]).
pub fn find_ref(text: &str) -> Option<(usize, String)> {
    find_directive(text, "ref")
}

/// The refs a task may act on (`# ! ref`): the branch model's `main` and `release`.
pub const TASK_REFS: &[&str] = &["main", "release"];

/// The first `# ! <word> <value>` line of `text`: `(line, value)`, the value unquoted.
fn find_directive(text: &str, word: &str) -> Option<(usize, String)> {
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix('#') else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix('!') else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix(word) else {
            continue;
        };
        // The word ends there (`# ! refs` is not `# ! ref`).
        if !rest.starts_with(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
            continue;
        }
        let rest = rest.trim();
        let expr = rest
            .strip_prefix('\'')
            .and_then(|r| r.strip_suffix('\''))
            .or_else(|| rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
            .unwrap_or(rest);
        return Some((i + 1, expr.trim().to_string()));
    }
    None
}

/// Checks a cron expression: five fields (minute hour day-of-month month day-of-week), as
/// Gitea's scheduler and GitHub's `on.schedule` take them (parsed with croner, seconds refused).
///
/// # Errors
/// The parser's message with the expected form.
pub fn parse_cron(expr: &str) -> Result<(), String> {
    let fields = expr.split_whitespace().count();
    if fields != 5 {
        return Err(format!(
            "invalid cron expression `{expr}`: {fields} field(s), expected five (minute hour day-of-month month \
             day-of-week, e.g. '0 3 * * *'; Gitea takes no `@daily`-style names)"
        ));
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .build()
        .parse(expr)
        .map(|_| ())
        .map_err(|e| format!("invalid cron expression `{expr}`: {e}"))
}

/// True when the file `path` is a script by its content, mode or extension (rule 3 of the
/// module docs).
fn is_script(path: &Path) -> bool {
    let ext_ok = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| SCRIPT_EXTENSIONS.iter().any(|s| s.eq_ignore_ascii_case(e)));
    if ext_ok {
        return true;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o111 != 0) {
            return true;
        }
    }
    let mut head = [0u8; 2];
    std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)).is_ok() && &head == b"#!"
}

/// True when `file_name` is `stem` or `stem.<extension>`.
fn named(file_name: &str, stem: &str) -> bool {
    file_name == stem || file_name.strip_prefix(stem).is_some_and(|r| r.len() > 1 && r.starts_with('.'))
}

/// Chooses the script of the task directory `abs` (see the module docs) and returns its file
/// name. Only regular files directly in the directory count; hidden files never do.
///
/// # Errors
/// The problem's message: no script, or several candidates (named, sorted).
pub fn select_script(abs: &Path) -> Result<String, String> {
    let mut files: Vec<String> = std::fs::read_dir(abs)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let list = |v: &[&String]| v.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    for stem in ["default", "main"] {
        let hits: Vec<&String> = files.iter().filter(|n| named(n, stem) && is_script(&abs.join(n))).collect();
        match hits.as_slice() {
            [] => continue,
            [one] => return Ok((*one).clone()),
            many => {
                return Err(format!(
                    "several `{stem}.*` scripts ({}): keep one, the task runs exactly one script",
                    list(many)
                ));
            }
        }
    }
    let scripts: Vec<&String> = files.iter().filter(|n| is_script(&abs.join(n))).collect();
    match scripts.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(format!(
            "no script: expected `default.*`, `main.*` or a single script (a file starting with `#!`, \
             executable, or ending in {})",
            SCRIPT_EXTENSIONS.iter().map(|e| format!(".{e}")).collect::<Vec<_>>().join(", ")
        )),
        many => Err(format!(
            "several scripts ({}) and none named `default.*` or `main.*`: name the one to run `default.<ext>`",
            list(many)
        )),
    }
}

/// Reads the task at `rel` (`tasks/<name>`, relative to `root`): its script and cron line.
/// Problems (no script, several candidates, an invalid cron expression) are added to
/// `problems` with the directory or the script's file:line, and `None` is returned.
pub fn read_task(root: &Path, rel: &Path, problems: &mut Problems) -> Option<Task> {
    let name = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let file = match select_script(&root.join(rel)) {
        Ok(f) => f,
        Err(m) => {
            problems.add(Location::file(rel), m);
            return None;
        }
    };
    let script: PathBuf = rel.join(&file);
    let text = std::fs::read(root.join(&script)).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    if let Some((first, _)) = find_cron(&text) {
        let rest: String = text.lines().skip(first).collect::<Vec<_>>().join("\n");
        if let Some((second, _)) = find_cron(&rest) {
            problems.add(
                Location::line(&script, first + second),
                format!("a second cron line (the first is line {first}): a task has one schedule; keep one line"),
            );
            return None;
        }
    }
    let cron = match find_cron(&text) {
        None => None,
        Some((line, expr)) => match parse_cron(&expr) {
            Ok(()) => Some(expr),
            Err(m) => {
                problems.add(Location::line(&script, line), m);
                return None;
            }
        },
    };
    let monorepo_ref = match find_ref(&text) {
        None => None,
        Some((_, r)) if TASK_REFS.contains(&r.as_str()) => Some(r),
        Some((line, r)) => {
            problems.add(
                Location::line(&script, line),
                format!(
                    "`# ! ref {r}`: expected one of {} (the monorepo's branch the task acts on)",
                    TASK_REFS.join(", ")
                ),
            );
            return None;
        }
    };
    Some(Task { name, dir: rel.to_path_buf(), script, cron, monorepo_ref })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(files: &[(&str, &str, u32)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, text, mode) in files {
            let p = d.path().join(name);
            std::fs::write(&p, text).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
            }
        }
        d
    }

    #[test]
    fn cron_lines() {
        assert_eq!(find_cron("#!/bin/bash\n# ! cron '0 3 * * *'\necho"), Some((2, "0 3 * * *".into())));
        assert_eq!(find_cron("#! cron \"*/5 * * * *\""), Some((1, "*/5 * * * *".into())));
        assert_eq!(find_cron("#!/bin/bash\necho"), None);
        assert_eq!(find_ref("#!/bin/sh\n# ! cron '0 3 * * *'\n# ! ref release\n"), Some((3, "release".into())));
        assert_eq!(find_ref("#!/bin/sh\n# ! refs x\n"), None);
        assert!(parse_cron("0 */3 * * *").is_ok());
        assert!(parse_cron("0 0 3 * * *").unwrap_err().starts_with("invalid cron expression `0 0 3 * * *`"));
    }

    #[test]
    fn script_selection_rules() {
        let pick = |files: &[(&str, &str, u32)]| select_script(dir(files).path());
        // default.* wins over main.* and over other scripts
        assert_eq!(pick(&[("default.rb", "puts 1\n", 0o644), ("main.sh", "", 0o755)]), Ok("default.rb".into()));
        assert_eq!(pick(&[("main.py", "", 0o644), ("other.sh", "", 0o755)]), Ok("main.py".into()));
        assert_eq!(pick(&[("default", "#!/bin/sh\n", 0o644)]), Ok("default".into()));
        // the only script: by shebang, execute bit or extension; other files do not count
        assert_eq!(pick(&[("README.md", "x", 0o644), ("run", "#!/bin/sh\n", 0o644)]), Ok("run".into()));
        assert_eq!(pick(&[("README.md", "x", 0o644), ("job", "echo\n", 0o755)]), Ok("job".into()));
        assert_eq!(pick(&[("notes.txt", "x", 0o644), ("backup.sh", "echo\n", 0o644)]), Ok("backup.sh".into()));
        assert_eq!(pick(&[(".hidden.sh", "#!/bin/sh\n", 0o755), ("x.sh", "", 0o644)]), Ok("x.sh".into()));
        // not `defaults.sh`
        assert_eq!(pick(&[("defaults.txt", "x", 0o644), ("go.sh", "", 0o644)]), Ok("go.sh".into()));
        assert_eq!(
            pick(&[("a.sh", "", 0o644), ("b.py", "", 0o644), ("c.txt", "", 0o644)]),
            Err("several scripts (`a.sh`, `b.py`) and none named `default.*` or `main.*`: name the one to run `default.<ext>`".into())
        );
        assert_eq!(
            pick(&[("default.rb", "", 0o644), ("default.sh", "", 0o644)]),
            Err("several `default.*` scripts (`default.rb`, `default.sh`): keep one, the task runs exactly one script"
                .into())
        );
        assert!(pick(&[("notes.txt", "x", 0o644)]).unwrap_err().starts_with("no script: expected `default.*`"));
        assert!(pick(&[]).unwrap_err().starts_with("no script"));
    }

    #[test]
    fn read_task_with_and_without_a_cron_line() {
        let root = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = root.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("tasks/deploy/default.rb", "# deploy the merged release pull requests\nputs 'x'\n");
        write("tasks/health/default.sh", "#!/bin/sh\n# ! cron '0 */3 * * *'\nexec \"$PROXMOX_GITOPS\" health\n");
        write("tasks/bad/run.sh", "#!/bin/sh\n# ! cron '61 * * * *'\n");
        let mut problems = Problems::new();
        assert_eq!(
            read_task(root.path(), Path::new("tasks/deploy"), &mut problems),
            Some(Task {
                name: "deploy".into(),
                dir: "tasks/deploy".into(),
                script: "tasks/deploy/default.rb".into(),
                cron: None,
                monorepo_ref: None,
            })
        );
        let health = read_task(root.path(), Path::new("tasks/health"), &mut problems).unwrap();
        assert_eq!(health.cron.as_deref(), Some("0 */3 * * *"));
        assert!(health.scheduled());
        assert!(problems.is_empty());
        assert_eq!(read_task(root.path(), Path::new("tasks/bad"), &mut problems), None);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems.0[0].location, Location::line("tasks/bad/run.sh", 2));

        // `# ! ref release`: the task acts on what is deployed; another branch is refused.
        write(
            "tasks/update/default.sh",
            "#!/bin/sh
# ! cron '0 4 * * 0'
# ! ref release
",
        );
        let update = read_task(root.path(), Path::new("tasks/update"), &mut problems).unwrap();
        assert_eq!(update.monorepo_ref.as_deref(), Some("release"));
        write(
            "tasks/odd/default.sh",
            "#!/bin/sh
# ! ref feature/x
",
        );
        let mut problems = Problems::new();
        assert_eq!(read_task(root.path(), Path::new("tasks/odd"), &mut problems), None);
        assert_eq!(problems.0[0].location, Location::line("tasks/odd/default.sh", 2));
        assert!(problems.0[0].message.contains("expected one of main, release"), "{}", problems.0[0].message);
    }

    #[test]
    fn five_fields_one_cron_line_and_only_scripts_are_default() {
        assert!(parse_cron("@daily").unwrap_err().contains("1 field(s), expected five"));
        assert!(parse_cron("0 3 * *").unwrap_err().contains("4 field(s)"));
        let e = parse_cron("61 2 * * *").unwrap_err();
        assert!(e.contains("61 2 * * *") && !e.contains("field(s)"), "{e}");

        let d = dir(&[("default.md", "# docs\n", 0o644), ("run.sh", "echo\n", 0o644)]);
        assert_eq!(select_script(d.path()).unwrap(), "run.sh");

        let root = tempfile::tempdir().unwrap();
        let t = root.path().join("tasks/x");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("default.sh"), "#!/bin/sh\n# ! cron '0 1 * * *'\necho\n# ! cron '0 2 * * *'\n").unwrap();
        let mut p = Problems::new();
        assert!(read_task(root.path(), Path::new("tasks/x"), &mut p).is_none());
        assert_eq!(p.0[0].location.line, Some(4));
        assert!(p.0[0].message.contains("second cron line (the first is line 2)"), "{}", p.0[0].message);
    }
}
