//! Running the engines on a connected container: the base role (Ansible), the data restore, then
//! the lib's own engine (Ansible, shell or Cinc) with the contract uploaded next to it, and the
//! fixed wrapper scripts that carry the engine's exit code back.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};

use super::contract::{containers_json, contract, env_file, parse_outputs};
use super::recap::summarize;
use super::restore::restore_data;
use super::stamp::{self, Check, PROBE_SCRIPT, REMOVE_SCRIPT, STAMP_PATH, WRITE_SCRIPT};
use super::{ConfigureOptions, EngineRun, Log, Partial};
use crate::inventory::{ContainerSpec, Engine, Inventory, Mount};
use crate::model::BackendKind;
use crate::share::{ClientInput, ShareClient};
use crate::ssh::{Connection, TarUpload};

/// The contract as a flat map and the extra-vars JSON handed to Ansible (the contract, plus
/// `pgo_containers`, `pgo_config_pubkey`, `pgo_share*` and, for the control plane,
/// `pgo_control_plane`), with `output` as `PGO_OUTPUT`.
#[allow(clippy::too_many_arguments)]
fn engine_values(
    inv: &Inventory,
    spec: &ContainerSpec,
    opts: &ConfigureOptions,
    address: &str,
    output: &str,
    pubkey: &str,
    client: &ShareClient,
    control_plane: Option<&crate::control_plane::Vars>,
) -> anyhow::Result<(std::collections::BTreeMap<String, String>, serde_json::Value)> {
    let vars = contract(inv, spec, opts, address, output);
    let mut extra = serde_json::Map::new();
    for (k, v) in &vars {
        extra.insert(k.clone(), v.clone().into());
    }
    extra.insert("pgo_containers".into(), containers_json(inv, opts));
    extra.insert("pgo_config_pubkey".into(), pubkey.into());
    extra.insert("pgo_share".into(), "/share".into());
    extra.insert("pgo_share_mount".into(), spec.mounts.iter().any(|m| matches!(m, Mount::Share { .. })).into());
    extra.insert("pgo_share_host".into(), inv.globals.get("SHARE_HOST").cloned().unwrap_or_default().into());
    extra.insert("pgo_share_client".into(), serde_json::to_value(client)?);
    if let Some(cp) = control_plane {
        extra.insert("pgo_control_plane".into(), serde_json::to_value(cp)?);
    }
    Ok((vars, serde_json::Value::Object(extra)))
}

/// The engine name a lib's run is recorded with (`None` for engine `none`).
fn engine_name(engine: Engine) -> Option<&'static str> {
    match engine {
        Engine::None => None,
        Engine::Ansible => Some("ansible"),
        Engine::Shell => Some("shell"),
        Engine::Cinc => Some("cinc"),
    }
}

