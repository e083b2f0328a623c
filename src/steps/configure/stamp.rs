//! The configure stamp: what lets a re-run skip the engines of a container that nothing changed.
//!
//! After a successful configure, a stamp is written **inside the container**
//! ([`STAMP_PATH`], root only, mode 0600, written to a temporary file and renamed): the SHA-256
//! of the run's inputs ([`inputs_digest`]), the SHA-256 of the container's state right after the
//! run (the [`STATE_SCRIPT`] digest), our version, and the lib's `$PGO_OUTPUT` text (base64) so
//! that a skipped run still reports the lib's outputs.
//!
//! The next configure of the container computes the inputs digest again and, in one SSH round
//! trip ([`PROBE_SCRIPT`]), has the container recompute its state digest and print the stamp.
//! Both equal (and the same version) → the base role and the lib's engine are skipped
//! ([`compare`]); anything else, including a stamp that is missing or unreadable, → the full run.
//! The inputs digest covers the contract, `PASSWORD` included, so it only ever lives in the
//! container's root-only file and in this process: never in artifacts, logs or arguments.

use std::path::Path;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::ssh::TarUpload;

/// The stamp inside every configured container (root only, 0600). Not under `/etc`: the state
/// digest covers `/etc`, and writing the stamp must not change what it records.
pub const STAMP_PATH: &str = "/var/lib/proxmox-gitops/configured";

/// The stamp's format; a stamp of another format is not compared (the full run).
pub const STAMP_FORMAT: &str = "1";

/// Shell text that sets `s` to the SHA-256 of the container's state as lines, sorted for a
/// stable digest: every installed package (`dpkg-query`: name, version, status), every entry of
/// `/etc` on its file system (path, type, size, mode, owner, group, mtime with fractions, symlink
/// target: enabled units are the symlinks under `/etc/systemd/system`), the failed units and the
/// running services (without the per-login `user@UID` and `user-runtime-dir@UID` services, which
/// come and go with SSH sessions). About 40 ms on a small Debian container (`systemctl
/// list-unit-files` is left out: it alone takes a second).
///
/// A container that cannot list all of it — no `dpkg-query`, no GNU `find`, no `sha256sum`, or
/// systemd not running (`/run/systemd/system`) — gets `s=unavailable` instead: a listing that
/// silently held an error message in place of the packages or services would read as
/// "unchanged" however they changed. Such a container is always configured fully.
macro_rules! state_digest {
    () => {
        concat!(
            "if command -v dpkg-query >/dev/null && command -v systemctl >/dev/null",
            " && command -v sha256sum >/dev/null && [ -d /run/systemd/system ]",
            " && find /etc -maxdepth 0 -printf '' >/dev/null 2>&1; then\n",
            "s=$({\n",
            "  echo '## packages'; dpkg-query -W -f '${Package} ${Version} ${Status}\\n' 2>&1 | LC_ALL=C sort\n",
            "  echo '## etc'; find /etc -xdev -printf '%p %y %s %m %U %G %T@ %l\\n' 2>&1 | LC_ALL=C sort\n",
            "  echo '## failed'; systemctl list-units --all --state=failed --no-legend --no-pager --plain 2>&1",
            " | LC_ALL=C sort\n",
            "  echo '## running'; systemctl list-units --type=service --state=running --no-legend --no-pager",
            " --plain 2>&1 | grep -v -e '^user@' -e '^user-runtime-dir@' | LC_ALL=C sort\n",
            "} | sha256sum | cut -d ' ' -f 1)\n",
            "else s=unavailable; fi\n",
        )
    };
}

/// The state digest alone (run as root with `sh -c`): prints `state=<hex>`.
pub const STATE_SCRIPT: &str = concat!(state_digest!(), "printf 'state=%s\\n' \"$s\"\n");

/// The one round trip of a re-run (run as root, `sh -c PROBE_SCRIPT pgo-probe STAMP_PATH`): the
/// state digest line, then `-- stamp` and the stamp's lines when the stamp is there.
pub const PROBE_SCRIPT: &str = concat!(
    state_digest!(),
    "printf 'state=%s\\n' \"$s\"\n",
    "if [ -f \"$1\" ]; then echo '-- stamp'; cat \"$1\"; fi\n"
);

/// Writes the stamp after a successful run (as root, `sh -c WRITE_SCRIPT pgo-stamp STAMP_PATH`):
/// computes the state digest (exit 3 when it is unavailable: no stamp), then writes stdin (the stamp's other lines) and the `state=` line
/// to `$1.tmp` (mode 0600; a directory it creates is 0700) and renames it over `$1`. Prints the
/// state line.
pub const WRITE_SCRIPT: &str = concat!(
    "set -e\n",
    state_digest!(),
    "if [ \"$s\" = unavailable ]; then\n",
    "  echo 'the container lacks dpkg-query, GNU find, sha256sum or a running systemd' >&2; exit 3\n",
    "fi\n",
    "umask 077\n",
    "mkdir -p \"${1%/*}\"\n",
    "{ cat; printf 'state=%s\\n' \"$s\"; } > \"$1.tmp\"\n",
    "chmod 0600 \"$1.tmp\"\n",
    "mv -f \"$1.tmp\" \"$1\"\n",
    "printf 'state=%s\\n' \"$s\"\n"
);

