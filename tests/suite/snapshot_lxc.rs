//! Data snapshots, restore, the CLI and `lxc-snapshot` against a real LXC container.
//!
//! Needs root and LXC. The base container `pgotest-snap-base` (Debian bookworm, created with
//! `lxc-create -t debian` on first use, ~15 s with a warm debootstrap cache) is kept for later
//! runs; each run clones it to `pgotest-snap-<pid>-ct` and destroys the clone afterwards. The
//! container is reached with `lxc-attach` only (no network traffic).
//! Run: `cargo test --test suite snapshot_lxc::`.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use proxmox_gitops::artifact;
use proxmox_gitops::exec::{LxcAttach, run_collect};
use proxmox_gitops::lxc::LxcClient;
use proxmox_gitops::model::{BackendKind, Outcome};
use proxmox_gitops::snapshot::ct::{self, CtSnapshots};
use proxmox_gitops::snapshot::data::{self, TakeRequest};
use proxmox_gitops::snapshot::lxc::LxcSnapshots;
use proxmox_gitops::snapshot::scripts;
use proxmox_gitops::snapshot::store::Store;
use proxmox_gitops::steps::snapshot::{Snapshot, Verification};
use support::{provision, snapshot};
use time::macros::datetime;

const BASE: &str = "pgotest-snap-base";

fn sh(args: &[&str]) -> std::process::Output {
    Command::new(args[0]).args(&args[1..]).output().unwrap()
}

/// Bootstraps the base once per machine. The tests of this area run in parallel threads: the
/// lock keeps two of them from running `lxc-create` for the same name at once (the second would
/// fail with "container already exists").
fn ensure_base() {
    static BOOTSTRAP: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = BOOTSTRAP.lock().unwrap_or_else(|e| e.into_inner());
    if Path::new("/var/lib/lxc").join(BASE).join("config").exists() {
        return;
    }
    let out = sh(&["lxc-create", "-n", BASE, "-t", "debian", "--", "-r", "bookworm"]);
    assert!(out.status.success(), "lxc-create: {}", String::from_utf8_lossy(&out.stderr));
    let cfg = Path::new("/var/lib/lxc").join(BASE).join("config");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text: String =
        text.lines().filter(|l| !l.starts_with("lxc.apparmor.profile")).map(|l| format!("{l}\n")).collect::<String>()
            + "lxc.apparmor.profile = unconfined\n";
    std::fs::write(cfg, text).unwrap();
}

/// Polled until systemd has finished booting (at most 90 s per try, in the container).
/// "Attachable" is not enough: early in boot `systemd-tmpfiles --remove` empties `/tmp` (`D /tmp`
/// in `tmp.conf`), which deleted the snapshot script's working files when a test attached too
/// soon; and early on `systemctl` cannot reach systemd at all (empty output).
const WAIT_BOOTED: [&str; 5] = ["timeout", "90", "systemctl", "is-system-running", "--wait"];

/// True when [`WAIT_BOOTED`] printed a booted state ("degraded", exit status 1, counts too).
fn booted(stdout: &[u8]) -> bool {
    matches!(String::from_utf8_lossy(stdout).trim(), "running" | "degraded")
}

/// A clone of the base, stopped and destroyed (with its snapshots) on drop.
struct Clone {
    name: String,
}

impl Clone {
    fn new() -> Self {
        let name = format!("pgotest-snap-{}-ct", std::process::id());
        let out = sh(&["lxc-copy", "-n", BASE, "-N", &name]);
        assert!(out.status.success(), "lxc-copy: {}", String::from_utf8_lossy(&out.stderr));
        Clone { name }
    }