/// Bound of the stamp's round trips (probe, write, remove).
const STAMP_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs one of the stamp's fixed scripts as root with [`STAMP_PATH`] as `$1`.
async fn stamp_script(conn: &Connection, script: &str, input: Option<&[u8]>) -> anyhow::Result<String> {
    let out = conn.run(&["sh", "-c", script, "pgo-stamp", STAMP_PATH], input, true, STAMP_TIMEOUT).await?;
    if !out.success() {
        anyhow::bail!("exit code {:?}: {}", out.code, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Stores the lib's `$PGO_OUTPUT` text as the artifact's outputs (secrets masked), logging the
/// lines that are not `KEY=value`.
fn set_outputs(spec: &ContainerSpec, text: &str, log: &mut Log, part: &mut Partial) {
    let (outputs, bad) = parse_outputs(text);
    for b in &bad {
        log.push(&spec.name, b);
        tracing::warn!("{}: {b}", spec.name);
    }
    part.outputs = outputs;
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn run_engines(
    inv: &Inventory,
    spec: &ContainerSpec,
    opts: &ConfigureOptions,
    backend: BackendKind,
    conn: &Connection,
    pubkey: &str,
    address: &str,
    control_plane: Option<&crate::control_plane::Vars>,
    log: &mut Log,
    part: &mut Partial,
) -> anyhow::Result<()> {
    let lib_dir = inv.root.join(&spec.dir);
    let lib_name = spec.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or(spec.name.clone());
    let client = share_client(&spec.mounts, &spec.dir.join("container.env"), &inv.globals, &opts.contract, backend)?;
    if let Some(note) = &client.1 {
        log.push(&spec.name, note);
        tracing::warn!("{}: {note}", spec.name);
    }

    // Skip when the stamp shows that nothing changed (see stamp.rs); the control plane always
    // runs (its programs and Gitea's state are more than the stamp compares).
    let inputs = if spec.name == crate::inventory::CONTROL_PLANE {
        part.full_run = Some("the control plane is always configured fully".into());
        None
    } else {
        let (_, values) = engine_values(inv, spec, opts, address, "", pubkey, &client.0, control_plane)?;
        let base = inv.base.as_ref().map(|b| inv.root.join(b));
        // The backend too: the values handed to the engines differ by it (the share's client),
        // and a container that moved to another backend is configured fully once.
        let engine = format!("{:?} on {backend}", spec.engine);
        Some(
            stamp::inputs_digest(&engine, base.as_deref(), &lib_dir, &values)
                .context("cannot read the base role's or the lib's files")?,
        )
    };
    let mut base_done = false;
    if let Some(inputs) = &inputs {
        let check = if opts.full {
            Check::Changed("forced")
        } else {
            match stamp_script(conn, PROBE_SCRIPT, None).await {
                Ok(probe) => stamp::compare(&probe, inputs),
                Err(e) => {
                    log.push(&spec.name, &format!("stamp: cannot read the container's state: {e:#}"));
                    Check::Changed("the container's state could not be read")
                }
            }
        };
        match check {
            Check::Changed(why) => {
                log.push(&spec.name, &format!("full run: {why}"));
                tracing::info!("{}: full run: {why}", spec.name);
                part.full_run = Some(why.into());
            }
            Check::Unchanged { outputs } => {
                log.push(&spec.name, "unchanged since the last configure (inputs and container state)");
                if inv.base.is_some() {
                    part.base = Some(EngineRun::skipped("ansible"));
                }
                // Empty data with a snapshot is restored as in a full run; then the lib runs.
                restore_data(inv, spec, opts, conn, log, part).await?;
                if part.restore.is_none() {
                    part.skipped = Some("unchanged".into());
                    part.lib = engine_name(spec.engine).map(EngineRun::skipped);
                    set_outputs(spec, &outputs, log, part);
                    return Ok(());
                }
                part.full_run = Some("data restored from a snapshot: the lib runs".into());
                base_done = true;
            }
        }
        // A run that fails half-way leaves no stamp: the next one runs fully too.
        stamp_script(conn, REMOVE_SCRIPT, None).await.context("cannot remove the configure stamp")?;
    }

    let tmp = conn.make_temp_dir(true).await?;
    let result = async {
        let output = format!("{tmp}/output");
        let (vars, extra) = engine_values(inv, spec, opts, address, &output, pubkey, &client.0, control_plane)?;
        let mut bundle = TarUpload::new();
        bundle.file("env", env_file(&vars).as_bytes(), 0o600)?;
        bundle.file("output", b"", 0o600)?;
        match spec.engine {
            Engine::Shell => bundle.dir("lib", &lib_dir)?,
            Engine::Cinc => bundle.dir(&format!("cookbooks/{lib_name}"), &lib_dir)?,
            _ => {}
        }
        conn.upload_tar(&tmp, &bundle.finish()?, true, Duration::from_secs(300)).await?;

        // Already done when the stamp showed the base role unchanged and data was restored.
        if !base_done {
            if let Some(base) = &inv.base {
                let playbook = inv.root.join(base).join("playbook.yml");
                log.push(&spec.name, &format!("base role: {}", playbook.display()));
                let run = ansible(opts, conn, spec, &playbook, &extra, log).await?;
                let ok = run.success;
                part.base = Some(run);
                if !ok {
                    anyhow::bail!("the base role failed (see the log tail)");
                }
            } else {
                tracing::warn!("{}: the monorepo has no base/ directory; skipping the base role", spec.name);
            }
            restore_data(inv, spec, opts, conn, log, part).await?;
        }

        let lib_start = Instant::now();
        let lib = match spec.engine {
            Engine::None => None,
            Engine::Ansible => Some(ansible(opts, conn, spec, &lib_dir.join("playbook.yml"), &extra, log).await?),
            Engine::Shell => {
                let script = "exec 2>&1\nd=\"$1\"\n\
                    if set -a && . \"$d/env\" && set +a && cd \"$d/lib\"; then bash ./configure.sh; rc=$?; else rc=1; fi\n\
                    printf '\\n%s%s\\n' __pgo_exit_code= \"$rc\"\n";
                let (code, text) = run_wrapped(conn, script, &[&tmp], opts.run_timeout).await?;
                log.push(&spec.name, &text);
                Some(EngineRun {
                    engine: "shell".into(),
                    changed: None,
                    ok: None,
                    exit_code: code,
                    success: code == Some(0),
                    duration_ms: lib_start.elapsed().as_millis() as u64,
                    skipped: false,
                })
            }
            Engine::Cinc => {
                let script = "exec 2>&1\nd=\"$1\"\nlib=\"$2\"\n\
                    if ! command -v cinc-client >/dev/null 2>&1; then\n  echo 'cinc-client: command not found'\n  rc=127\n\
                    elif set -a && . \"$d/env\" && set +a && cd \"$d\"; then\n\
                      cinc-client --local-mode --chef-license accept-silent --config-option \"cookbook_path=$d/cookbooks\" -o \"recipe[$lib]\"\n  rc=$?\n\
                    else\n  rc=1\nfi\n\
                    printf '\\n%s%s\\n' __pgo_exit_code= \"$rc\"\n";
                let (code, text) = run_wrapped(conn, script, &[&tmp, &lib_name], opts.run_timeout).await?;
                log.push(&spec.name, &text);
                let counts = cinc_counts(&text);
                let run = EngineRun {
                    engine: "cinc".into(),
                    changed: counts.map(|c| c.0),
                    ok: counts.and_then(|c| c.1),
                    exit_code: code,
                    success: code == Some(0),
                    duration_ms: lib_start.elapsed().as_millis() as u64,
                    skipped: false,
                };
                if code == Some(127) && text.lines().any(|l| l == "cinc-client: command not found") {
                    part.lib = Some(run);
                    anyhow::bail!("{}", cinc_missing(&spec.dir));
                }
                Some(run)
            }
        };
        let lib_ok = lib.as_ref().map(|r| r.success).unwrap_or(true);
        let lib_desc = lib.as_ref().map(|r| (r.engine.clone(), r.exit_code));
        part.lib = lib;
        if !lib_ok {
            let (engine, code) = lib_desc.unwrap_or_default();
            anyhow::bail!(
                "the lib's {engine} configuration failed{} (see the log tail)",
                code.map(|c| format!(" with exit code {c}")).unwrap_or_default()
            );
        }
        let text = conn.read_file(&output, true).await?;
        let text = String::from_utf8_lossy(&text).into_owned();
        set_outputs(spec, &text, log, part);
        if let Some(inputs) = &inputs {
            // Not fatal: without a stamp the next run is a full one.
            if let Err(e) = stamp_script(conn, WRITE_SCRIPT, Some(stamp::stamp_head(inputs, &text).as_bytes())).await {
                let msg = format!("cannot write the configure stamp {STAMP_PATH}: {e:#}; the next run is a full one");
                tracing::warn!("{}: {msg}", spec.name);
                log.push(&spec.name, &msg);
            }
        }
        Ok(())
    }
    .await;
    let cleanup = conn.remove_dir(&tmp, true).await;
    match (result, cleanup) {
        (Err(e), _) => Err(e),
        (Ok(()), Err(e)) => Err(anyhow!(e).context("cannot remove the temporary directory with the contract")),
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// The share's CIFS client for the base role (`pgo_share_client`), and a note when a share is
/// listed but cannot be mounted. Only containers on PVE mount over CIFS: the lxc backend binds
/// the host's `<share>/NAME` at `/NAME` (see `backend::lxc::desired`), so there they get none.
/// On PVE without the global `SHARE_HOST`, `/NAME` stays a directory of the container (the
/// note says so).
///
/// # Errors
/// A `SHARE_HOST`, `LOGIN` or `PASSWORD` the credentials or units cannot hold
/// ([`crate::share::client`]), naming the setting.
fn share_client(
    mounts: &[Mount],
    env_file: &Path,
    globals: &std::collections::BTreeMap<String, String>,
    contract: &super::Contract,
    backend: BackendKind,
) -> anyhow::Result<(ShareClient, Option<String>)> {
    use secrecy::ExposeSecret;
    let shares: Vec<String> = mounts
        .iter()
        .filter_map(|m| match m {
            Mount::Share { name } => Some(name.clone()),
            _ => None,
        })
        .collect();
    if shares.is_empty() || backend != BackendKind::Pve {
        return Ok((ShareClient::default(), None));
    }
    let Some(host) = globals.get("SHARE_HOST") else {
        let note = format!(
            "MOUNT lists the share(s) {} but the global SHARE_HOST is not set: nothing is mounted, {} stay(s) \
             directories of the container; set SHARE_HOST in globals.json to the share server (e.g. the `share` lib's address)",
            shares.join(", "),
            shares.iter().map(|s| format!("/{s}")).collect::<Vec<_>>().join(", ")
        );
        return Ok((ShareClient::default(), Some(note)));
    };
    let password = contract.password.as_ref().map(|p| p.expose_secret().to_string()).unwrap_or_default();
    let input = ClientInput {
        shares: &shares,
        host,
        login: contract.login.as_deref().unwrap_or_default(),
        password: &password,
        env_file,
    };
    crate::share::client(&input).map(|c| (c, None)).map_err(|p| {
        anyhow!(
            "the share's CIFS client cannot be written: {}",
            p.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("; ")
        )
    })
}

/// Marker line the engine wrappers print last: the engine's exit code. SSH itself maps remote
/// exit codes 127 and 255 to its own errors, so the code travels in the output instead.
const EXIT_MARKER: &str = "__pgo_exit_code=";

/// Runs a fixed wrapper `script` with bash as root (`bash -c SCRIPT pgo-configure ARGS…`) and
/// returns the engine's exit code (from [`EXIT_MARKER`]) and its output without the marker.
async fn run_wrapped(
    conn: &Connection,
    script: &str,
    args: &[&str],
    timeout: Duration,
) -> anyhow::Result<(Option<i32>, String)> {
    let mut argv = vec!["bash", "-c", script, "pgo-configure"];
    argv.extend_from_slice(args);
    let out = conn.run(&argv, None, true, timeout).await?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    Ok(split_exit_marker(&text, out.code))
}

/// Splits the wrapper's output into (exit code, output without the marker line). Without a
/// marker (the wrapper was killed) the SSH exit code stands.
fn split_exit_marker(text: &str, fallback: Option<i32>) -> (Option<i32>, String) {
    match text.rfind(EXIT_MARKER) {
        Some(pos) if text[..pos].ends_with('\n') || pos == 0 => {
            let code = text[pos + EXIT_MARKER.len()..].trim().parse::<i32>().ok().or(fallback);
            // The wrapper prints a newline before the marker, in case the output lacked one.
            let body = text[..pos].strip_suffix('\n').unwrap_or(&text[..pos]);
            (code, body.to_string())
        }
        _ => (fallback, text.to_string()),
    }
}

/// Runs `ansible-playbook` with `playbook` against the container over `conn`'s ControlMaster.
async fn ansible(
    opts: &ConfigureOptions,
    conn: &Connection,
    spec: &ContainerSpec,
    playbook: &Path,
    extra: &serde_json::Value,
    log: &mut Log,
) -> anyhow::Result<EngineRun> {
    let start = Instant::now();
    let dir =
        tempfile::Builder::new().prefix("pgo-ansible-").tempdir().context("cannot create a temporary directory")?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    let t = conn.target();
    let host = &spec.name;
    let inventory = serde_json::json!({
        "all": { "hosts": { host: {
            "ansible_host": t.address,
            "ansible_port": t.port,
            "ansible_user": conn.user(),
            "ansible_ssh_private_key_file": t.key,
            "ansible_python_interpreter": "/usr/bin/python3",
        }}}
    });
    let inv_path = dir.path().join("inventory.json");
    std::fs::write(&inv_path, serde_json::to_vec_pretty(&inventory)?)?;
    let vars_path = dir.path().join("vars.json");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(&vars_path)?;
        f.write_all(&serde_json::to_vec(extra)?)?;
    }
    let ssh_args = format!(
        "-o ControlMaster=auto -o ControlPersist=60s -o ControlPath={} -o UserKnownHostsFile={} \
         -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o UpdateHostKeys=no -o IdentitiesOnly=yes \
         -o PasswordAuthentication=no -o BatchMode=yes",
        conn.control_socket().display(),
        t.known_hosts.display()
    );
    let cfg = format!(
        "[defaults]\nhost_key_checking = True\nstdout_callback = json\nretry_files_enabled = False\n\
         interpreter_python = /usr/bin/python3\nlocal_tmp = {}/local\nnocows = True\n\
         [ssh_connection]\nssh_args = {ssh_args}\npipelining = True\n",
        dir.path().display()
    );
    let cfg_path = dir.path().join("ansible.cfg");
    std::fs::write(&cfg_path, cfg)?;
    let mut cmd = tokio::process::Command::new(&opts.ansible_playbook);
    cmd.arg("-i")
        .arg(&inv_path)
        .arg("-e")
        .arg(format!("@{}", vars_path.display()))
        .arg(playbook)
        .env("ANSIBLE_CONFIG", &cfg_path)
        .env("ANSIBLE_HOST_KEY_CHECKING", "True")
        .env("ANSIBLE_STDOUT_CALLBACK", "json")
        .env("ANSIBLE_FORCE_COLOR", "0")
        .env("ANSIBLE_NOCOLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}; is Ansible installed?", opts.ansible_playbook.display()))?;
    let out = tokio::time::timeout(opts.run_timeout, child.wait_with_output()).await.map_err(|_| {
        anyhow!(
            "{}: ansible-playbook {} timed out after {}s",
            spec.name,
            playbook.display(),
            opts.run_timeout.as_secs()
        )
    })??;
    // The secrets file goes first, whatever happened.
    let _ = std::fs::remove_file(&vars_path);
    drop(dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (lines, stats) = summarize(&stdout, host);
    for l in &lines {
        log.push(&spec.name, l);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.trim().is_empty() {
        log.push(&spec.name, stderr.trim());
    }
    if stats.is_none() && !out.status.success() && lines.is_empty() {
        log.push(&spec.name, stdout.trim());
    }
    let (changed, ok, failed) = stats.unwrap_or((None, None, true));
    Ok(EngineRun {
        engine: "ansible".into(),
        changed,
        ok,
        exit_code: out.status.code(),
        success: out.status.success() && !failed,
        duration_ms: start.elapsed().as_millis() as u64,
        skipped: false,
    })
}

/// The resource counts of a Cinc run, from the last summary line its doc formatter prints
/// (chef's `lib/chef/formatters/doc.rb`, `run_completed`): `Cinc Client finished, 2/10 resources
/// updated in 05 seconds` gives `(2, Some(10))` (changed, ok: as Ansible counts them, ok
/// includes the changed ones); the older form without a total, `… finished, 2 resources
/// updated`, gives `(2, None)`. `None` when no such line is there
/// (a failed run, another formatter).
pub(super) fn cinc_counts(text: &str) -> Option<(u64, Option<u64>)> {
    let line = text.lines().rev().find(|l| l.contains(" finished, ") && l.contains(" resources updated"))?;
    let counts = line.split(" finished, ").nth(1)?.split(' ').next()?;
    match counts.split_once('/') {
        Some((updated, total)) => {
            let (updated, total) = (updated.parse::<u64>().ok()?, total.parse::<u64>().ok()?);
            (updated <= total).then_some((updated, Some(total)))
        }
        None => Some((counts.parse().ok()?, None)),
    }
}

/// The failure of a Cinc lib (`recipes/default.rb`) whose container has no `cinc-client`: the
/// shipped base role does not install Cinc, so it must already be in the container.
pub fn cinc_missing(lib_dir: &Path) -> String {
    format!(
        "{} has recipes/default.rb but cinc-client is not installed in the container: nothing here \
         installs Cinc (the base role does not), it must already be there: use a template or image \
         that has Cinc Client (https://cinc.sh), or install it from your own base/ role",
        lib_dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cifs_client_only_on_pve_with_a_share_host() {
        let mounts = vec![Mount::Share { name: "share".into() }, Mount::Device { path: "/dev/ttyUSB0".into() }];
        let env = Path::new("libs/app/container.env");
        let contract = super::super::Contract {
            host: None,
            login: Some("admin".into()),
            password: Some(secrecy::SecretString::from("pw")),
        };
        let host = std::collections::BTreeMap::from([("SHARE_HOST".to_string(), "10.0.3.30".to_string())]);
        let none = std::collections::BTreeMap::new();
        // The lxc backend binds the host's share: no CIFS client, no note.
        let (c, note) = share_client(&mounts, env, &host, &contract, BackendKind::Lxc).unwrap();
        assert_eq!((c, note), (ShareClient::default(), None));
        // PVE without a share in MOUNT: nothing.
        let (c, note) = share_client(&mounts[1..], env, &host, &contract, BackendKind::Pve).unwrap();
        assert_eq!((c, note), (ShareClient::default(), None));
        // PVE without SHARE_HOST: nothing mounted, and said so.
        let (c, note) = share_client(&mounts, env, &none, &contract, BackendKind::Pve).unwrap();
        assert_eq!(c, ShareClient::default());
        assert_eq!(
            note.as_deref(),
            Some(
                "MOUNT lists the share(s) share but the global SHARE_HOST is not set: nothing is mounted, /share \
                 stay(s) directories of the container; set SHARE_HOST in globals.json to the share server (e.g. the \
                 `share` lib's address)"
            )
        );
        // PVE with SHARE_HOST: the rendered client.
        let (c, note) = share_client(&mounts, env, &host, &contract, BackendKind::Pve).unwrap();
        assert_eq!(note, None);
        assert_eq!(c.mounts, vec!["share.mount"]);
        assert_eq!(c.files[0].content, "username=admin\npassword=pw\n");
        assert_eq!(c.files[0].mode, "0600");
        // A bad SHARE_HOST is an error naming it.
        let bad = std::collections::BTreeMap::from([("SHARE_HOST".to_string(), "//x".to_string())]);
        let e = share_client(&mounts, env, &bad, &contract, BackendKind::Pve).unwrap_err().to_string();
        assert!(e.starts_with("the share's CIFS client cannot be written: globals.json (SHARE_HOST): `//x`"), "{e}");
    }

    #[test]
    fn exit_marker() {
        assert_eq!(split_exit_marker("a\nb\n\n__pgo_exit_code=127\n", Some(0)), (Some(127), "a\nb\n".into()));
        assert_eq!(split_exit_marker("\n__pgo_exit_code=0\n", Some(0)), (Some(0), "".into()));
        assert_eq!(split_exit_marker("killed\n", Some(255)), (Some(255), "killed\n".into()));
    }

    #[test]
    fn cinc_counts_come_from_the_formatters_last_line() {
        let run = "Starting Cinc Client, version 18.2.7\n  * apt_package[nginx] action install\n    - install version 1.22\n\
                   \nRunning handlers complete\nCinc Client finished, 2/10 resources updated in 05 seconds\n";
        assert_eq!(cinc_counts(run), Some((2, Some(10))));
        assert_eq!(cinc_counts("Chef Client finished, 3 resources updated\n"), Some((3, None)));
        assert_eq!(cinc_counts("Infra Phase complete, 0/4 resources updated in 01 seconds\n"), None);
        assert_eq!(cinc_counts("Cinc Client finished, 0/4 resources updated in 01 seconds"), Some((0, Some(4))));
        // Nothing to count: a failed run, or counts that make no sense.
        assert_eq!(cinc_counts("Cinc Client failed. 1 resources updated in 03 seconds\n"), None);
        assert_eq!(cinc_counts("Cinc Client finished, 5/2 resources updated\n"), None);
        assert_eq!(cinc_counts(""), None);
    }

    #[test]
    fn cinc_missing_says_it_must_already_be_there() {
        assert_eq!(
            cinc_missing(Path::new("libs/dns")),
            "libs/dns has recipes/default.rb but cinc-client is not installed in the container: nothing here \
             installs Cinc (the base role does not), it must already be there: use a template or image that \
             has Cinc Client (https://cinc.sh), or install it from your own base/ role"
        );
    }
}
