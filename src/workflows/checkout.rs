//! The git checkout step: every `uses: actions/checkout@v4` step of a workflow, turned into a
//! `run:` step of `workflows/checkout.sh` (what the default checkout setting, `git`, installs).
//!
//! Why: Gitea resolves `uses: actions/checkout@v4` on its `DEFAULT_ACTIONS_URL`. A control plane
//! without the public actions host (`DEFAULT_ACTIONS_URL=self`, every offline install) fails
//! every job at once ("Unable to clone …/actions/checkout refs/heads/v4: repository not found"),
//! and the composite action at the monorepo's root cannot check the monorepo out before it is
//! checked out. A `run:` step needs nothing but git on the runner.
//!
//! The step's `with:` keys become the script's environment (`repository`, `ref`, `path`,
//! `submodules`, `token`, `fetch-depth` → `PGO_CHECKOUT_REPOSITORY`, `…_REF`, `…_PATH`,
//! `…_SUBMODULES`, `…_TOKEN`, `…_DEPTH`), their values kept as written (expressions included);
//! a step without `token` gets `${{ github.token }}`, actions/checkout's default. Any other
//! `with:` key is refused: the script would silently ignore it.

use std::path::Path;

use crate::error::{Error, Location, Result};

/// The checkout script, relative to the monorepo root.
pub const SCRIPT_PATH: &str = "workflows/checkout.sh";
/// The built-in checkout script.
pub const SCRIPT: &str = include_str!("../../workflows/checkout.sh");
/// The `uses:` value the shipped workflows and templates are written with, and that the git step
/// replaces.
pub const ACTIONS_CHECKOUT: &str = "actions/checkout@v4";

/// `with:` keys of actions/checkout that the script takes, with their environment names.
const INPUTS: [(&str, &str); 6] = [
    ("repository", "PGO_CHECKOUT_REPOSITORY"),
    ("ref", "PGO_CHECKOUT_REF"),
    ("path", "PGO_CHECKOUT_PATH"),
    ("submodules", "PGO_CHECKOUT_SUBMODULES"),
    ("token", "PGO_CHECKOUT_TOKEN"),
    ("fetch-depth", "PGO_CHECKOUT_DEPTH"),
];

/// Leading spaces of `line`.
fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// For a line that is a checkout step's `uses:` key: `(column of the step's keys, whether the
/// line opens the step with "- ")`.
fn checkout_uses(line: &str) -> Option<(usize, bool)> {
    let ind = indent_of(line);
    let rest = &line[ind..];
    let (rest, dash) = match rest.strip_prefix("- ") {
        Some(r) => (r.trim_start_matches(' '), true),
        None => (rest, false),
    };
    let key_col = line.len() - rest.len();
    let value = rest.strip_prefix("uses:")?.trim();
    let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
    (value == ACTIONS_CHECKOUT).then_some((key_col, dash))
}

