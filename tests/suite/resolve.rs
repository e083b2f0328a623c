//! Integration tests of `resolve` (and the CLI around it) on fixture monorepos built with git.
//!
//! Run with `cargo test --test suite resolve::`.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;
use proxmox_gitops::error::Problems;
use proxmox_gitops::steps::resolve::{ResolveOptions, resolve};
use serde_json::{Value, json};
use support::fixture;

const BIN: &str = env!("CARGO_BIN_EXE_proxmox-gitops");

fn no_env() -> BTreeMap<String, String> {
    BTreeMap::new()
}

fn resolve_at(root: &Path, stage: &str) -> Result<proxmox_gitops::inventory::Inventory, Problems> {
    match resolve(&ResolveOptions { repo: root.to_path_buf(), stage: stage.into() }, &no_env()) {
        Ok(inv) => Ok(inv),
        Err(proxmox_gitops::error::Error::Input(p)) => Err(p),
        Err(e) => panic!("unexpected operational error: {e:#}"),
    }
}

/// The inventory as JSON with the fixture's temp dir replaced by `$TMP`.
fn normalized(f: &fixture::Fixture, inv: &proxmox_gitops::inventory::Inventory) -> Value {
    let mut v = proxmox_gitops::artifact::to_value(inv);
    let tmp = f.tmp.path().canonicalize().unwrap();
    fixture::replace_strings(&mut v, &tmp.to_string_lossy(), "$TMP");
    v
}

/// The whole expected inventory of [`fixture::standard`] for `stage` (`main` or `stage`).
fn expected(ids: &fixture::Ids, stage: &str) -> Value {
    let staged = stage != "main";
    let host = |n: &str| {
        if staged { format!("{stage}-{n}") } else { n.to_string() }
    };
    let srcs = |dir: &str, files: &[&str]| -> Value {
        files.iter().map(|f| if dir == "." { f.to_string() } else { format!("{dir}/{f}") }).collect()
    };
    let (cp_id, cp_ip) = if staged { ("200", "10.0.3.11") } else { ("100", "10.0.3.10") };
    let (broker_id, broker_ip) = if staged { ("220", "10.0.3.21") } else { ("120", "10.0.3.20") };
    let (dns_id, dns_ip) = if staged { ("240", "dhcp") } else { ("140", "10.0.3.40/24") };
    let stage_file = format!("container.{stage}.env");
    let with_stage = |base: &[&'static str]| -> Vec<String> {
        let mut v: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        if staged {
            v.push(stage_file.clone());
        }
        v
    };
    fn as_refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let cp_files = with_stage(&["container.env", "container.local.env"]);
    let broker_files = with_stage(&["container.env", "container.local.env"]);
    let dns_files = with_stage(&["container.env"]);
    json!({
      "kind": "inventory",
      "schema_version": "1.2",
      "root": "$TMP/mono",
      "stage": stage,
      "head": ids.root,
      "containers": [
        {
          "name": "config", "hostname": host("config"), "vmid": cp_id.parse::<u32>().unwrap(),
          "ip": { "mode": "static", "address": cp_ip, "prefix": 24 },
          "cores": 4, "memory_mib": 4096, "swap_mib": 1024,
          "rootfs": { "storage": "local-lvm", "size_gib": 32 },
          "mounts": [], "onboot": true, "node": null, "snapshot_paths": [],
          "engine": "none", "dir": ".",
          "sources": srcs(".", &as_refs(&cp_files)),
          "submodule": null,
          "env": { "BOOT": "yes", "CORES": "4", "DISK": "local-lvm:32", "ID": cp_id,
                   "IP": format!("{cp_ip}/24"), "MEMORY": "4096", "MOUNT": "", "SWAP": "1024" },
          "extra": {}
        },
        {
          "name": "broker", "hostname": host("broker"), "vmid": broker_id.parse::<u32>().unwrap(),
          "ip": { "mode": "static", "address": broker_ip, "prefix": 24 },
          "cores": 1, "memory_mib": 512, "swap_mib": 256,
          "rootfs": { "storage": "local-lvm", "size_gib": 4 },
          "mounts": [ { "type": "volume", "storage": "local-lvm", "size_gib": 2,
                        "container_path": "/var/lib/mosquitto" } ],
          "onboot": true, "node": "pve2",
          "snapshot_paths": [ "/var/lib/mosquitto", "/etc/mosquitto" ],
          "engine": "shell", "dir": "libs/broker",
          "sources": srcs("libs/broker", &as_refs(&broker_files)),
          "submodule": "libs/broker",
          "env": { "BOOT": "yes", "CORES": "1", "DISK": "local-lvm:4", "ID": broker_id,
                   "IP": format!("{broker_ip}/24"), "MEMORY": "512",
                   "MOUNT": "local-lvm:2:/var/lib/mosquitto", "NODE": "pve2",
                   "SNAPSHOT": "/var/lib/mosquitto/,/etc/mosquitto", "SWAP": "256" },
          "extra": {}
        },
        {
          "name": "dns", "hostname": host("dns"), "vmid": dns_id.parse::<u32>().unwrap(),
          "ip": if staged { json!({ "mode": "dhcp" }) }
                else { json!({ "mode": "static", "address": "10.0.3.40", "prefix": 24 }) },
          "cores": 1, "memory_mib": 128, "swap_mib": 0,
          "rootfs": { "storage": "local", "size_gib": 2 },
          "mounts": [], "onboot": true, "node": null, "snapshot_paths": [],
          "engine": "cinc", "dir": "libs/dns",
          "sources": srcs("libs/dns", &as_refs(&dns_files)),
          "submodule": null,
          "env": { "DISK": "local:2", "ID": dns_id, "IP": dns_ip, "MEMORY": "128", "SWAP": "0",
                   "UPSTREAM": "1.1.1.1 9.9.9.9" },
          "extra": { "UPSTREAM": "1.1.1.1 9.9.9.9" }
        },
        {
          "name": "web", "hostname": host("web"), "vmid": 130,
          "ip": { "mode": "static", "address": "10.0.3.30", "prefix": 24 },
          "cores": 2, "memory_mib": 1024, "swap_mib": 0,
          "rootfs": { "storage": "local-lvm", "size_gib": 16 },
          "mounts": [
            { "type": "share", "name": "share" },
            { "type": "bind", "host_path": "/srv/web", "container_path": "/var/www" },
            { "type": "device", "path": "/dev/net/tun" }
          ],
          "onboot": false, "node": null, "snapshot_paths": [],
          "engine": "ansible", "dir": "libs/web",
          "sources": [ "libs/web/container.env" ],
          "submodule": "libs/web",
          "env": { "BOOT": "no", "CORES": "2", "DISK": "local-lvm:16", "ID": "130",
                   "IP": "10.0.3.30/24", "MEMORY": "1024",
                   "MOUNT": "share,/srv/web:/var/www,/dev/net/tun", "SITE_NAME": "Home $ite",
                   "SWAP": "0" },
          "extra": { "SITE_NAME": "Home $ite" }
        }
      ],
      "submodules": [
        { "name": "libs/broker", "path": "libs/broker",
          "url": "git@git.example.com:homelab/broker.git",
          "commit": ids.broker, "checked_out": true, "head": null, "children": [] },
        { "name": "libs/web", "path": "libs/web", "url": "$TMP/src/web",
          "commit": ids.web, "checked_out": true, "head": null,
          "children": [
            { "name": "vendor/theme", "path": "libs/web/vendor/theme", "url": "$TMP/src/theme",
              "commit": ids.theme, "checked_out": true, "head": null,
              "children": [
                { "name": "icons", "path": "libs/web/vendor/theme/icons", "url": "$TMP/src/icons",
                  "commit": ids.icons, "checked_out": true, "head": null, "children": [] }
              ] },
            { "name": "vendor/extra", "path": "libs/web/vendor/extra",
              "url": "https://git.example.com/homelab/extra.git",
              "commit": ids.extra, "checked_out": false, "head": null, "children": [] }
          ] },
        { "name": "tasks/backup", "path": "tasks/backup", "url": "$TMP/src/backup",
          "commit": ids.backup, "checked_out": true, "head": null, "children": [] }
      ],
      "globals": { "TZ": "Europe/Berlin" },
      "tasks": [
        { "name": "backup", "dir": "tasks/backup", "script": "tasks/backup/default.rb",
          "cron": "0 3 * * *" }
      ],
      "base": "base",
      "libraries": "config/libraries",
      "settings": {
        "pve_host": "127.0.0.1", "pve_port": 8006, "pve_user": "root@pam", "pve_token": null,
        "pve_auth": "password", "pve_node": "pve1", "gateway": "10.0.3.1", "mask": 24,
        "interface": "eth0", "bridge": "lxcbr0", "storage": "local", "template": null,
        "share": "/share", "gitea_host": "http://127.0.0.1:3000", "gitea_login": "gitops",
        "gitea_auth": "password"
      }
    })
}