/// Removes the stamp before a full run (`sh -c REMOVE_SCRIPT pgo-stamp STAMP_PATH`): a run that
/// fails half-way leaves none, so the next one runs fully too.
pub const REMOVE_SCRIPT: &str = "rm -f \"$1\" \"$1.tmp\"";

/// The SHA-256 (hex) of everything a configure run depends on besides the container itself:
/// our version and [`STAMP_FORMAT`], `engine` (the lib's engine and the backend, e.g.
/// `Shell on lxc`), the base role's tree (every file's path,
/// executable bit and content, as a deterministic tar: see [`TarUpload::dir`]; `None` when the
/// monorepo has no `base/`), the lib's directory (the same way), and `vars`: the values handed to
/// the engines (the extra-vars JSON: the contract with globals, env, `IP`, `ID`, `HOSTNAME`,
/// `STAGE`, `HOST`, `LOGIN`, `PASSWORD`, `PGO_CONTAINERS`, and the `pgo_*` values), without
/// `PGO_OUTPUT` (a temporary path that differs each run).
///
/// # Errors
/// A file of the base role or the lib that cannot be read.
pub fn inputs_digest(
    engine: &str,
    base: Option<&Path>,
    lib: &Path,
    vars: &serde_json::Value,
) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut part = |label: &str, bytes: &[u8]| {
        h.update(label.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part("version", env!("CARGO_PKG_VERSION").as_bytes());
    part("format", STAMP_FORMAT.as_bytes());
    part("engine", engine.as_bytes());
    match base {
        Some(dir) => {
            let mut t = TarUpload::new();
            t.dir("base", dir)?;
            part("base", &t.finish()?);
        }
        None => part("no-base", b""),
    }
    let mut t = TarUpload::new();
    t.dir("lib", lib)?;
    part("lib", &t.finish()?);
    let mut vars = vars.clone();
    if let Some(m) = vars.as_object_mut() {
        m.remove("PGO_OUTPUT");
    }
    part("vars", &serde_json::to_vec(&vars).map_err(std::io::Error::other)?);
    Ok(hex::encode(h.finalize()))
}

/// The stamp's lines before the `state=` line that [`WRITE_SCRIPT`] adds: format, version,
/// inputs digest and the lib's output text (base64).
pub fn stamp_head(inputs: &str, outputs: &str) -> String {
    format!(
        "format={STAMP_FORMAT}\nversion={}\ninputs={inputs}\noutputs={}\n",
        env!("CARGO_PKG_VERSION"),
        base64::engine::general_purpose::STANDARD.encode(outputs.as_bytes())
    )
}

/// What [`compare`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Inputs and state equal the stamp's: skip, with the lib's `$PGO_OUTPUT` text of the run
    /// that wrote the stamp.
    Unchanged {
        /// The `$PGO_OUTPUT` text recorded in the stamp.
        outputs: String,
    },
    /// Run fully, for this reason (for the log and the artifact's `full_run`).
    Changed(&'static str),
}

/// Compares the [`PROBE_SCRIPT`]'s output with the `inputs` digest computed here. The state line
/// must be a 64-hex digest (not the digest of an empty listing, which means the listing failed
/// as a whole) and every stamp field must be present and equal.
pub fn compare(probe: &str, inputs: &str) -> Check {
    let (head, stamp) = match probe.split_once("\n-- stamp\n") {
        Some((h, s)) => (h, Some(s)),
        None => (probe.trim_end(), None),
    };
    let state = head.lines().find_map(|l| l.strip_prefix("state="));
    let Some(state) = state.filter(|s| is_digest(s) && *s != EMPTY_SHA256) else {
        return Check::Changed("the container's state could not be read");
    };
    let Some(stamp) = stamp else {
        return Check::Changed("no stamp of an earlier configure in the container");
    };
    let field = |k: &str| stamp.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix('='));
    if field("format") != Some(STAMP_FORMAT) {
        return Check::Changed("the stamp in the container has another format");
    }
    if field("version") != Some(env!("CARGO_PKG_VERSION")) {
        return Check::Changed("the stamp in the container is from another version of proxmox-gitops");
    }
    let (Some(want_inputs), Some(want_state), Some(outputs)) = (field("inputs"), field("state"), field("outputs"))
    else {
        return Check::Changed("the stamp in the container is incomplete");
    };
    let Ok(outputs) = base64::engine::general_purpose::STANDARD.decode(outputs) else {
        return Check::Changed("the stamp in the container is unreadable");
    };
    if want_inputs != inputs {
        return Check::Changed("the inputs changed (base role, lib files, engine or contract values)");
    }
    if want_state != state {
        return Check::Changed("the container's state changed (packages, /etc or systemd units)");
    }
    Check::Unchanged { outputs: String::from_utf8_lossy(&outputs).into_owned() }
}