/// `text` (the workflow file `name`) with every `uses: actions/checkout@v4` step (its `uses:`
/// line and its `with:` block) replaced by a `run:` step of `script` (see the module docs),
/// without its comment lines and blank lines (the script must therefore hold no here-document).
/// Other keys of the step (`name`, `id`, `if` …) stay as they are.
///
/// # Errors
/// [`Error::Input`] naming `name` and the line for a `with:` key the script does not take, and
/// naming [`SCRIPT_PATH`] when `script` holds `${{` (Actions would evaluate it).
pub fn git_steps(name: &Path, text: &str, script: &str) -> Result<String> {
    if script.contains("${{") {
        return Err(Error::input(
            Location::file(SCRIPT_PATH),
            "the checkout script must not contain `${{` (Actions evaluates it even in a run: block)",
        ));
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut out = String::with_capacity(text.len() + 4 * script.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end_matches(['\n', '\r']);
        let Some((col, dash)) = checkout_uses(line) else {
            out.push_str(lines[i]);
            i += 1;
            continue;
        };
        i += 1;
        // The `with:` block right after the `uses:` line, at the step's key column.
        let mut env: Vec<(&str, String)> = Vec::new();
        let mut j = i;
        // Other keys of the step between `uses:` and `with:` (or after it) are kept.
        let mut kept: Vec<&str> = Vec::new();
        while j < lines.len() {
            let l = lines[j].trim_end_matches(['\n', '\r']);
            if l.trim().is_empty() || indent_of(l) < col || (indent_of(l) == col && l[col..].starts_with("- ")) {
                break;
            }
            if indent_of(l) == col && l[col..].trim_end() == "with:" {
                j += 1;
                while j < lines.len() {
                    let w = lines[j].trim_end_matches(['\n', '\r']);
                    if w.trim().is_empty() || indent_of(w) <= col {
                        break;
                    }
                    let (key, value) = w.trim().split_once(':').unwrap_or((w.trim(), ""));
                    let Some((_, var)) = INPUTS.iter().find(|(k, _)| *k == key) else {
                        return Err(Error::input(
                            Location::line(name, j + 1),
                            format!(
                                "the git checkout step does not take `{key}` (it takes {}); set \
                                 PROXMOX_GITOPS_CHECKOUT to an action that does, e.g. actions/checkout@v4",
                                INPUTS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
                            ),
                        ));
                    };
                    env.push((var, value.trim().to_string()));
                    j += 1;
                }
                continue;
            }
            kept.push(lines[j]);
            j += 1;
        }
        i = j;
        if !env.iter().any(|(k, _)| *k == "PGO_CHECKOUT_TOKEN") {
            env.push(("PGO_CHECKOUT_TOKEN", "${{ github.token }}".into()));
        }
        let pad = " ".repeat(col);
        let first = if dash { format!("{}- ", " ".repeat(col - 2)) } else { pad.clone() };
        out.push_str(&format!("{first}shell: bash\n"));
        out.push_str(&format!("{pad}env:\n"));
        for (k, v) in &env {
            out.push_str(&format!("{pad}  {k}: {v}\n"));
        }
        for k in kept {
            out.push_str(k);
        }
        out.push_str(&format!("{pad}run: |\n"));
        for s in embedded(script).lines() {
            out.push_str(&format!("{pad}  {s}\n"));
        }
    }
    Ok(out)
}

/// The script as [`git_steps`] embeds it: comment and blank lines dropped, a line naming
/// [`SCRIPT_PATH`] first.
pub fn embedded(script: &str) -> String {
    let mut out = format!("# {SCRIPT_PATH} of the monorepo (its comments say what it does)\n");
    for s in script.lines().filter(|s| !s.trim_start().starts_with('#') && !s.trim().is_empty()) {
        out.push_str(s);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP: &str = "\
jobs:
  a:
    steps:
      - name: Check out
        uses: actions/checkout@v4
        with:
          submodules: recursive
          token: ${{ secrets.GITEA_TOKEN || github.token }}
      - uses: ./
";

    #[test]
    fn a_checkout_step_becomes_a_run_step_with_its_inputs_in_env() {
        let out = git_steps(Path::new("w.yml"), STEP, "# about\nset -e\n\n  # more\necho hi\n").unwrap();
        assert_eq!(
            out,
            "\
jobs:
  a:
    steps:
      - name: Check out
        shell: bash
        env:
          PGO_CHECKOUT_SUBMODULES: recursive
          PGO_CHECKOUT_TOKEN: ${{ secrets.GITEA_TOKEN || github.token }}
        run: |
          # workflows/checkout.sh of the monorepo (its comments say what it does)
          set -e
          echo hi
      - uses: ./
"
        );
    }

    #[test]
    fn a_bare_step_gets_the_jobs_token_and_keeps_its_other_keys() {
        let text = "steps:\n  - uses: \"actions/checkout@v4\"\n    id: co\n  - run: x\n";
        let out = git_steps(Path::new("w.yml"), text, "echo\n").unwrap();
        assert_eq!(
            out,
            "steps:\n  - shell: bash\n    env:\n      PGO_CHECKOUT_TOKEN: ${{ github.token }}\n    id: co\n    \
             run: |\n      # workflows/checkout.sh of the monorepo (its comments say what it does)\n      echo\n  - run: x\n"
        );
        // Other actions are left alone.
        let other = "steps:\n  - uses: actions/checkout@v3\n";
        assert_eq!(git_steps(Path::new("w.yml"), other, "echo\n").unwrap(), other);
    }

    #[test]
    fn an_input_the_script_does_not_take_is_refused_with_its_line() {
        let text = "steps:\n  - uses: actions/checkout@v4\n    with:\n      lfs: true\n";
        let e = git_steps(Path::new("w.yml"), text, "echo\n").unwrap_err().to_string();
        assert!(e.contains("w.yml:4") && e.contains("`lfs`") && e.contains("PROXMOX_GITOPS_CHECKOUT"), "{e}");
        let e = git_steps(Path::new("w.yml"), STEP, "echo ${{ x }}\n").unwrap_err().to_string();
        assert!(e.contains(SCRIPT_PATH), "{e}");
    }

    #[test]
    fn the_shipped_script_has_no_expression() {
        assert!(!SCRIPT.contains("${{"));
    }
}