#[test]
fn standard_monorepo_whole_inventory_main() {
    let f = fixture::standard();
    let inv = resolve_at(&f.root, "main").unwrap();
    assert_eq!(normalized(&f, &inv), expected(&f.ids, "main"));
}

#[test]
fn standard_monorepo_whole_inventory_stage() {
    let f = fixture::standard();
    let inv = resolve_at(&f.root, "stage").unwrap();
    assert_eq!(normalized(&f, &inv), expected(&f.ids, "stage"));
}

#[test]
fn submodule_head_differing_from_gitlink_is_recorded() {
    let f = fixture::standard();
    let broker = f.root.join("libs/broker");
    fixture::write(&broker, "NOTES", "local work\n");
    support::git::git(&broker, &["add", "NOTES"]);
    support::git::git(&broker, &["commit", "-q", "-m", "local"]);
    let new_head = support::git::git(&broker, &["rev-parse", "HEAD"]);
    let inv = resolve_at(&f.root, "main").unwrap();
    let sm = &inv.submodules[0];
    assert_eq!(sm.commit.as_deref(), Some(f.ids.broker.as_str()));
    assert_eq!(sm.head.as_deref(), Some(new_head.as_str()));
}

// ---------------------------------------------------------------------------------------------
// The binary: exit codes, --json, the human table, Actions behaviour, GITHUB_OUTPUT.

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the binary with a clean environment (PATH and HOME only) plus `env`.
fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(dir).env_clear();
    cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd.env("HOME", std::env::temp_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("binary runs");
    Run {
        code: out.status.code().expect("exited"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[test]
fn cli_json_is_the_artifact_and_outputs_are_written() {
    let f = fixture::standard();
    let out_file = f.tmp.path().join("github_output");
    let r = run(&f.root, &["resolve", "--json"], &[("GITHUB_OUTPUT", out_file.to_str().unwrap())]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let artifact = std::fs::read_to_string(f.root.join(".proxmox-gitops/inventory.json")).unwrap();
    assert_eq!(r.stdout, artifact);
    let mut v: Value = serde_json::from_str(&r.stdout).unwrap();
    let tmp = f.tmp.path().canonicalize().unwrap();
    fixture::replace_strings(&mut v, &tmp.to_string_lossy(), "$TMP");
    assert_eq!(v, expected(&f.ids, "main"));
    assert_eq!(
        std::fs::read_to_string(&out_file).unwrap(),
        "artifact=./.proxmox-gitops/inventory.json\ninventory=./.proxmox-gitops/inventory.json\nstage=main\ncontainers=config,broker,dns,web\n\
         containers_json=[\"config\",\"broker\",\"dns\",\"web\"]\n"
    );
}

#[test]
fn cli_human_table() {
    let f = fixture::standard();
    let artifacts = f.tmp.path().join("out");
    let r = run(&f.root, &["resolve", "--artifacts", artifacts.to_str().unwrap()], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let expected = format!(
        "\
NAME    HOSTNAME  VMID  IP            CORES  MEMORY    ROOTFS            MOUNTS                            ENGINE   SOURCE
config  config    100   10.0.3.10/24  4      4096 MiB  local-lvm:32 GiB                                    none     dir
broker  broker    120   10.0.3.20/24  1      512 MiB   local-lvm:4 GiB   vol:/var/lib/mosquitto            shell    submodule
dns     dns       140   10.0.3.40/24  1      128 MiB   local:2 GiB                                         cinc     dir
web     web       130   10.0.3.30/24  2      1024 MiB  local-lvm:16 GiB  share,bind:/var/www,/dev/net/tun  ansible  submodule

TASK    SCRIPT                   SCHEDULE
backup  tasks/backup/default.rb  0 3 * * *

4 container(s), 1 task(s), stage main; wrote {}
",
        artifacts.join("inventory.json").display()
    );
    assert_eq!(r.stdout, expected);
    assert!(artifacts.join("inventory.json").is_file());
}

#[test]
fn cli_exit_codes() {
    let f = fixture::standard();
    // usage error
    let r = run(&f.root, &["resolve", "--no-such-flag"], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    // -v and -q conflict
    assert_eq!(run(&f.root, &["-v", "-q", "resolve"], &[]).code, 2);
    // --help is success
    assert_eq!(run(&f.root, &["--help"], &[]).code, 0);
    // a repository that does not exist is bad input
    let r = run(&f.root, &["resolve", "--repo", "/nonexistent/monorepo"], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("/nonexistent/monorepo"), "{}", r.stderr);
    // an artifacts directory that cannot be created is an operational failure
    let blocker = f.tmp.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let r = run(&f.root, &["resolve", "--artifacts", blocker.join("sub").to_str().unwrap()], &[]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.starts_with("error: "), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn cli_plan_reads_an_inventory_artifact_and_refuses_other_kinds() {
    let f = fixture::standard();
    let art = f.tmp.path().join("art");
    let a = art.to_str().unwrap();
    assert_eq!(run(&f.root, &["resolve", "--artifacts", a], &[]).code, 0);
    // The inventory from an earlier job: plan does not need the repo any more.
    let inv = art.join("inventory.json");
    let r = run(
        f.tmp.path(),
        &[
            "plan",
            "--json",
            "--ref",
            "main",
            "--inventory",
            inv.to_str().unwrap(),
            "--artifacts",
            a,
            "-c",
            "dns",
            "-c",
            "web",
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut plan: Value = serde_json::from_str(&r.stdout).unwrap();
    // Each container's inputs digest (schema 1.1) depends on the fixture's files.
    for c in plan["containers"].as_array_mut().unwrap() {
        let digest = c.as_object_mut().unwrap().remove("inputs_digest").unwrap();
        assert!(digest.as_str().unwrap().starts_with("sha256:"), "{digest}");
    }
    assert_eq!(
        plan,
        json!({
            "kind": "plan", "schema_version": "1.2", "ref": "main", "stage": "main",
            "containers": [
                { "name": "dns", "hostname": "dns", "vmid": 140, "steps": ["configure"] },
                { "name": "web", "hostname": "web", "vmid": 130, "steps": ["configure"] }
            ]
        })
    );
    let plan_file = art.join("plan.json");
    let r = run(f.tmp.path(), &["plan", "--inventory", plan_file.to_str().unwrap(), "--artifacts", a], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("expected an artifact of kind \"inventory\", found kind \"plan\""), "{}", r.stderr);
    let r = run(&f.root, &["plan", "--ref", "refs/heads/feature", "--artifacts", a], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("ref `refs/heads/feature` does not deploy"), "{}", r.stderr);
}

#[test]
fn cli_offline_plan_says_why_the_provision_column_is_empty() {
    let f = fixture::standard();
    let footer = |why: &str| {
        format!(
            "provision actions: not computed (offline plan: {why}; run `proxmox-gitops provision --all --dry-run` to \
             compare with the live host)\n"
        )
    };
    // --offline with PVE configured (the fixture's local/config.json): nothing is contacted.
    let r = run(
        &f.root,
        &["plan", "--ref", "refs/heads/release", "--offline"],
        &[("PROXMOX_TEMPLATE", "debian-13-standard_13.1-2")],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.ends_with(&footer("--offline")), "{}", r.stdout);
    let rows: Vec<&str> = r.stdout.lines().skip(1).take_while(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), 4, "{}", r.stdout);
    for row in rows {
        assert!(row.ends_with("provision + configure  -"), "{row}");
    }
    // No PVE configured at all (no config files, the environment is cleared).
    std::fs::remove_file(f.root.join("local/config.json")).unwrap();
    std::fs::remove_file(f.root.join("local/config.local.json")).unwrap();
    let r = run(&f.root, &["plan", "--ref", "refs/heads/release"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.ends_with(&footer("no PVE host (PROXMOX_HOST or proxmox.host in local/config.json)")),
        "{}",
        r.stdout
    );
    // A ref that does not provision has nothing to explain.
    let r = run(&f.root, &["plan", "--ref", "refs/heads/main"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("provision actions"), "{}", r.stdout);
}

#[test]
fn cli_warns_about_repeated_and_miscased_keys_with_file_and_line() {
    let (_tmp, root) = fixture::minimal();
    fixture::write(&root, APP, "IP=10.0.3.20/24\nID=120\nCORES=1\nmemory=2048\nCORES=2\n");
    let dup = "libs/app/container.env:5 (CORES): `CORES` is set more than once in this file (also on line 3); the last \
               one (line 5) wins";
    let case = "libs/app/container.env:4 (memory): `memory` is not `MEMORY` (keys are case-sensitive): it is passed on \
                as an extra key and `MEMORY` is not set by it; did you mean MEMORY?";
    let r = run(&root, &["resolve", "--json"], &[("NO_COLOR", "1")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let warnings: Vec<&str> = r.stderr.lines().filter(|l| l.contains("libs/app")).collect();
    assert_eq!(warnings, vec![format!(" WARN {case}"), format!(" WARN {dup}")]);
    // The values are still used: the last CORES, and `memory` as an extra key (MEMORY keeps its
    // default).
    let inv: Value = serde_json::from_str(&r.stdout).unwrap();
    let app = inv["containers"].as_array().unwrap().iter().find(|c| c["name"] == "app").unwrap().clone();
    assert_eq!(
        (app["cores"].clone(), app["memory_mib"].clone(), app["extra"].clone()),
        (json!(2), json!(512), json!({"memory": "2048"})),
        "{app:#}"
    );
    // Under Actions: annotations on the lines as well.
    let r = run(&root, &["resolve"], &[("NO_COLOR", "1"), ("GITHUB_ACTIONS", "true")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let commands: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("::warning")).collect();
    assert_eq!(
        commands,
        vec![
            "::warning file=libs/app/container.env,line=4::memory: `memory` is not `MEMORY` (keys are case-sensitive): \
             it is passed on as an extra key and `MEMORY` is not set by it; did you mean MEMORY?",
            "::warning file=libs/app/container.env,line=5::CORES: `CORES` is set more than once in this file (also on \
             line 3); the last one (line 5) wins",
        ]
    );
}

#[test]
fn cli_log_levels() {
    let f = fixture::standard();
    let quiet_default = run(&f.root, &["resolve"], &[]);
    assert!(!quiet_default.stderr.contains("submodule(s)"), "{}", quiet_default.stderr);
    let verbose = run(&f.root, &["-v", "resolve"], &[]);
    assert!(verbose.stderr.contains("6 submodule(s) (5 checked out), 1 task(s), 1 global(s)"), "{}", verbose.stderr);
    assert!(
        verbose.stderr.contains("container broker (vmid 120, hostname broker) from libs/broker/container.env < libs/broker/container.local.env"),
        "{}",
        verbose.stderr
    );
    // not a terminal: plain text, no colour codes
    assert!(verbose.stderr.contains("DEBUG container config (vmid 100"), "{:?}", verbose.stderr);
    assert!(!verbose.stderr.contains('\x1b'), "{:?}", verbose.stderr);
    let rust_log = run(&f.root, &["resolve"], &[("RUST_LOG", "debug")]);
    assert!(rust_log.stderr.contains("submodule(s)"), "{}", rust_log.stderr);
    // a plain directory (not a repo) warns; -q keeps warnings
    let (_tmp, plain) = fixture::minimal();
    let r = run(&plain, &["-q", "resolve"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("is not a git repository"), "{}", r.stderr);
    let r = run(&plain, &["resolve"], &[("RUST_LOG", "error")]);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}

#[test]
fn cli_actions_group_and_error_annotations() {
    let (_tmp, root) = fixture::minimal();
    fixture::write(&root, "libs/app/container.env", "IP=10.0.3.20/24\nID=12\nCORES=zero\n");
    let r = run(&root, &["resolve"], &[("GITHUB_ACTIONS", "true")]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.stdout, "", "stdout stays clean");
    let commands: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("::")).collect();
    assert_eq!(
        commands,
        vec![
            "::group::resolve",
            "::error file=libs/app/container.env,line=2::ID: ID (the vmid) must be between 100 and 999999999, found 12",
            "::error file=libs/app/container.env,line=3::CORES: expected CORES as a whole number, found `zero`",
            "::endgroup::",
        ]
    );
    assert!(
        r.stderr.contains("error: 2 problems in the input:\n  libs/app/container.env:2 (ID): ID (the vmid)"),
        "{}",
        r.stderr
    );
    // Gitea sets GITEA_ACTIONS too; outside Actions no workflow commands at all.
    let r = run(&root, &["resolve"], &[("GITEA_ACTIONS", "true")]);
    assert!(r.stderr.contains("::error file=libs/app/container.env,line=2::"), "{}", r.stderr);
    let r = run(&root, &["resolve"], &[]);
    assert!(!r.stderr.contains("::"), "{}", r.stderr);
    // Problems outside the repository's files carry no file=.
    fixture::write(&root, "libs/app/container.env", "IP=10.0.3.20/24\nID=120\n");
    let r = run(&root, &["resolve", "--stage", "qa_1"], &[("GITHUB_ACTIONS", "true"), ("PROXMOX_PORT", "http")]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let errors: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("::error")).collect();
    assert_eq!(
        errors,
        vec![
            "::error::--stage: stage `qa_1` must be a DNS label (letters, digits, `-`)",
            "::error::environment: PROXMOX_PORT: expected a TCP port 1–65535, found `http`",
        ]
    );
}

#[test]
fn cli_annotation_paths_are_relative_to_the_workspace() {
    let (tmp, root) = fixture::minimal();
    fixture::write(&root, "libs/app/container.env", "IP=10.0.3.20/24\nID=12\n");
    let ws = tmp.path().canonicalize().unwrap();
    let r = run(
        &ws,
        &["resolve", "--repo", "mono"],
        &[("GITHUB_ACTIONS", "true"), ("GITHUB_WORKSPACE", ws.to_str().unwrap())],
    );
    assert!(r.stderr.contains("::error file=mono/libs/app/container.env,line=2::ID: "), "{}", r.stderr);
}

// ---------------------------------------------------------------------------------------------
// Validation: one failing case per rule, each naming file and line (or key).

/// Writes `files` over the minimal fixture, resolves, and returns the problems rendered as
/// `file:line (key): message` lines.
fn problems_for(files: &[(&str, &str)]) -> Vec<String> {
    let (_tmp, root) = fixture::minimal();
    for (rel, text) in files {
        fixture::write(&root, rel, text);
    }
    match resolve_at(&root, "main") {
        Ok(inv) => panic!("expected problems, resolved {} containers", inv.containers.len()),
        Err(p) => p.iter().map(|p| p.to_string()).collect(),
    }
}

/// Asserts exactly one problem, at `location` (rendered `file[:line][ (key)]`), whose message
/// contains `needle`.
#[track_caller]
fn one_problem(files: &[(&str, &str)], location: &str, needle: &str) {
    let got = problems_for(files);
    assert_eq!(got.len(), 1, "{got:#?}");
    let (loc, msg) = got[0].split_once(": ").unwrap();
    assert_eq!(loc, location, "{}", got[0]);
    assert!(msg.contains(needle), "{:?} does not contain {needle:?}", got[0]);
}

const APP: &str = "libs/app/container.env";

fn app(extra: &str) -> String {
    format!("IP=10.0.3.20/24\nID=120\n{extra}")
}

#[test]
fn rule_id_range_and_format() {
    one_problem(
        &[(APP, "IP=10.0.3.20/24\nID=99\n")],
        "libs/app/container.env:2 (ID)",
        "between 100 and 999999999, found 99",
    );
    one_problem(&[(APP, "IP=10.0.3.20/24\nID=1000000000\n")], "libs/app/container.env:2 (ID)", "found 1000000000");
    one_problem(&[(APP, "IP=10.0.3.20/24\nID=+120\n")], "libs/app/container.env:2 (ID)", "whole number, found `+120`");
    one_problem(&[(APP, "IP=10.0.3.20/24\nID=abc\n")], "libs/app/container.env:2 (ID)", "whole number, found `abc`");
    one_problem(&[(APP, "IP=10.0.3.20/24\n")], "libs/app/container.env (ID)", "missing required key ID");
}

#[test]
fn rule_ip() {
    one_problem(&[(APP, "IP=10.0.3.300/24\nID=120\n")], "libs/app/container.env:1 (IP)", "expected an IPv4 address");
    one_problem(&[(APP, "IP=10.0.3.20/33\nID=120\n")], "libs/app/container.env:1 (IP)", "prefix length 1–32");
    one_problem(&[(APP, "IP=fe80::1\nID=120\n")], "libs/app/container.env:1 (IP)", "or `dhcp`");
    one_problem(&[(APP, "ID=120\n")], "libs/app/container.env (IP)", "missing required key IP");
}

#[test]
fn rule_cores_memory_swap_disk_boot() {
    one_problem(&[(APP, &app("CORES=0\n"))], "libs/app/container.env:3 (CORES)", "between 1 and 8192, found 0");
    one_problem(&[(APP, &app("MEMORY=8\n"))], "libs/app/container.env:3 (MEMORY)", "MEMORY (MiB) must be between 16");
    one_problem(&[(APP, &app("MEMORY=1G\n"))], "libs/app/container.env:3 (MEMORY)", "whole number, found `1G`");
    one_problem(&[(APP, &app("SWAP=-1\n"))], "libs/app/container.env:3 (SWAP)", "SWAP (MiB) as a whole number");
    one_problem(&[(APP, &app("DISK=local-lvm\n"))], "libs/app/container.env:3 (DISK)", "expected STORAGE:SIZE");
    one_problem(&[(APP, &app("DISK=local-lvm:0\n"))], "libs/app/container.env:3 (DISK)", "size in whole GiB");
    one_problem(&[(APP, &app("DISK=Local:8\n"))], "libs/app/container.env:3 (DISK)", "not a PVE storage id");
    one_problem(
        &[(APP, &app("BOOT=maybe\n"))],
        "libs/app/container.env:3 (BOOT)",
        "expected yes/no, true/false, on/off or 1/0 (any case), found `maybe`",
    );
}

#[test]
fn rule_mount_forms() {
    let at = "libs/app/container.env:3 (MOUNT)";
    one_problem(&[(APP, &app("MOUNT=Share!\n"))], at, "cannot read mount `Share!`");
    one_problem(&[(APP, &app("MOUNT=rel/dir:/data\n"))], at, "cannot read mount `rel/dir:/data`");
    one_problem(&[(APP, &app("MOUNT=/srv/data:data\n"))], at, "both paths must be absolute");
    one_problem(&[(APP, &app("MOUNT=/srv/../etc:/data\n"))], at, "both paths must be absolute");
    one_problem(&[(APP, &app("MOUNT=local-lvm:x:/data\n"))], at, "volume mount `local-lvm:x:/data`");
    one_problem(&[(APP, &app("MOUNT=/dev/../etc/shadow\n"))], at, "device path");
    one_problem(
        &[(APP, &app("MOUNT=/srv/a:/data,/srv/b:/data/\n"))],
        at,
        "uses /data again (already used by `/srv/a:/data`)",
    );
}

#[test]
fn rule_node_snapshot_hostname() {
    one_problem(&[(APP, &app("NODE=pve_1\n"))], "libs/app/container.env:3 (NODE)", "not a valid PVE node name");
    one_problem(
        &[(APP, &app("SNAPSHOT=/data,var/lib\n"))],
        "libs/app/container.env:3 (SNAPSHOT)",
        "snapshot path `var/lib` must be absolute",
    );
    one_problem(
        &[(APP, &app("REQUIRES=LOGIN,api-key\n"))],
        "libs/app/container.env:3 (REQUIRES)",
        "`api-key` is not a setting name: expected upper-case letters, digits and `_` (e.g. LOGIN)",
    );
    one_problem(
        &[("libs/my_app/container.env", "IP=10.0.3.30/24\nID=130\n")],
        "libs/my_app (hostname)",
        "hostname `my_app` (from the lib's directory name) is not a valid DNS label",
    );
}

#[test]
fn rule_duplicates_name_both_files() {
    one_problem(
        &[("libs/zzz/container.env", "IP=10.0.3.99/24\n\nID=120\n")],
        "libs/zzz/container.env:3 (ID)",
        "duplicate vmid 120: also used by `app` (libs/app/container.env:2)",
    );
    one_problem(
        &[("libs/zzz/container.env", "ID=199\nIP=\"10.0.3.20/16\"\n")],
        "libs/zzz/container.env:2 (IP)",
        "duplicate IP address 10.0.3.20: also used by `app` (libs/app/container.env:1)",
    );
    one_problem(
        &[("libs/config/container.env", "ID=199\nIP=10.0.3.99/24\n")],
        "libs/config (hostname)",
        "duplicate hostname config: also used by `config` (.)",
    );
    // A stage override creating the duplicate is named with its own file and line.
    let (_tmp, root) = fixture::minimal();
    fixture::write(&root, "libs/app/container.prod.env", "# prod\nID=100\n");
    let p = resolve_at(&root, "prod").unwrap_err();
    assert_eq!(
        p.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        vec!["libs/app/container.prod.env:2 (ID): duplicate vmid 100: also used by `config` (container.env:2)"]
    );
}

#[test]
fn rule_dotenv_substitutions_and_quotes() {
    let at = "libs/app/container.env:3";
    one_problem(&[(APP, &app("NAME=$(hostname)\n"))], at, "`$(hostname)` would be evaluated by a shell");
    one_problem(&[(APP, &app("NAME=\"`id -u`\"\n"))], at, "the backtick substitution `id -u` would be evaluated");
    one_problem(&[(APP, &app("NAME=${HOME}\n"))], at, "`${HOME}` would be evaluated");
    one_problem(&[(APP, &app("EXTRA=$HOME/x\n"))], at, "`$HOME` would be evaluated");
    one_problem(&[(APP, &app("NAME=\"unterminated\n"))], "libs/app/container.env:3", "unterminated double quote");
    one_problem(&[(APP, &app("NAME='unterminated\n"))], "libs/app/container.env:3", "unterminated single quote");
    one_problem(&[(APP, &app("NAME=\"a\"b\n"))], "libs/app/container.env:3", "unexpected text after the closing quote");
    one_problem(&[(APP, &app("NAME=two words\n"))], "libs/app/container.env:3", "quote the whole value");
    one_problem(&[(APP, &app("not an assignment\n"))], "libs/app/container.env:3", "expected KEY=value");
}

#[test]
fn rule_globals() {
    one_problem(
        &[("globals.json", "{\n  \"A\": \"x\",\n  \"B\": 5\n}\n")],
        "globals.json (B)",
        "expected a string value, found 5",
    );
    one_problem(&[("globals.local.json", "{\n  \"A\": \"x\",\n}\n")], "globals.local.json:3", "invalid JSON");
    one_problem(&[("globals.json", "[\"A\"]\n")], "globals.json", "expected a JSON object of string values");
    one_problem(&[("globals.json", "{\"my-var\": \"x\"}")], "globals.json (my-var)", "not a valid variable name");
    one_problem(
        &[("globals.json", "{\"GITEA_URL\": \"x\"}")],
        "globals.json (GITEA_URL)",
        "reserves variable names starting with `GITEA_`",
    );
    one_problem(
        &[("globals.json", "{\"tz\": \"x\", \"TZ\": \"y\"}")],
        "globals.json (TZ)",
        "`TZ` and `tz` are the same variable name",
    );
}

#[test]
fn rule_config_keys() {
    one_problem(
        &[("local/config.json", "{\n  \"proxmox\": {\n    \"hots\": \"pve\"\n  }\n}\n")],
        "local/config.json:3 (proxmox.hots)",
        "unknown key `hots`",
    );
    one_problem(
        &[("local/config.local.json", "{\n  \"logn\": \"x\"\n}\n")],
        "local/config.local.json:2 (logn)",
        "unknown key `logn`",
    );
    one_problem(
        &[("local/config.json", "{\"proxmox\": {\"mask\": \"33\"}}")],
        "local/config.json (proxmox.mask)",
        "prefix length 0–32",
    );
    one_problem(
        &[("local/config.json", "{\"proxmox\": \n\n {\"port\": 70000}}")],
        "local/config.json:3 (proxmox.port)",
        "TCP port",
    );
}

#[test]
fn rule_cron_line() {
    one_problem(
        &[("tasks/backup/run.sh", "#!/bin/bash\n# ! cron '61 * * * *'\necho\n")],
        "tasks/backup/run.sh:2",
        "invalid cron expression `61 * * * *`",
    );
    // The cron line is read from the task's script only.
    one_problem(
        &[
            ("tasks/backup/default.sh", "#!/bin/sh\n\n# ! cron '* * *'\n"),
            ("tasks/backup/other.sh", "# ! cron '0 3 * * *'\n"),
        ],
        "tasks/backup/default.sh:3",
        "invalid cron expression `* * *`",
    );
}

#[test]
fn rule_task_script() {
    one_problem(
        &[("tasks/backup/README.md", "no script here\n")],
        "tasks/backup",
        "no script: expected `default.*`, `main.*` or a single script",
    );
    one_problem(
        &[("tasks/backup/a.sh", "echo a\n"), ("tasks/backup/b.rb", "puts 'b'\n")],
        "tasks/backup",
        "several scripts (`a.sh`, `b.rb`) and none named `default.*` or `main.*`",
    );
    one_problem(
        &[("tasks/backup/main.sh", "echo a\n"), ("tasks/backup/main.py", "print(1)\n")],
        "tasks/backup",
        "several `main.*` scripts (`main.py`, `main.sh`)",
    );
}

/// The original project's layout: `tasks/deploy/default.rb` has no cron line (it is dispatched,
/// not scheduled) and resolves; the script is chosen by the rules (`default.*`, `main.*`, the
/// only script), whether the task has a cron line or not.
#[test]
fn tasks_with_and_without_a_cron_line() {
    let (_tmp, root) = fixture::minimal();
    for (rel, text) in [
        ("tasks/deploy/default.rb", "# Merges the release pull requests.\nputs 'deploy'\n"),
        ("tasks/deploy/README.md", "# ! cron '0 3 * * *' (in a file that is not the script)\n"),
        ("tasks/health/main.sh", "#!/bin/sh\n# ! cron '0 */3 * * *'\nexec \"$PROXMOX_GITOPS\" health\n"),
        ("tasks/health/helper.sh", "echo helper\n"),
        ("tasks/update/weekly", "#!/usr/bin/env bash\n# ! cron \"0 4 * * 0\"\n"),
        ("tasks/update/notes.txt", "not a script\n"),
    ] {
        fixture::write(&root, rel, text);
    }
    let inv = resolve_at(&root, "main").unwrap();
    let got: Vec<Value> = inv.tasks.iter().map(|t| serde_json::to_value(t).unwrap()).collect();
    assert_eq!(
        got,
        vec![
            json!({"name": "deploy", "dir": "tasks/deploy", "script": "tasks/deploy/default.rb", "cron": null}),
            json!({"name": "health", "dir": "tasks/health", "script": "tasks/health/main.sh", "cron": "0 */3 * * *"}),
            json!({"name": "update", "dir": "tasks/update", "script": "tasks/update/weekly", "cron": "0 4 * * 0"}),
        ]
    );
    assert_eq!(inv.tasks.iter().map(|t| t.scheduled()).collect::<Vec<_>>(), vec![false, true, true]);
}

#[test]
fn rule_lib_without_env_and_unchecked_submodule() {
    one_problem(
        &[("libs/empty/README", "x\n")],
        "libs/empty/container.env",
        "lib `empty` has no container.env and no configuration",
    );
    let f = fixture::standard();
    support::git::git(&f.root, &["submodule", "deinit", "-q", "-f", "libs/broker"]);
    let p = resolve_at(&f.root, "main").unwrap_err();
    assert_eq!(
        p.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        vec![
            "libs/broker: lib `broker` is a submodule that is not checked out; run `git submodule update --init --recursive` first"
        ]
    );
}

#[test]
fn rule_malformed_gitmodules_names_the_file() {
    let f = fixture::standard();
    fixture::write(&f.root, "libs/web/.gitmodules", "[submodule \"vendor/theme\"\n\tpath = vendor/theme\n");
    let p = resolve_at(&f.root, "main").unwrap_err();
    let got: Vec<String> = p.iter().map(|p| p.to_string()).collect();
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(got[0].starts_with("libs/web/.gitmodules: cannot parse: "), "{got:#?}");
}

#[test]
fn all_problems_are_reported_together() {
    let got = problems_for(&[
        ("container.env", "IP=10.0.3.10/24\nID=100\nCORES=-2\n"),
        (APP, "IP=10.0.3.20/40\nID=120\nMOUNT=share,bad:mount:x:y\n"),
        ("libs/b_ad/container.env", "IP=dhcp\nID=$(id)\n"),
        ("libs/dup/container.env", "IP=10.0.3.10\nID=100\n"),
        ("globals.json", "{\"A\": true}"),
        ("local/config.json", "{\"proxmox\": {\"nod\": \"x\"}}"),
        ("tasks/t/run.sh", "# ! cron 'never'\n"),
    ]);
    assert_eq!(
        got,
        vec![
            "container.env:3 (CORES): expected CORES as a whole number, found `-2`",
            "globals.json (A): expected a string value, found true (globals are flat string maps; quote it)",
            "libs/app/container.env:1 (IP): expected a prefix length 1–32 after `/`, found `40`",
            "libs/app/container.env:3 (MOUNT): cannot read mount `bad:mount:x:y`: expected a share name (`share`), HOST_PATH:CONTAINER_PATH, STORAGE:SIZE:CONTAINER_PATH or a /dev/… device",
            "libs/b_ad (hostname): hostname `b_ad` (from the lib's directory name) is not a valid DNS label: use letters, digits and `-` (no `_`), at most 63 characters",
            "libs/b_ad/container.env:2: `$(id)` would be evaluated by a shell; substitutions are not supported in env files (put a literal `$` or backtick in single quotes, or escape it with `\\` in double quotes)",
            "libs/dup/container.env:1 (IP): duplicate IP address 10.0.3.10: also used by `config` (container.env:1)",
            "libs/dup/container.env:2 (ID): duplicate vmid 100: also used by `config` (container.env:2)",
            "local/config.json:1 (proxmox.nod): unknown key `nod`; the `proxmox` section takes `host`, `port`, `user`, `password`, `token`, `secret`, `node`, `gateway`, `mask`, `interface`, `bridge`, `storage`, `template`, `share`",
            "tasks/t/run.sh:1: invalid cron expression `never`: 1 field(s), expected five (minute hour day-of-month month day-of-week, e.g. '0 3 * * *'; Gitea takes no `@daily`-style names)",
        ]
    );
}

#[test]
fn cli_reports_all_problems_and_writes_nothing() {
    let (_tmp, root) = fixture::minimal();
    fixture::write(&root, "container.env", "IP=10.0.3.10/24\nID=1\n");
    fixture::write(&root, APP, "IP=bogus\nID=120\nBOOT=perhaps\n");
    let r = run(&root, &["resolve", "--json"], &[("GITHUB_ACTIONS", "true")]);
    assert_eq!(r.code, 2);
    assert_eq!(r.stdout, "");
    let errors: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("::error")).collect();
    assert_eq!(
        errors,
        vec![
            "::error file=container.env,line=2::ID: ID (the vmid) must be between 100 and 999999999, found 1",
            "::error file=libs/app/container.env,line=1::IP: expected an IPv4 address (optionally with /prefix) or `dhcp`, found `bogus`",
            "::error file=libs/app/container.env,line=3::BOOT: expected yes/no, true/false, on/off or 1/0 (any case), found `perhaps`",
        ]
    );
    assert!(!root.join(".proxmox-gitops").exists(), "nothing is written on bad input");
}

// ---------------------------------------------------------------------------------------------
// Secrets never leave the process.

#[test]
fn secrets_never_reach_artifacts_or_logs() {
    let f = fixture::standard();
    let file_secrets = ["file-pve-pass-7Q2", "file-pve-secret-9Z4", "file-gitea-pass-3K8", "file-gitea-token-5M1"];
    fixture::write(
        &f.root,
        "local/config.local.json",
        &format!(
            "{{\"proxmox\": {{\"password\": \"{}\", \"token\": \"ci\", \"secret\": \"{}\"}},\n \"password\": \"{}\", \"token\": \"{}\"}}\n",
            file_secrets[0], file_secrets[1], file_secrets[2], file_secrets[3]
        ),
    );
    let env_secrets = [
        ("PROXMOX_PASSWORD", "env-pve-pass-1A1"),
        ("PROXMOX_SECRET", "env-pve-secret-2B2"),
        ("PASSWORD", "env-gitea-pass-3C3"),
        ("GITEA_TOKEN", "env-gitea-token-4D4"),
    ];
    let all: Vec<&str> = file_secrets.iter().copied().chain(env_secrets.iter().map(|(_, v)| *v)).collect();
    let out_file = f.tmp.path().join("github_output");
    let artifacts = f.tmp.path().join("artifacts");
    for actions in [false, true] {
        let mut env: Vec<(&str, &str)> = env_secrets.to_vec();
        env.push(("GITHUB_OUTPUT", out_file.to_str().unwrap()));
        if actions {
            env.push(("GITHUB_ACTIONS", "true"));
        }
        let mut logs = String::new();
        for args in [
            vec!["resolve", "-vv"],
            vec!["resolve", "--json"],
            vec!["plan", "--offline", "--ref", "refs/heads/release", "-vv"],
            vec!["plan", "--json", "--ref", "main"],
        ] {
            let mut a = args.clone();
            a.extend(["--artifacts", artifacts.to_str().unwrap()]);
            let r = run(&f.root, &a, &env);
            assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
            logs.push_str(&r.stdout);
            logs.push_str(&r.stderr);
        }
        // Under Actions each secret is announced once per run with ::add-mask:: (that line is
        // consumed by the runner); nothing else anywhere carries a secret.
        let (masks, rest): (Vec<&str>, Vec<&str>) = logs.lines().partition(|l| l.starts_with("::add-mask::"));
        if actions {
            for s in &all {
                assert_eq!(masks.iter().filter(|l| **l == format!("::add-mask::{s}")).count(), 4, "{s}: {masks:?}");
            }
            assert_eq!(masks.len(), 4 * all.len(), "{masks:?}");
        } else {
            assert!(masks.is_empty(), "{masks:?}");
        }
        let rest = rest.join("\n");
        let mut texts = vec![("logs".to_string(), rest)];
        texts.push(("GITHUB_OUTPUT".into(), std::fs::read_to_string(&out_file).unwrap()));
        let mut written = 0;
        for entry in walk(&artifacts) {
            texts.push((entry.display().to_string(), std::fs::read_to_string(&entry).unwrap()));
            written += 1;
        }
        assert_eq!(written, 2, "inventory.json and plan.json");
        for (what, text) in &texts {
            for s in &all {
                assert!(!text.contains(s), "secret {s} found in {what}:\n{text}");
            }
        }
        let inv: Value =
            serde_json::from_str(&std::fs::read_to_string(artifacts.join("inventory.json")).unwrap()).unwrap();
        assert_eq!(inv["settings"]["pve_auth"], "password");
        assert_eq!(inv["settings"]["pve_token"], "ci");
        assert_eq!(inv["settings"]["gitea_auth"], "token");
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// Hardening (issue 12): inputs refused with file and line, whole messages asserted.

/// Asserts that `files` over the minimal fixture give exactly the problems `expected`.
#[track_caller]
fn exactly(files: &[(&str, &str)], expected: &[&str]) {
    assert_eq!(problems_for(files), expected.iter().map(|s| s.to_string()).collect::<Vec<_>>());
}

#[test]
fn hardening_sizes_beyond_pve_bounds_name_the_bound_and_its_source() {
    exactly(
        &[(APP, &app("CORES=8193\n"))],
        &["libs/app/container.env:3 (CORES): CORES must be between 1 and 8192, found 8193 (PVE API `POST \
           /nodes/{node}/lxc` parameter `cores`)"],
    );
    exactly(
        &[(APP, &app("MEMORY=15\n"))],
        &["libs/app/container.env:3 (MEMORY): MEMORY (MiB) must be between 16 and 4294967295, found 15 (PVE API \
           `POST /nodes/{node}/lxc` parameter `memory`)"],
    );
    exactly(
        &[(APP, &app("SWAP=4294967296\n"))],
        &["libs/app/container.env:3 (SWAP): SWAP (MiB) must be between 0 and 4294967295, found 4294967296 (PVE API \
           `POST /nodes/{node}/lxc` parameter `swap`)"],
    );
    exactly(
        &[(APP, &app("DISK=local-lvm:8589934592\n"))],
        &[
            "libs/app/container.env:3 (DISK): size 8589934592 GiB after `local-lvm:` is larger than 8589934591 GiB, the \
           largest size PVE API `POST /nodes/{node}/lxc` can record (its size in bytes must fit a 64-bit integer)",
        ],
    );
    exactly(
        &[(APP, &app("MOUNT=local-lvm:99999999999999999999:/data\n"))],
        &["libs/app/container.env:3 (MOUNT): volume mount `local-lvm:99999999999999999999:/data`: size after \
           `local-lvm:` is larger than 8589934591 GiB, the largest size PVE API `POST /nodes/{node}/lxc` can record"],
    );
    // The largest values PVE accepts still resolve.
    let (_tmp, root) = fixture::minimal();
    fixture::write(&root, APP, &app("CORES=8192\nMEMORY=16\nSWAP=0\nDISK=local-lvm:8589934591\n"));
    let inv = resolve_at(&root, "main").unwrap();
    let c = &inv.containers[1];
    assert_eq!((c.cores, c.memory_mib, c.swap_mib, c.rootfs.size_gib), (8192, 16, 0, 8589934591));
}

#[test]
fn hardening_snapshot_paths_twice_or_nested_are_refused() {
    exactly(
        &[(APP, &app("SNAPSHOT=/data,/etc/app,/data/\n"))],
        &["libs/app/container.env:3 (SNAPSHOT): snapshot path `/data` is declared twice"],
    );
    exactly(
        &[(APP, &app("# data\nSNAPSHOT=\"/var/lib/app/db, /var/lib/app\"\n"))],
        &["libs/app/container.env:4 (SNAPSHOT): snapshot path `/var/lib/app/db` lies inside `/var/lib/app`: declare \
           only `/var/lib/app`"],
    );
    // A stage file bringing the overlap is named with its own line.
    let problems = |stage: &str| {
        let (_tmp, root) = fixture::minimal();
        fixture::write(&root, "libs/app/container.qa.env", "SNAPSHOT=/srv,/srv/x\n");
        resolve_at(&root, stage).map_or_else(|p| p.iter().map(|p| p.to_string()).collect(), |_| vec![])
    };
    assert_eq!(problems("main"), Vec::<String>::new());
    assert_eq!(
        problems("qa"),
        vec!["libs/app/container.qa.env:1 (SNAPSHOT): snapshot path `/srv/x` lies inside `/srv`: declare only `/srv`"]
    );
}

#[test]
fn hardening_empty_and_absent_required_keys_are_told_apart() {
    exactly(
        &[(APP, "IP=10.0.3.20/24\nID=\n")],
        &["libs/app/container.env:2 (ID): ID is empty: a value is required (the PVE vmid, 100–999999999)"],
    );
    exactly(
        &[(APP, "IP=\"\"\nID=120\n")],
        &["libs/app/container.env:1 (IP): IP is empty: a value is required (an IPv4 address such as \
           192.168.178.20/24, or `dhcp`)"],
    );
    // Emptied by an override: the override's line is named.
    exactly(
        &[("libs/app/container.local.env", "# local\nID=   # unset\n")],
        &["libs/app/container.local.env:2 (ID): ID is empty: a value is required (the PVE vmid, 100–999999999)"],
    );
    exactly(
        &[(APP, "IP=10.0.3.20/24\n")],
        &["libs/app/container.env (ID): missing required key ID: the key is absent from every env file of this lib \
           (the PVE vmid, 100–999999999)"],
    );
}

#[test]
fn hardening_control_characters_and_invalid_utf8_are_refused_at_their_line() {
    let tail = ": env files hold printable text only (a tab is allowed inside quotes)";
    exactly(
        &[(APP, &app("TITLE=\"\u{1b}]0;pwned\u{7}\"\n"))],
        &[&format!(
            "libs/app/container.env:3: control character U+001B (ESC, starts a terminal escape sequence) at column 8{tail}"
        )],
    );
    exactly(
        &[("container.local.env", "# ok: \u{1b} in a comment\nNOTE='a\u{85}b'\n")],
        &[&format!("container.local.env:2: control character U+0085 at column 8{tail}")],
    );
    // Through the CLI: exit 2, the line named, no raw escape on the terminal, nothing written.
    let (_tmp, root) = fixture::minimal();
    fixture::write(&root, APP, &app("TITLE=\"\u{1b}[2J\"\n"));
    std::fs::write(root.join("container.env"), b"IP=10.0.3.10/24\nID=100\nNAME=\xff\xfe\n").unwrap();
    let r = run(&root, &["resolve"], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!r.stderr.contains('\u{1b}'), "{:?}", r.stderr);
    assert_eq!(
        &r.stderr[r.stderr.find("error: ").unwrap()..],
        format!(
            "error: 2 problems in the input:\n  container.env:3: file is not valid UTF-8 text: byte 0xFF at column 6 is \
             not UTF-8; save the file as UTF-8\n  libs/app/container.env:3: control character U+001B (ESC, starts a \
             terminal escape sequence) at column 8{tail}\n"
        )
    );
    assert!(!root.join(".proxmox-gitops").exists(), "nothing is written on bad input");
}

#[test]
fn hardening_gitmodules_dangerous_urls_and_duplicate_paths_are_refused() {
    let (_tmp, root) = fixture::minimal();
    fixture::Repo::init(&root);
    let gitmodules = "\
[submodule \"vendor/a\"]
\tpath = vendor/a
\turl = https://git.example.com/a.git
[submodule \"evil\"]
\tpath = vendor/evil
\turl = ext::sh -c touch% /tmp/pwned
[submodule \"opt\"]
\turl = --upload-pack=touch /tmp/pwned
\tpath = vendor/opt
[submodule \"fd\"]
\tpath = vendor/fd
\turl = fd::3,4
[submodule \"again\"]
\tpath = vendor/a/
\turl = https://git.example.com/again.git
";
    fixture::write(&root, ".gitmodules", gitmodules);
    let hint = "use an https://, ssh:// or scp-form (host:path) URL, or a relative path";
    let expected = vec![
        format!(
            ".gitmodules:6 (submodule.evil.url): submodule `evil`: the URL uses git's remote-helper transport \
             `ext::`, which runs an arbitrary command; {hint}"
        ),
        format!(
            ".gitmodules:8 (submodule.opt.url): submodule `opt`: the URL starts with `-`, which git would read as a \
             command-line option; {hint}"
        ),
        format!(
            ".gitmodules:12 (submodule.fd.url): submodule `fd`: the URL uses git's remote-helper transport `fd::`, \
             which talks to inherited file descriptors; {hint}"
        ),
        ".gitmodules:14 (submodule.again.path): submodule `again` has path `vendor/a`, already used by submodule \
         `vendor/a` (line 2): each path may be registered once"
            .to_string(),
    ];
    let p = resolve_at(&root, "main").unwrap_err();
    assert_eq!(p.iter().map(|p| p.to_string()).collect::<Vec<_>>(), expected);

    // Through the CLI: exit 2, nothing written, the URLs reach no output.
    let r = run(&root, &["resolve", "--json"], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.stdout, "");
    assert!(!r.stderr.contains("pwned") && !r.stderr.contains("3,4"), "{}", r.stderr);
    assert!(!root.join(".proxmox-gitops").exists(), "nothing is written on bad input");

    // The same in a nested submodule's .gitmodules names that file.
    let f = fixture::standard();
    fixture::write(
        &f.root,
        "libs/web/.gitmodules",
        "[submodule \"vendor/theme\"]\n\tpath = vendor/theme\n\turl = ext::git-upload-pack %S\n",
    );
    let p = resolve_at(&f.root, "main").unwrap_err();
    assert_eq!(
        p.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        vec![format!(
            "libs/web/.gitmodules:3 (submodule.vendor/theme.url): submodule `vendor/theme`: the URL uses git's \
             remote-helper transport `ext::`, which runs an arbitrary command; {hint}"
        )]
    );
}

#[test]
fn hardening_proxmox_host_as_a_browser_url() {
    let (_tmp, root) = fixture::minimal();
    let artifacts = root.join("out");
    let a = artifacts.to_str().unwrap();
    // Accepted: the host and the port are taken from the URL.
    let r = run(&root, &["resolve", "--artifacts", a], &[("PROXMOX_HOST", "https://pve.example:8007")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let inv: Value = serde_json::from_str(&std::fs::read_to_string(artifacts.join("inventory.json")).unwrap()).unwrap();
    assert_eq!((&inv["settings"]["pve_host"], &inv["settings"]["pve_port"]), (&json!("pve.example"), &json!(8007)));
    std::fs::remove_dir_all(&artifacts).unwrap();
    // Refused, with the key and the forms expected; nothing written.
    let forms = "expected a host name, an IPv4 address, an IPv6 address (in brackets) or an https URL, e.g. \
                 `pve.example`, `10.0.0.2`, `[fd00::2]`, `https://pve.example:8006`";
    for (value, why) in [
        (
            "http://pve.example:8006",
            "`http://pve.example:8006` is not a PVE host: the scheme `http` is not supported: the PVE API is served over https only",
        ),
        (
            "https://pve.example:8006/api2/json",
            "`https://pve.example:8006/api2/json` is not a PVE host: a URL path, query or fragment is not supported (give `https://HOST[:PORT]`)",
        ),
        (
            "pve.example:8006",
            "`pve.example:8006` is not a PVE host: a port needs the URL form (`https://HOST:PORT`) or PROXMOX_PORT (proxmox.port)",
        ),
    ] {
        let r = run(&root, &["resolve", "--artifacts", a], &[("PROXMOX_HOST", value)]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert_eq!(
            &r.stderr[r.stderr.find("error: ").unwrap()..],
            format!("error: 1 problem in the input:\n  environment (PROXMOX_HOST): {why}; {forms}\n")
        );
        assert!(!artifacts.exists(), "nothing is written on bad input");
    }
}

/// The CLI's `resolve` on `root`: exit code 2 and exactly `problems` after `error: `.
fn refused_with(root: &Path, problems: &[&str]) {
    let r = run(root, &["resolve", "--artifacts", root.join("out").to_str().unwrap()], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let n = problems.len();
    let head = format!("error: {n} problem{} in the input:\n", if n == 1 { "" } else { "s" });
    let body: String = problems.iter().map(|p| format!("  {p}\n")).collect();
    assert_eq!(&r.stderr[r.stderr.find("error: ").unwrap()..], format!("{head}{body}"));
    assert!(!root.join("out").exists(), "nothing is written on bad input");
}

#[test]
fn issue16_two_configuration_engines_are_refused_naming_both_files() {
    let rule = "a lib has at most one of `playbook.yml` (Ansible), `configure.sh` (shell) and `recipes/default.rb` \
                (Cinc); remove the others";
    let (_tmp, root) = fixture::minimal();
    fixture::write(&root, "libs/app/playbook.yml", "- hosts: all\n");
    fixture::write(&root, "libs/app/configure.sh", "true\n");
    refused_with(
        &root,
        &[&format!("libs/app: two configuration engines, `libs/app/playbook.yml` and `libs/app/configure.sh`: {rule}")],
    );
    std::fs::remove_file(root.join("libs/app/playbook.yml")).unwrap();
    fixture::write(&root, "libs/app/recipes/default.rb", "package 'curl'\n");
    refused_with(
        &root,
        &[&format!(
            "libs/app: two configuration engines, `libs/app/configure.sh` and `libs/app/recipes/default.rb`: {rule}"
        )],
    );
    fixture::write(&root, "libs/app/playbook.yml", "- hosts: all\n");
    refused_with(
        &root,
        &[&format!(
            "libs/app: three configuration engines, `libs/app/playbook.yml`, `libs/app/configure.sh` and \
             `libs/app/recipes/default.rb`: {rule}"
        )],
    );
    // One engine: resolved as before.
    std::fs::remove_file(root.join("libs/app/playbook.yml")).unwrap();
    std::fs::remove_file(root.join("libs/app/configure.sh")).unwrap();
    let inv = resolve_at(&root, "main").unwrap();
    assert_eq!(inv.containers[1].engine, proxmox_gitops::inventory::Engine::Cinc);
}

#[test]
fn issue16_original_config_env_gets_a_rename_hint() {
    let (_tmp, root) = fixture::minimal();
    fixture::write(&root, "libs/old/config.env", "IP=10.0.3.30/24\nID=130\n");
    refused_with(
        &root,
        &[
            "libs/old/config.env: lib `old` has no container.env: `libs/old/config.env` is the original project's name for this file: rename it to \
           `container.env` (`git mv libs/old/config.env libs/old/container.env`)",
        ],
    );
    // Without config.env either, the problem is the missing container.env, as before.
    std::fs::remove_file(root.join("libs/old/config.env")).unwrap();
    refused_with(
        &root,
        &["libs/old/container.env: lib `old` has no container.env and no configuration: every directory under libs/ \
           is a container (container.env) or configuration (playbook.yml, configure.sh, recipes/default.rb or a \
           cookbook's metadata.rb)"],
    );
    // Both files: container.env is read, config.env is the lib's own (an extra file, not an error).
    fixture::write(&root, "libs/old/config.env", "X=1\n");
    fixture::write(&root, "libs/old/container.env", "IP=10.0.3.30/24\nID=130\n");
    assert_eq!(resolve_at(&root, "main").unwrap().containers.len(), 3);
}

#[test]
fn issue16_cinc_is_never_said_to_come_from_the_base_role() {
    // A Cinc lib resolves (the engine is known before any container exists); the failure when the
    // container has no cinc-client says that Cinc must already be there.
    let (_tmp, root) = fixture::minimal();
    fixture::write(&root, "libs/app/recipes/default.rb", "package 'curl'\n");
    assert_eq!(resolve_at(&root, "main").unwrap().containers[1].engine, proxmox_gitops::inventory::Engine::Cinc);
    assert_eq!(
        proxmox_gitops::steps::configure::cinc_missing(Path::new("libs/app")),
        "libs/app has recipes/default.rb but cinc-client is not installed in the container: nothing here installs \
         Cinc (the base role does not), it must already be there: use a template or image that has Cinc Client \
         (https://cinc.sh), or install it from your own base/ role"
    );
}

#[test]
fn issue28_a_bad_line_leaves_the_good_keys_of_its_file_in_the_cross_checks() {
    // The issue's case: an unreadable MEMORY and a duplicate ID in one container.local.env are
    // reported together.
    exactly(
        &[
            ("libs/zzz/container.env", "IP=10.0.3.99/24\nID=199\n"),
            ("libs/zzz/container.local.env", "MEMORY=2 GB\nID=120\n"),
        ],
        &[
            "libs/zzz/container.local.env:1: unquoted value contains whitespace; quote the whole value",
            "libs/zzz/container.local.env:2 (ID): duplicate vmid 120: also used by `app` (libs/app/container.env:2)",
        ],
    );
    // The other keys' own problems are reported in the same run too.
    exactly(
        &[(APP, "IP=10.0.3.20/24\nID=120\nMEMORY=$((2*1024))\nCORES=x\n")],
        &[
            "libs/app/container.env:3: `$((2*1024))` would be evaluated by a shell; substitutions are not supported in \
             env files (put a literal `$` or backtick in single quotes, or escape it with `\\` in double quotes)",
            "libs/app/container.env:4 (CORES): expected CORES as a whole number, found `x`",
        ],
    );
    // An unreadable line hides the value below it: no duplicate of the lower layer's ID, and no
    // "missing ID" next to the line that sets it.
    exactly(
        &[("libs/zzz/container.env", "IP=10.0.3.99/24\nID=120\n"), ("libs/zzz/container.local.env", "ID=1 2 0\n")],
        &["libs/zzz/container.local.env:1: unquoted value contains whitespace; quote the whole value"],
    );
    exactly(
        &[("libs/zzz/container.env", "IP=10.0.3.99/24\nID='120\n")],
        &["libs/zzz/container.env:2: unterminated single quote (multi-line values are not supported)"],
    );
}

#[test]
fn issue28_snapshot_of_a_pseudo_filesystem_is_refused() {
    let msg = |p: &str, fs: &str, inside: bool| {
        format!(
            "libs/app/container.env:3 (SNAPSHOT): snapshot path `{p}` is {}the pseudo-filesystem `{fs}`: it holds \
             kernel or runtime state, not data (its archive would be garbage or never end); declare the lib's data \
             directories",
            if inside { "inside " } else { "" }
        )
    };
    exactly(
        &[(APP, &app("SNAPSHOT=/proc,/srv/data,/sys/,/dev,/run,/run/app,/var/run/x\n"))],
        &[
            &msg("/proc", "/proc", false),
            &msg("/sys", "/sys", false),
            &msg("/dev", "/dev", false),
            &msg("/run", "/run", false),
            &msg("/run/app", "/run", true),
            &msg("/var/run/x", "/var/run", true),
        ],
    );
    // Look-alikes are data.
    let (_tmp, root) = fixture::minimal();
    fixture::write(&root, APP, &app("SNAPSHOT=/process,/srv/dev,/var/lib/run,/devices\n"));
    assert_eq!(
        resolve_at(&root, "main").unwrap().containers[1].snapshot_paths,
        vec!["/process", "/srv/dev", "/var/lib/run", "/devices"]
    );
}

#[test]
fn issue28_requires_a_name_nothing_could_provide_is_refused() {
    let at = "libs/app/container.env:3 (REQUIRES)";
    let setting = |n: &str| {
        format!(
            "{at}: `{n}` is a setting of proxmox-gitops, which is never handed to a lib's configuration: a lib gets \
             every global, its own keys, HOST, LOGIN, PASSWORD, IP, ID, HOSTNAME and STAGE"
        )
    };
    exactly(
        &[(APP, &app("REQUIRES=LOGIN,PROXMOX_PASSWORD,GITEA_TOKEN,PROXMOX_GITOPS_STAGE,GITHUB_TOKEN,API_KEY\n"))],
        &[
            &setting("PROXMOX_PASSWORD"),
            &setting("GITEA_TOKEN"),
            &setting("PROXMOX_GITOPS_STAGE"),
            &format!(
                "{at}: `GITHUB_TOKEN` can never be set: no global may have this name (`GITHUB_TOKEN`: Gitea reserves \
                 variable names starting with `GITHUB_`) and this lib's env files do not set it"
            ),
        ],
    );
    // The lib's own keys can provide any name; the contract's names are always provided.
    let (_tmp, root) = fixture::minimal();
    fixture::write(
        &root,
        APP,
        &app("REQUIRES=CI_MODE,PROXMOX_NODE,HOST,PGO_OUTPUT,STAGE,API_KEY\nCI_MODE=1\nPROXMOX_NODE=own\n"),
    );
    let inv = resolve_at(&root, "main").unwrap();
    let spec = &inv.containers[1];
    assert_eq!(spec.requires, vec!["CI_MODE", "PROXMOX_NODE", "HOST", "PGO_OUTPUT", "STAGE", "API_KEY"]);
    // And configure's check finds them provided: only API_KEY (no global, no key) is missing.
    let contract =
        proxmox_gitops::steps::configure::Contract { host: Some("http://127.0.0.1:9".into()), ..Default::default() };
    assert_eq!(proxmox_gitops::steps::configure::missing_requirements(&inv, spec, &contract), vec!["API_KEY"]);
}

/// The original project's monorepo layout (Proxmox-GitOps): quoted values, `container.stage.env`
/// files, Cinc cookbooks, a `libs/share` cookbook without a container.env that its metadata
/// applies to the control plane, the root `config/` cookbook, `tasks/*/default.rb`, and the
/// placeholder host its `local/config.json` ships.
fn original_layout() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap().join("mono");
    let env = |ip: &str, id: &str| {
        format!(
            "IP=\"{ip}\"\nID=\"{id}\"\nCORES=\"2\"\nMEMORY=\"2048\"\nSWAP=\"512\"\nDISK=\"local-lvm:8\"\nMOUNT=\"\"\nBOOT=\"yes\"\n"
        )
    };
    for (rel, text) in [
        ("container.env", env("10.0.3.254", "100")),
        ("config/recipes/default.rb", "include_recipe 'config::prepare'\n".into()),
        ("config/libraries/env.rb", "module Env; end\n".into()),
        ("libs/broker/container.env", env("10.0.3.109", "109")),
        ("libs/broker/container.stage.env", env("10.0.3.209", "209")),
        ("libs/broker/recipes/default.rb", "package 'mosquitto'\n".into()),
        ("libs/share/metadata.rb", "name 'share'\ndepends 'config'\n".into()),
        ("libs/share/recipes/default.rb", "package 'samba'\n".into()),
        ("tasks/health/default.rb", "# health\n".into()),
        ("globals.json", "{\"AUTO_DEPLOY\": \"false\"}\n".into()),
        (
            "local/config.json",
            "{\"proxmox\": {\"host\": \"192.168.178.\", \"user\": \"root@pam\", \"password\": \"\", \"node\": \"pve\"},\n \
             \"login\": \"proxmox\", \"password\": \"gitops\"}\n"
                .into(),
        ),
    ] {
        fixture::write(&root, rel, &text);
    }
    support::git::git(&root, &["init", "-q"]);
    (tmp, root)
}

#[test]
fn issue28_the_original_projects_monorepo_resolves() {
    let (_tmp, root) = original_layout();
    // Only the placeholder host is refused, and the message says what it is.
    let r = run(&root, &["resolve", "--artifacts", root.join("out").to_str().unwrap()], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(
        &r.stderr[r.stderr.find("error: ").unwrap()..],
        "error: 1 problem in the input:\n  local/config.json (proxmox.host): `192.168.178.` is not a PVE host: it looks \
         like a placeholder to complete: an IPv4 address has four numbers (e.g. `192.168.178.10`); expected a host \
         name, an IPv4 address, an IPv6 address (in brackets) or an https URL, e.g. `pve.example`, `10.0.0.2`, \
         `[fd00::2]`, `https://pve.example:8006`\n"
    );
    // Completed: it resolves, in both stages; `share` and the root cookbook are listed as
    // configuration, provisioned nowhere, and reported plainly as not applied.
    fixture::write(&root, "local/config.local.json", "{\"proxmox\": {\"host\": \"127.0.0.1\"}}\n");
    for stage in ["main", "stage"] {
        let inv = resolve_at(&root, stage).unwrap();
        assert_eq!(inv.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["config", "broker"]);
        assert_eq!(inv.container("broker").unwrap().vmid, if stage == "main" { 109 } else { 209 });
        assert_eq!(
            proxmox_gitops::artifact::to_value(&inv)["configs"],
            json!([
                { "name": "config", "dir": "config", "engine": "cinc" },
                { "name": "share", "dir": "libs/share", "engine": "cinc", "depends": ["config"] },
            ])
        );
    }
    let out = root.join("out");
    let r = run(&root, &["resolve", "--artifacts", out.to_str().unwrap()], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let warnings: Vec<&str> = r.stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 2, "{}", r.stderr);
    assert!(
        warnings[0].ends_with(
            "config: the original project's control-plane cookbook: not applied; proxmox-gitops configures the control \
             plane `config` from an engine file at the repository root (playbook.yml, configure.sh or \
             recipes/default.rb), and reads only config/libraries/ from here"
        ),
        "{warnings:?}"
    );
    assert!(
        warnings[1].ends_with(
            "libs/share: configuration only (no container.env): provisioned nowhere and not applied; the original \
             project applies it to `config` (metadata.rb: depends 'config'); proxmox-gitops applies a lib's \
             configuration only to its own container (add a container.env to make it one)"
        ),
        "{warnings:?}"
    );
    let tail: Vec<&str> = r.stdout.lines().skip_while(|l| !l.starts_with("CONFIGURATION")).collect();
    assert_eq!(
        tail,
        vec![
            "CONFIGURATION  DIR         ENGINE  SOURCE  APPLIED",
            "config         config      cinc    dir     no (provisioned nowhere)",
            "share          libs/share  cinc    dir     no (provisioned nowhere; the original applies it to config)",
            "",
            "TASK    SCRIPT                   SCHEDULE",
            "health  tasks/health/default.rb  none (dispatch, push to main)",
            "",
            &format!(
                "2 container(s), 2 configuration(s) not applied, 1 task(s), stage main; wrote {}",
                out.join("inventory.json").display()
            ),
        ]
    );
    // A directory with neither a container.env nor configuration is still refused.
    fixture::write(&root, "libs/empty/README", "x\n");
    let p = resolve_at(&root, "main").unwrap_err();
    assert_eq!(
        p.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        vec![
            "libs/empty/container.env: lib `empty` has no container.env and no configuration: every directory under \
             libs/ is a container (container.env) or configuration (playbook.yml, configure.sh, recipes/default.rb or \
             a cookbook's metadata.rb)"
        ]
    );
}