    fn start(&self) {
        let out = sh(&["lxc-start", "-n", &self.name]);
        assert!(out.status.success(), "lxc-start: {}", String::from_utf8_lossy(&out.stderr));
        // Poll until lxc-attach works, with backoff, bounded.
        let start = Instant::now();
        let mut delay = Duration::from_millis(100);
        loop {
            if booted(&sh(&[&["lxc-attach", "-n", &self.name, "--"][..], &WAIT_BOOTED[..]].concat()).stdout) {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{} did not finish booting", self.name);
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    fn stop(&self) {
        let out = sh(&["lxc-stop", "-n", &self.name, "-k"]);
        assert!(out.status.success(), "lxc-stop: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Clone {
    fn drop(&mut self) {
        let _ = sh(&["lxc-stop", "-n", &self.name, "-k"]);
        let _ = sh(&["lxc-destroy", "-s", "-n", &self.name]);
    }
}

/// Creates the lib's data inside the container (test-only script, constant).
const POPULATE: &str = r#"set -euo pipefail
mkdir -p /srv/app/a/b/c /var/lib/appdata
echo deep > /srv/app/a/b/c/deep.txt
ln -s a/b/c/deep.txt /srv/app/link
echo s3cret > /srv/app/secret
chown 4242:4242 /srv/app/secret
chmod 600 /srv/app/secret
head -c 5000000 /dev/urandom > /srv/app/big.bin
printf 'x=1\n' > /var/lib/appdata/state
"#;

#[test]
fn real_container_snapshot_restore_cli_and_lxc_snapshots() {
    let _heavy = support::heavy::area("snapshot_lxc");
    ensure_base();
    let ct = Clone::new();
    ct.start();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = LxcClient::open(Some(PathBuf::from("/var/lib/lxc"))).expect("LXC must work on this machine");
    let exec = LxcAttach::new(client.clone(), &ct.name);
    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("share");
    let store = Store::new(&share);
    let paths = vec!["/srv/app".to_string(), "/var/lib/appdata".to_string()];

    rt.block_on(async {
        let (_, st) = run_collect(&exec, &["bash", "-c", POPULATE], b"").await.unwrap();
        assert!(st.success(), "{}", st.describe());
        let req = snapshot::req("app", &paths, datetime!(2026-01-01 00:00:00 UTC));
        let taken = data::take(&exec, &store, &req).await.unwrap();
        let live = data::live_manifest(&exec, &paths).await.unwrap();
        assert_eq!(taken.manifest.entries, live);
        assert_eq!(taken.manifest.source, format!("LXC container {}", ct.name));
        let secret = live.iter().find(|e| e.path == "srv/app/secret").unwrap();
        assert_eq!((secret.mode, secret.uid, secret.gid), (0o600, 4242, 4242));

        // Wipe and dirty, then restore: identical tree.
        let (_, st) = run_collect(&exec, &["bash", "-c", "rm -rf /srv/app; echo junk > /var/lib/appdata/junk"], b"")
            .await
            .unwrap();
        assert!(st.success());
        data::restore(&exec, &store, "app", None).await.unwrap();
        assert_eq!(data::live_manifest(&exec, &paths).await.unwrap(), live);
        let (out, _) = run_collect(&exec, &["bash", "-c", "ls -a /srv /var/lib"], b"").await.unwrap();
        assert!(
            !String::from_utf8_lossy(&out).contains(".pgo-restore"),
            "staging left: {}",
            String::from_utf8_lossy(&out)
        );

        // Pre-snapshot hooks (a separate store, so the retention below is unaffected): an
        // executable hook runs before the manifest, so what it writes is in the archive;
        // non-executable files and names run-parts would skip are not run.
        let hooks_store = Store::new(&t.path().join("share-hooks"));
        let install = format!(
            "set -e; mkdir -p {dir}; cd {dir}
             printf '#!/bin/sh\necho flushed-by-hook > /var/lib/appdata/flushed\necho hook says hi >&2\n' > 10-flush
             chmod 755 10-flush
             printf '#!/bin/sh\nexit 9\n' > 20-off; chmod 644 20-off
             printf '#!/bin/sh\nexit 9\n' > 30-x.dpkg-old; chmod 755 30-x.dpkg-old
             mkdir -p {post}; cd {post}
             printf '#!/bin/sh\necho resumed >> /root/post-ran\n' > 10-resume; chmod 755 10-resume",
            dir = scripts::PRE_SNAPSHOT_DIR,
            post = scripts::POST_SNAPSHOT_DIR
        );
        let (_, st) = run_collect(&exec, &["bash", "-c", &install], b"").await.unwrap();
        assert!(st.success(), "{}", st.describe());
        let req = snapshot::req("app", &paths, datetime!(2026-01-02 00:00:00 UTC));
        let hooked = data::take(&exec, &hooks_store, &req).await.unwrap();
        let flushed = hooked.manifest.entries.iter().find(|e| e.path == "var/lib/appdata/flushed");
        assert_eq!(flushed.map(|e| e.size), Some("flushed-by-hook\n".len() as u64), "{:?}", hooked.manifest.entries);
        // The post-snapshot hook ran once the archive was complete.
        let exec_ref = &exec;
        let resumed = |n: usize| async move {
            let (out, _) = run_collect(exec_ref, &["cat", "/root/post-ran"], b"").await.unwrap();
            assert_eq!(String::from_utf8_lossy(&out), "resumed\n".repeat(n));
        };
        resumed(1).await;

        // A failing hook fails the snapshot, names itself, and leaves no archive.
        let fail = format!(
            "printf '#!/bin/sh\necho cannot flush >&2\nexit 3\n' > {dir}/40-fail; chmod 755 {dir}/40-fail",
            dir = scripts::PRE_SNAPSHOT_DIR
        );
        let (_, st) = run_collect(&exec, &["bash", "-c", &fail], b"").await.unwrap();
        assert!(st.success(), "{}", st.describe());
        let req = TakeRequest { now: datetime!(2026-01-03 00:00:00 UTC), ..req };
        let e = data::take(&exec, &hooks_store, &req).await.unwrap_err().to_string();
        assert!(e.contains("cannot flush"), "{e}");
        // A failed snapshot still runs the post-snapshot hooks: what a pre hook stopped runs again.
        resumed(2).await;
        assert!(
            e.contains(&format!(
                "pre-snapshot hook {}/40-fail failed with exit code 3; no snapshot taken",
                scripts::PRE_SNAPSHOT_DIR
            )),
            "{e}"
        );
        assert_eq!(
            snapshot::files(&hooks_store.lib_dir("app")),
            vec!["app-20260102-000000.json".to_string(), "app-20260102-000000.tar.gz".to_string()],
            "only the first hooked archive, no temporary file"
        );
        let cleanup = format!(
            "rm -rf {} {} /var/lib/appdata/flushed /root/post-ran",
            scripts::PRE_SNAPSHOT_DIR,
            scripts::POST_SNAPSHOT_DIR
        );
        let (_, st) = run_collect(&exec, &["bash", "-c", &cleanup], b"").await.unwrap();
        assert!(st.success(), "{}", st.describe());
    });

    // The CLI, with the transport chosen from a provision artifact of the lxc backend.
    let artifacts = t.path().join("artifacts");
    let inv_path = snapshot::write_inventory(t.path(), &artifacts, &share, vec![snapshot::spec("app", &paths)]);
    provision::write(&artifacts, &provision::running(BackendKind::Lxc, "app", 4242, &ct.name));
    let out = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .args(["--artifacts"])
        .arg(&artifacts)
        .args(["snapshot", "--container", "app", "--keep", "1", "--inventory"])
        .arg(&inv_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let a: Snapshot = artifact::read(&artifacts.join("snapshot/app.json")).unwrap();
    assert_eq!(a.verification, Verification::Verified);
    assert_eq!(a.outcome, Outcome::Ok);
    assert_eq!(a.pruned, vec![store.lib_dir("app").join("app-20260101-000000.tar.gz")]);
    // The running container's snapshot: frozen for the copy, the pause reported, not stopped.
    let record = a.ct_snapshot.clone().unwrap_or_else(|| panic!("a container snapshot: {a:#?}"));
    assert!(record.downtime_ms.is_some(), "{record:?}");
    assert_eq!(a.warnings, Vec::<String>::new());
    assert_eq!(store.list("app").unwrap().len(), 1);
    assert_eq!(rt.block_on(client.state(&ct.name)).unwrap().as_str(), "running", "thawed after the copy");
    let listed = sh(&["lxc-snapshot", "-n", &ct.name, "-L", "-C"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.contains(&record.name), "lxc-snapshot lists the frozen snapshot by its comment: {listed}");
    let human = String::from_utf8_lossy(&out.stdout);
    assert!(human.starts_with("NAME  OPERATION  SNAPSHOT"), "{human}");
    // Out of the way of the named snapshots below.
    rt.block_on(LxcSnapshots::new(client.clone(), &ct.name).delete(&record.name)).unwrap();

    // --data-only: the verified archive alone, no copy of the rootfs.
    let out = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .args(["--artifacts"])
        .arg(&artifacts)
        .args(["snapshot", "--container", "app", "--data-only", "--keep", "1", "--inventory"])
        .arg(&inv_path)
        .output()
        .unwrap();
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let a: Snapshot = artifact::read(&artifacts.join("snapshot/app.json")).unwrap();
    assert_eq!((&a.verification, a.ct_snapshot.is_none()), (&Verification::Verified, true), "{a:#?}");
    assert_eq!(client.list_snapshots(&ct.name).unwrap().len(), 0, "--data-only took a container snapshot");
    assert_eq!((store.list("app").unwrap().len(), a.pruned.len()), (1, 1), "retention applies as before");

    // lxc-snapshot through the CtSnapshots trait (the container must be stopped).
    ct.stop();
    let snaps = LxcSnapshots::new(client, &ct.name);
    rt.block_on(async {
        let now = datetime!(2026-02-01 00:00:00 UTC);
        let a = ct::take(&snaps, now, "first").await.unwrap();
        let b = ct::take(&snaps, now, "second").await.unwrap();
        assert_eq!((a.name.as_str(), b.name.as_str()), ("pgo-20260201-000000", "pgo-20260201-000000-2"));
        let listed: Vec<(String, String)> =
            snaps.list().await.unwrap().into_iter().map(|s| (s.name, s.description)).collect();
        assert_eq!(
            listed,
            vec![("pgo-20260201-000000".into(), "first".into()), ("pgo-20260201-000000-2".into(), "second".into())]
        );
        let e = snaps.create("pgo-20260201-000000", "again").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("LXC container {}: snapshot name `pgo-20260201-000000` is already used", ct.name)
        );
        ct::rollback(&snaps, "pgo-20260201-000000-2").await.unwrap();
        let e = ct::rollback(&snaps, "pgo-nope").await.unwrap_err();
        assert_eq!(e.to_string(), format!("LXC container {}: no snapshot named `pgo-nope`", ct.name));
        assert_eq!(ct::prune(&snaps, 1).await.unwrap(), vec!["pgo-20260201-000000".to_string()]);
        let left: Vec<String> = snaps.list().await.unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(left, vec!["pgo-20260201-000000-2".to_string()]);
    });

    // The CLI's --list and --rollback (the container is stopped now).
    let cli = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
            .args(["--artifacts"])
            .arg(&artifacts)
            .args(["snapshot", "--container", "app", "--share"])
            .arg(&share)
            .args(extra)
            .args(["--inventory"])
            .arg(&inv_path)
            .output()
            .unwrap()
    };
    let out = cli(&["--list"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let kept = store.list("app").unwrap();
    let lines: Vec<Vec<&str>> = stdout.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0][..3], ["app", "data", kept[0].id.as_str()], "{stdout}");
    assert_eq!(lines[1], ["app", "container", "pgo-20260201-000000-2", "-"], "{stdout}");
    // The lib declares SNAPSHOT paths: a rollback takes a data snapshot first, which a stopped
    // container refuses; nothing is rolled back.
    let out = cli(&["--rollback", "pgo-20260201-000000-2"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("app: no rollback: the data snapshot taken first failed"), "{stderr}");
    assert!(stderr.contains("re-run with --no-snapshot to roll back without a snapshot"), "{stderr}");
    let out = cli(&["--rollback", "pgo-nope", "--no-snapshot"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no snapshot named `pgo-nope`"));
    let out = cli(&["--rollback", "pgo-20260201-000000-2", "--no-snapshot"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("app: rolled back to pgo-20260201-000000-2"), "{stderr}");
}

/// A full copy of the base in another LXC path (not LXC's default), stopped and destroyed (with
/// its snapshots) on drop; the LXC path goes with its temporary directory.
struct ElsewhereClone {
    lxc_path: tempfile::TempDir,
    name: String,
}

impl ElsewhereClone {
    fn new() -> Self {
        let lxc_path = tempfile::Builder::new().prefix("pgotest-lxcpath-").tempdir_in("/var/tmp").unwrap();
        let name = format!("pgotest-lxcp-{}-ct", std::process::id());
        let out = Command::new("lxc-copy")
            .args(["-P", "/var/lib/lxc", "-n", BASE, "-p"])
            .arg(lxc_path.path())
            .args(["-N", &name])
            .output()
            .unwrap();
        assert!(out.status.success(), "lxc-copy: {}", String::from_utf8_lossy(&out.stderr));
        ElsewhereClone { lxc_path, name }
    }

    fn path(&self) -> &Path {
        self.lxc_path.path()
    }

    fn tool(&self, tool: &str, args: &[&str]) -> std::process::Output {
        Command::new(tool).arg("-P").arg(self.path()).args(["-n", &self.name]).args(args).output().unwrap()
    }
}

impl Drop for ElsewhereClone {
    fn drop(&mut self) {
        let _ = self.tool("lxc-stop", &["-k"]);
        let _ = self.tool("lxc-destroy", &["-s"]);
    }
}

/// Issue 11: with `PGO_LXC_PATH` naming another LXC path than `/var/lib/lxc`, the `snapshot`
/// command finds the container there — `lxc-attach` for the data snapshot and its restore,
/// `lxc-snapshot` for the container snapshot and its rollback — instead of looking in LXC's
/// default path (where no such container exists).
#[test]
fn snapshot_and_restore_under_a_non_default_lxc_path() {
    let _heavy = support::heavy::area("snapshot_lxc");
    ensure_base();
    let ct = ElsewhereClone::new();
    assert!(!Path::new("/var/lib/lxc").join(&ct.name).exists(), "the container lives only in {}", ct.path().display());
    let out = ct.tool("lxc-start", &[]);
    assert!(out.status.success(), "lxc-start: {}", String::from_utf8_lossy(&out.stderr));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = LxcClient::open(Some(ct.path().to_path_buf())).expect("LXC must work on this machine");
    let exec = LxcAttach::new(client, &ct.name);
    let start = Instant::now();
    let mut delay = Duration::from_millis(100);
    while !rt.block_on(run_collect(&exec, &WAIT_BOOTED, b"")).is_ok_and(|(out, _)| booted(&out)) {
        assert!(start.elapsed() < Duration::from_secs(60), "{} did not finish booting", ct.name);
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(2));
    }
    let populate = "set -e; mkdir -p /srv/app/sub; echo kept > /srv/app/sub/file; chmod 640 /srv/app/sub/file";
    let (_, st) = rt.block_on(run_collect(&exec, &["bash", "-c", populate], b"")).unwrap();
    assert!(st.success(), "{}", st.describe());

    let t = tempfile::tempdir().unwrap();
    let share = t.path().join("share");
    let artifacts = t.path().join("artifacts");
    let paths = vec!["/srv/app".to_string()];
    let inv_path = snapshot::write_inventory(t.path(), &artifacts, &share, vec![snapshot::spec("app", &paths)]);
    provision::write(&artifacts, &provision::running(BackendKind::Lxc, "app", 4242, &ct.name));
    let cli = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
            .env("PGO_LXC_PATH", ct.path())
            .arg("--artifacts")
            .arg(&artifacts)
            .args(["snapshot", "--container", "app", "--share"])
            .arg(&share)
            .args(["--inventory"])
            .arg(&inv_path)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    // 1. A data snapshot through lxc-attach in the configured LXC path.
    let (code, stdout, stderr) = cli(&[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let taken: Snapshot = artifact::read(&artifacts.join("snapshot/app.json")).unwrap();
    assert_eq!((taken.verification, taken.outcome), (Verification::Verified, Outcome::Ok));

    // 2. Lose the data, restore it through the same path.
    let (_, st) = rt.block_on(run_collect(&exec, &["bash", "-c", "rm -rf /srv/app"], b"")).unwrap();
    assert!(st.success());
    let (code, stdout, stderr) = cli(&["--restore"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let restored: Snapshot = artifact::read(&artifacts.join("snapshot/app.json")).unwrap();
    assert_eq!(restored.snapshot_id, taken.snapshot_id);
    assert_eq!(restored.verification, Verification::Verified);
    let (out, st) = rt
        .block_on(run_collect(&exec, &["bash", "-c", "cat /srv/app/sub/file; stat -c %a /srv/app/sub/file"], b""))
        .unwrap();
    assert!(st.success(), "{}", st.describe());
    assert_eq!(String::from_utf8_lossy(&out), "kept\n640\n");

    // 3. A container snapshot (lxc-snapshot needs the container stopped; a lib without SNAPSHOT
    //    paths takes only that), listed and rolled back in the configured LXC path.
    let out = ct.tool("lxc-stop", &["-k"]);
    assert!(out.status.success(), "lxc-stop: {}", String::from_utf8_lossy(&out.stderr));
    snapshot::write_inventory(t.path(), &artifacts, &share, vec![snapshot::spec("app", &[])]);
    let (code, stdout, stderr) = cli(&[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let a: Snapshot = artifact::read(&artifacts.join("snapshot/app.json")).unwrap();
    let record = a.ct_snapshot.clone().unwrap_or_else(|| panic!("a container snapshot: {a:#?}"));
    assert!(
        ct.path().join(&ct.name).join("snaps/snap0/comment").is_file(),
        "lxc-snapshot wrote into {}",
        ct.path().display()
    );
    let (code, stdout, stderr) = cli(&["--list"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["app", "container", &record.name, "-"]),
        "{stdout}"
    );
    let (code, stdout, stderr) = cli(&["--rollback", &record.name]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stderr.contains(&format!("app: rolled back to {}", record.name)), "{stderr}");
}