/// SHA-256 of nothing: what `sha256sum` prints when the listing produced no output at all.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const S2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    fn probe(state: &str, inputs: &str, stamp_state: &str) -> String {
        format!("state={state}\n-- stamp\n{}state={stamp_state}\n", stamp_head(inputs, "A=1\n"))
    }

    #[test]
    fn equal_inputs_and_state_skip_with_the_recorded_outputs() {
        assert_eq!(compare(&probe(S1, "in", S1), "in"), Check::Unchanged { outputs: "A=1\n".into() });
    }

    #[test]
    fn anything_else_runs_fully() {
        let changed = |p: &str, i: &str| matches!(compare(p, i), Check::Changed(_));
        // Other inputs, another state.
        assert_eq!(
            compare(&probe(S1, "in", S1), "other"),
            Check::Changed("the inputs changed (base role, lib files, engine or contract values)")
        );
        assert_eq!(
            compare(&probe(S2, "in", S1), "in"),
            Check::Changed("the container's state changed (packages, /etc or systemd units)")
        );
        // No stamp; a state that is not a digest or the digest of nothing.
        assert_eq!(
            compare(&format!("state={S1}\n"), "in"),
            Check::Changed("no stamp of an earlier configure in the container")
        );
        assert!(changed(&probe("", "in", ""), "in"));
        assert!(changed(&probe(EMPTY_SHA256, "in", EMPTY_SHA256), "in"));
        assert!(changed("", "in"));
        // Another version or format, missing fields, bad base64.
        let p = probe(S1, "in", S1);
        assert!(changed(&p.replace("version=", "version=0"), "in"));
        assert!(changed(&p.replace("format=1", "format=2"), "in"));
        assert!(changed(&p.replace("outputs=", "outputz="), "in"));
        assert!(changed(&p.replace("outputs=", "outputs=!!"), "in"));
        assert!(changed(&format!("state={S1}\n-- stamp\n"), "in"));
    }

    #[test]
    fn the_inputs_digest_covers_files_engine_and_values_but_not_the_output_path() {
        let dir = tempfile::tempdir().unwrap();
        let (base, lib) = (dir.path().join("base"), dir.path().join("lib"));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(base.join("playbook.yml"), "- hosts: all\n").unwrap();
        std::fs::write(lib.join("configure.sh"), "true\n").unwrap();
        let vars = serde_json::json!({"A": "1", "PASSWORD": "pw", "PGO_OUTPUT": "/tmp/pgo.x/output"});
        let d = |vars: &serde_json::Value| inputs_digest("shell", Some(&base), &lib, vars).unwrap();
        let first = d(&vars);
        assert_eq!(first.len(), 64);
        assert!(!first.contains("pw"));
        // The output path is left out; every other value counts.
        assert_eq!(d(&serde_json::json!({"A": "1", "PASSWORD": "pw", "PGO_OUTPUT": "/tmp/pgo.y/output"})), first);
        assert_ne!(d(&serde_json::json!({"A": "1", "PASSWORD": "pw2", "PGO_OUTPUT": "/tmp/pgo.x/output"})), first);
        assert_ne!(inputs_digest("cinc", Some(&base), &lib, &vars).unwrap(), first);
        assert_ne!(inputs_digest("shell", None, &lib, &vars).unwrap(), first);
        // A lib file's content, a new file, the executable bit, a base role file.
        std::fs::write(lib.join("configure.sh"), "false\n").unwrap();
        let edited = d(&vars);
        assert_ne!(edited, first);
        std::fs::write(lib.join("extra.conf"), "").unwrap();
        let added = d(&vars);
        assert_ne!(added, edited);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(lib.join("extra.conf"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_ne!(d(&vars), added);
        let before = d(&vars);
        std::fs::write(base.join("playbook.yml"), "- hosts: all\n  become: true\n").unwrap();
        assert_ne!(d(&vars), before);
    }

    #[test]
    fn the_state_script_runs_and_prints_a_digest() {
        // On this machine (the scripts only need sh and coreutils; a missing tool prints its
        // error into the listing).
        let out = std::process::Command::new("sh").args(["-c", STATE_SCRIPT]).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let state = text.trim().strip_prefix("state=").unwrap();
        // `unavailable` where systemd does not run (a build container, say).
        let systemd = std::path::Path::new("/run/systemd/system").is_dir();
        assert!(if systemd { is_digest(state) } else { state == "unavailable" }, "{text}");
        // `unavailable` never compares equal, not even to itself.
        let p = format!("state=unavailable\n-- stamp\n{}state=unavailable\n", stamp_head("in", ""));
        assert_eq!(compare(&p, "in"), Check::Changed("the container's state could not be read"));
        assert!(PROBE_SCRIPT.starts_with(&STATE_SCRIPT[..STATE_SCRIPT.find("printf").unwrap()]));
    }
}
