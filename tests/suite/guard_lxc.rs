//! The safety rule with the lxc backend and a real container: a recreate (and the `destroy`
//! step) first takes a verified data snapshot through `lxc-attach`, and the provision artifact's
//! `protected_by` names it; a container that cannot be reached (stopped) is not destroyed.
//!
//! Needs root and LXC. The container is named `pgotest-grd-<pid>-app` and cloned by the backend
//! from an already cached base — `$PGO_TEST_LXC_BASE`, else the backend's default base
//! `pgo-base-bookworm` when it is ready, else any ready base of the lxc backend found in the LXC path (`<base>/proxmox-gitops-base.json`); only when there is none is
//! `pgotest-grd-base` bootstrapped (and kept for later runs). The container is removed when the
//! test ends, also when it fails. It is reached only through `lxc-attach` (no network traffic
//! beyond lxcbr0's DHCP).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use pretty_assertions::assert_eq;
use proxmox_gitops::artifact::ArtifactDir;
use proxmox_gitops::backend::lxc::{BASE_READY_FILE, LxcBackend, LxcOptions};
use proxmox_gitops::backend::{self, Backend};
use proxmox_gitops::exec::LxcAttach;
use proxmox_gitops::inventory::ContainerSpec;
use proxmox_gitops::lxc::LxcClient;
use proxmox_gitops::model::{Action, ApplyOptions, Outcome, Provision, RecreatePolicy};
use proxmox_gitops::steps::destroy::{self, DestroyOptions};
use proxmox_gitops::steps::provision as step;
use proxmox_gitops::steps::snapshot::{self as snap, SnapshotOptions};
use support::lxc;

fn lxc_path() -> PathBuf {
    let out = Command::new("lxc-config").arg("lxc.lxcpath").output().expect("lxc-config (is lxc installed?)");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A base to clone from (see the module docs).
fn base(lxc_path: &Path) -> String {
    if let Ok(b) = std::env::var("PGO_TEST_LXC_BASE") {
        return b;
    }
    let mut ready: Vec<String> = std::fs::read_dir(lxc_path)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join(BASE_READY_FILE).is_file() && e.path().join("config").is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    // The backend's default base (`pgo-base-bookworm`, what `local/run.sh` caches) first.
    let default = LxcOptions::default().base;
    ready.sort_by_key(|n| (*n != default, n.clone()));
    ready.into_iter().next().unwrap_or_else(|| "pgotest-grd-base".into())
}

/// Removes the container when dropped.
struct Cleanup(PathBuf, String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        lxc::force_remove(&self.0, &self.1);
    }
}

fn spec(name: &str) -> ContainerSpec {
    support::spec::spec(name, 9701).small_lxc().snapshot_paths(&["/srv/data"]).lib("app").build()
}

fn attach(lxc_path: &Path, name: &str, script: &str) -> (bool, String) {
    let out = Command::new("lxc-attach")
        .arg("-P")
        .arg(lxc_path)
        .args(["-n", name, "--", "/bin/sh", "-c", script])
        .output()
        .expect("lxc-attach");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn provision(
    b: &Backend,
    s: &ContainerSpec,
    policy: RecreatePolicy,
    opts: &ApplyOptions,
    dir: &ArtifactDir,
) -> Provision {
    let planned = backend::plan_all(b, vec![s.clone()], policy, 1).await;
    step::apply_all(b, planned, opts, 1, dir).await.unwrap().remove(0)
}

fn archives(share: &Path, name: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(share.join("snapshots").join(name))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.ends_with(".tar.gz"))
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn recreate_and_destroy_take_a_verified_snapshot_first() {
    let _heavy = support::heavy::area("guard_lxc");
    let lxc_path = lxc_path();
    let name = format!("pgotest-grd-{}-app", std::process::id());
    let _cleanup = Cleanup(lxc_path.clone(), name.clone());
    let tmp = tempfile::tempdir().unwrap();
    let share = tmp.path().join("share");
    let dir = ArtifactDir::new(tmp.path().join("artifacts"));
    let opts = LxcOptions { base: base(&lxc_path), share: share.clone(), ..LxcOptions::default() };
    let backend = LxcBackend::new(opts).await.expect("LXC must work on this machine for this test");
    proxmox_gitops::lxc::ensure_bridge("lxcbr0").await.expect("lxcbr0");
    let b = Backend::Lxc(backend);
    let s = spec(&name);
    let apply = ApplyOptions { share: share.clone(), wait_ssh: false, ..ApplyOptions::default() };

    // 1. Create, and put data into it.
    let p = provision(&b, &s, RecreatePolicy::Never, &apply, &dir).await;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    let (ok, _) = attach(
        &lxc_path,
        &name,
        "mkdir -p /srv/data/sub && echo hello > /srv/data/sub/file && ln -s sub/file /srv/data/link",
    );
    assert!(ok);

    // 2. Recreate: a verified snapshot first, named in protected_by and in the first action.
    let p = provision(&b, &s, RecreatePolicy::Always, &apply, &dir).await;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert!(matches!(p.plan.action, Action::Recreate { .. }), "{:?}", p.plan);
    let id = p.protected_by.clone().expect("protected_by");
    let stamp = id.strip_prefix(&format!("{name}-")).unwrap_or_else(|| panic!("{id}"));
    assert!(
        stamp.len() == 15 && stamp.as_bytes()[8] == b'-' && stamp.replace('-', "").bytes().all(|c| c.is_ascii_digit()),
        "{id}"
    );
    let archive = share.join("snapshots").join(&name).join(format!("{id}.tar.gz"));
    assert!(archive.is_file() && archive.with_extension("").with_extension("json").is_file(), "{}", archive.display());
    let first = &p.actions[0];
    assert_eq!(
        (first.action.as_str(), first.exit_status.as_deref(), first.detail.clone()),
        ("snapshot", Some("verified"), Some(format!("{id}: {}", archive.display())))
    );
    let names: Vec<&str> = p.actions.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(&names[..4], ["snapshot", "stop", "destroy", "clone"], "{names:?}");
    assert!(p.created);
    // The new container is fresh; the snapshot restores the data.
    assert_eq!(attach(&lxc_path, &name, "test -e /srv/data").0, false);
    let sopts = SnapshotOptions { share: share.clone(), keep: None, now: time::OffsetDateTime::now_utc() };
    let client = LxcClient::open(Some(lxc_path.clone())).expect("LXC client");
    let r = snap::restore(&s, &LxcAttach::new(client, &name), &sopts, None).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    assert_eq!(r.snapshot_id.as_deref(), Some(id.as_str()));
    assert_eq!(
        attach(&lxc_path, &name, "cat /srv/data/sub/file; readlink /srv/data/link"),
        (true, "hello\nsub/file\n".into())
    );

    // 3. Stopped: it cannot be reached, so the recreate is refused and nothing is touched.
    let st = Command::new("lxc-stop").arg("-P").arg(&lxc_path).args(["-n", &name]).status().unwrap();
    assert!(st.success());
    let p = provision(&b, &s, RecreatePolicy::Always, &apply, &dir).await;
    let expected = format!(
        "refusing to destroy {name} (vmid 9701): it declares data (/srv/data) but cannot be reached to snapshot it: \
         LXC container `{name}` is stopped, not running; start it (`lxc-start {}-n {name}`), or re-run with --no-snapshot \
         to recreate without a snapshot",
        if lxc_path == Path::new("/var/lib/lxc") { String::new() } else { format!("-P {} ", lxc_path.display()) }
    );
    assert_eq!(p.outcome, Outcome::Failed { error: expected.clone() });
    assert_eq!((p.actions.clone(), p.protected_by.clone()), (vec![], None));
    assert!(lxc_path.join(&name).join("config").is_file(), "the container is still there");
    assert_eq!(archives(&share, &name), vec![format!("{id}.tar.gz")]);

    // 4. The destroy step: refused likewise while stopped ...
    let dopts = DestroyOptions { share: share.clone(), no_snapshot: false };
    let d = destroy::destroy_all(&b, std::slice::from_ref(&s), &dopts, &dir).await.unwrap().remove(0);
    // The hint names the step the destroy is part of: here `destroy`, not a recreate.
    let expected = expected.replace("to recreate without a snapshot", "to destroy without a snapshot");
    assert_eq!(d.outcome, Outcome::Failed { error: expected });
    assert!(d.existed && !d.destroyed);
    assert!(lxc_path.join(&name).join("config").is_file());
    // ... and protected by a new verified snapshot once it runs.
    let st = Command::new("lxc-start").arg("-P").arg(&lxc_path).args(["-n", &name]).status().unwrap();
    assert!(st.success());
    let d = destroy::destroy_all(&b, std::slice::from_ref(&s), &dopts, &dir).await.unwrap().remove(0);
    assert_eq!(d.outcome, Outcome::Ok, "{d:#?}");
    assert!(d.existed && d.destroyed);
    let id2 = d.protected_by.clone().expect("protected_by");
    assert_ne!(id2, id);
    let mut both = vec![format!("{id}.tar.gz"), format!("{id2}.tar.gz")];
    both.sort();
    assert_eq!(archives(&share, &name), both);
    assert_eq!(d.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(), vec!["snapshot", "stop", "destroy"]);
    assert!(!lxc_path.join(&name).join("config").exists(), "destroyed");
}

/// `destroy --backend lxc` of a stopped container that declares data: refused with the lxc
/// backend's advice (`lxc-start`, no SSH), and the refusal is printed once (the table says
/// FAILED, the final error carries the text; no separate ERROR log line). The container is only
/// defined (a config and `proxmox-gitops.json` in a private LXC path), never started.
#[test]
fn destroy_cli_refuses_a_stopped_lxc_container_once_with_lxc_start_advice() {
    let _heavy = support::heavy::area("guard_lxc");
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let lxc = t.path().join("lxc");
    for (path, text) in [
        ("repo/container.env", "ID=100\nIP=127.0.20.1/24\n"),
        ("repo/base/tasks.yml", "- base\n"),
        ("repo/libs/broker/container.env", "ID=9711\nIP=dhcp\nSNAPSHOT=/srv/data\n"),
        ("repo/libs/broker/configure.sh", "echo hi\n"),
        ("lxc/broker/config", "lxc.uts.name = broker\n"),
        ("lxc/broker/proxmox-gitops.json", r#"{"vmid":9711,"name":"broker","base":"b","release":"bookworm"}"#),
    ] {
        let p = t.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .arg("--repo")
        .arg(&repo)
        .args(["destroy", "--backend", "lxc", "--container", "broker"])
        .env("PGO_LXC_PATH", &lxc)
        .env("PROXMOX_SHARE", t.path().join("share"))
        .env("NO_COLOR", "1")
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITEA_ACTIONS")
        .env_remove("PROXMOX_HOST")
        .env_remove("PGO_ARTIFACTS")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stdout,
        "NAME    VMID  CONTAINER  PROTECTED BY  RESULT\nbroker  9711  kept       -             FAILED\n"
    );
    let refusal = format!(
        "refusing to destroy broker (vmid 9711): it declares data (/srv/data) but cannot be reached to snapshot it: \
         LXC container `broker` is stopped, not running; start it (`lxc-start -P {} -n broker`), or re-run \
         with --no-snapshot to destroy without a snapshot",
        lxc.display()
    );
    assert!(stderr.ends_with(&format!("error: 1 of 1 container(s) failed:\nbroker: {refusal}\n")), "{stderr}");
    assert_eq!(stderr.matches("refusing to destroy").count(), 1, "{stderr}");
    assert!(!stderr.contains("make SSH work"), "{stderr}");
    assert!(lxc.join("broker/config").is_file(), "nothing destroyed");
}
