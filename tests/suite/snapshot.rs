//! Data snapshots end to end with the local executor: the fixed container scripts run with bash
//! on this host (as root) against temp dirs, the runner side writes and verifies real archives.
//! Run: `cargo test --test suite snapshot::` (as root: it chowns a file to uid 4242).

use crate::support;

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use proxmox_gitops::exec::LocalExec;
use proxmox_gitops::inventory::ContainerSpec;
use proxmox_gitops::model::{BackendKind, Outcome};
use proxmox_gitops::snapshot::data::{self, DataError};
use proxmox_gitops::snapshot::guard::{self, Protection};
use proxmox_gitops::snapshot::store::{ArchiveManifest, Store};
use proxmox_gitops::steps::snapshot::{self as step, Operation, SnapshotOptions, Verification};
use support::snapshot::*;
use time::macros::datetime;

fn staging_left(dir: &Path) -> Vec<String> {
    files(dir).into_iter().filter(|f| f.starts_with(".pgo-restore")).collect()
}

/// The time the tests take their first snapshot at.
const NOW: time::OffsetDateTime = datetime!(2026-11-30 16:01:02 UTC);

/// Snapshots with the local executor in a temp dir: the test data under `data/` (with the big
/// file when asked), the store in `share/`.
struct Local {
    t: tempfile::TempDir,
    data_root: PathBuf,
    paths: Vec<String>,
    store: Store,
    exec: LocalExec,
}

fn local(with_big: bool) -> Local {
    let t = tempfile::tempdir().unwrap();
    let data_root = t.path().join("data");
    let paths = make_data(&data_root, with_big);
    let store = Store::new(&t.path().join("share"));
    Local { t, data_root, paths, store, exec: LocalExec::new() }
}

/// A temp dir with an artifacts directory, a share and an inventory artifact of `specs`, for
/// running the binary's `snapshot`: (dir, artifacts, share, inventory).
fn cli_fixture(specs: Vec<ContainerSpec>) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let artifacts = t.path().join("artifacts");
    let share = t.path().join("share");
    let inv = write_inventory(t.path(), &artifacts, &share, specs);
    (t, artifacts, share, inv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_is_verified_and_restores_an_identical_tree() {
    let Local { t, data_root, paths, store, exec } = local(true);
    let before = walk(&paths);

    let taken = data::take(&exec, &store, &req("app", &paths, NOW)).await.unwrap();
    // The container's manifest equals an independent walk of the data.
    assert_eq!(taken.manifest.entries, before);
    assert_eq!(taken.manifest.id, "app-20261130-160102");
    assert_eq!(taken.archive, t.path().join("share/snapshots/app/app-20261130-160102.tar.gz"));
    assert_eq!(
        files(&t.path().join("share/snapshots/app")),
        vec!["app-20261130-160102.json", "app-20261130-160102.tar.gz"]
    );
    let on_disk: ArchiveManifest = proxmox_gitops::artifact::read(&taken.manifest_path).unwrap();
    assert_eq!(on_disk, taken.manifest);
    assert_eq!(on_disk.entry_count, before.len() as u64);
    assert_eq!(on_disk.data_bytes, before.iter().map(|e| e.size).sum::<u64>());
    assert!(on_disk.data_bytes > BIG as u64);
    assert_eq!(on_disk.archive_bytes, std::fs::metadata(&taken.archive).unwrap().len());
    assert_eq!(on_disk.paths, paths);
    assert_eq!(on_disk.digest, proxmox_gitops::snapshot::manifest::digest(&before));
    let secret = before.iter().find(|e| e.path.ends_with("app/secret")).unwrap();
    assert_eq!((secret.mode, secret.uid, secret.gid), (0o600, 4242, 4242));
    let link = before.iter().find(|e| e.path.ends_with("app/link")).unwrap();
    assert_eq!(link.target.as_deref(), Some("a/b/c/deep.txt"));

    // Wipe one path, dirty the other: the restore brings back exactly the snapshot.
    std::fs::remove_dir_all(data_root.join("app")).unwrap();
    std::fs::write(data_root.join("conf/stray.tmp"), "x").unwrap();
    std::fs::write(data_root.join("conf/app.conf"), "port=1").unwrap();
    let restored = data::restore(&exec, &store, "app", None).await.unwrap();
    assert_eq!(restored.stored.id, "app-20261130-160102");
    assert_eq!(walk(&paths), before);
    assert_eq!(staging_left(&data_root), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_byte_fails_restore_and_restores_nothing() {
    let Local { t, data_root, paths, store, exec } = local(false);
    let taken = data::take(&exec, &store, &req("app", &paths, NOW)).await.unwrap();
    let mut bytes = std::fs::read(&taken.archive).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&taken.archive, bytes).unwrap();
    std::fs::remove_dir_all(data_root.join("app")).unwrap();
    let conf_before = walk(&paths[1..]);

    let e = data::restore(&exec, &store, "app", None).await.unwrap_err();
    assert!(matches!(e, DataError::Corrupt { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("archive {} failed verification: ", taken.archive.display())), "{msg}");
    assert!(msg.ends_with("; nothing was restored"), "{msg}");
    assert!(!data_root.join("app").exists(), "nothing may be restored");
    assert_eq!(walk(&paths[1..]), conf_before);
    assert_eq!(staging_left(&data_root), Vec::<String>::new());

    // The step records the failed verification in its artifact.
    let opts = SnapshotOptions { share: t.path().join("share"), keep: None, now: datetime!(2026-11-30 17:00:00 UTC) };
    let a = step::restore(&spec("app", &paths), &exec, &opts, None).await;
    assert_eq!(a.verification, Verification::Failed);
    assert!(
        matches!(&a.outcome, Outcome::Failed { error } if error.contains("failed verification")),
        "{:?}",
        a.outcome
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newest_is_chosen_by_time_not_by_name() {
    let Local { t: _t, data_root, paths, store, exec } = local(false);
    let now = NOW;
    let v1 = walk(&paths);
    let first = data::take(&exec, &store, &req("app", &paths, now)).await.unwrap();
    std::fs::write(data_root.join("app/top.txt"), "second version\n").unwrap();
    let v2 = walk(&paths);
    let second = data::take(&exec, &store, &req("app", &paths, now)).await.unwrap();
    assert_eq!(
        (first.manifest.id.as_str(), second.manifest.id.as_str()),
        ("app-20261130-160102", "app-20261130-160102-2")
    );
    // The premise: by file name, the older archive sorts last.
    let names = files(&store.lib_dir("app"));
    let archives: Vec<&String> = names.iter().filter(|n| n.ends_with(".tar.gz")).collect();
    assert_eq!(archives, ["app-20261130-160102-2.tar.gz", "app-20261130-160102.tar.gz"]);

    std::fs::remove_dir_all(data_root.join("app")).unwrap();
    let r = data::restore(&exec, &store, "app", None).await.unwrap();
    assert_eq!(r.stored.id, "app-20261130-160102-2");
    assert_eq!(walk(&paths), v2);
    let r = data::restore(&exec, &store, "app", Some("app-20261130-160102")).await.unwrap();
    assert_eq!(r.stored.id, "app-20261130-160102");
    assert_eq!(walk(&paths), v1);
    // A bare second picks the newest of that second.
    let r = data::restore(&exec, &store, "app", Some("20261130-160102")).await.unwrap();
    assert_eq!(r.stored.id, "app-20261130-160102-2");
    let e = data::restore(&exec, &store, "app", Some("20261130-170000")).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "--at `20261130-170000`: no snapshot of app at that time; available: 20261130-160102, 20261130-160102-2"
    );
    let e = data::restore(&exec, &store, "app", Some("yesterday")).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "--at `yesterday`: expected a snapshot time YYYYMMDD-HHMMSS (UTC), optionally with -N, or a snapshot id \
         <lib>-YYYYMMDD-HHMMSS[-N]"
    );
    let e = data::restore(&exec, &store, "other", None).await.unwrap_err();
    assert_eq!(e.to_string(), format!("no snapshot of other in {}", store.lib_dir("other").display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_prunes_older_archives_of_that_lib_only_and_the_artifact_says_so() {
    let Local { t, paths, store, exec, .. } = local(false);
    let share = t.path().join("share");
    let other_paths = vec![paths[1].clone()];
    data::take(&exec, &store, &req("other", &other_paths, datetime!(2020-01-01 00:00:00 UTC))).await.unwrap();
    for now in [datetime!(2026-01-01 00:00:00 UTC), datetime!(2026-02-01 00:00:00 UTC)] {
        data::take(&exec, &store, &req("app", &paths, now)).await.unwrap();
    }
    let spec = spec("app", &paths);
    let opts = SnapshotOptions { share: share.clone(), keep: Some(2), now: datetime!(2026-03-01 00:00:00 UTC) };
    let a = step::snapshot(&spec, &exec, None, &opts).await;
    let m: ArchiveManifest =
        proxmox_gitops::artifact::read(&store.lib_dir("app").join("app-20260301-000000.json")).unwrap();
    let expected = step::Snapshot {
        name: "app".into(),
        vmid: 4242,
        operation: Operation::Snapshot,
        paths: paths.clone(),
        snapshot_id: Some("app-20260301-000000".into()),
        archive: Some(store.lib_dir("app").join("app-20260301-000000.tar.gz")),
        manifest: Some(store.lib_dir("app").join("app-20260301-000000.json")),
        manifest_digest: Some(m.digest.clone()),
        entry_count: walk(&paths).len() as u64,
        bytes: m.archive_bytes,
        data_bytes: walk(&paths).iter().map(|e| e.size).sum(),
        verification: Verification::Verified,
        ct_snapshot: None,
        ct_pruned: vec![],
        pruned: vec![store.lib_dir("app").join("app-20260101-000000.tar.gz")],
        warnings: vec![],
        outcome: Outcome::Ok,
    };
    assert_eq!(a, expected);
    assert_eq!(
        files(&store.lib_dir("app")),
        [
            "app-20260201-000000.json",
            "app-20260201-000000.tar.gz",
            "app-20260301-000000.json",
            "app-20260301-000000.tar.gz"
        ]
    );
    assert_eq!(files(&store.lib_dir("other")), ["other-20200101-000000.json", "other-20200101-000000.tar.gz"]);
    assert_eq!(store.prune("app", 0).unwrap_err().to_string(), "--keep must be at least 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mismatch_in_transit_fails_and_leaves_no_archive() {
    let Local { t: _t, paths, store, .. } = local(true);
    // The tar stream is ~50 MiB, almost all of it big.bin: byte 25 000 000 is in its content.
    let exec = FlipByte { inner: LocalExec::new(), offset: 25_000_000 };
    let e = data::take(&exec, &store, &req("app", &paths, NOW)).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, DataError::Mismatch { .. }), "{msg}");
    assert!(
        msg.starts_with(
            "snapshot of app failed verification: the archive does not match the manifest computed on the container"
        ),
        "{msg}"
    );
    assert!(msg.contains("/data/app/big.bin: content (sha256) differs"), "{msg}");
    assert_eq!(files(&store.lib_dir("app")), Vec::<String>::new(), "no archive, no temp file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_and_bad_paths_fail_clearly() {
    let t = tempfile::tempdir().unwrap();
    let store = Store::new(&t.path().join("share"));
    let exec = LocalExec::new();
    let missing = t.path().join("nope").to_string_lossy().into_owned();
    let e = data::take(&exec, &store, &req("app", std::slice::from_ref(&missing), NOW)).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "this host: snapshot failed (exit code 4: pgo-snapshot: declared snapshot path {missing} does not exist in the container)"
        )
    );
    assert_eq!(files(&store.lib_dir("app")), Vec::<String>::new());
    let e = data::check_paths(&["/srv/a".into(), "/srv/a/b".into()]).unwrap_err();
    assert_eq!(e.to_string(), "snapshot path `/srv/a/b` lies inside `/srv/a`: declare only `/srv/a`");
    let e = data::check_paths(&["srv/a".into()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "snapshot path `srv/a` must be absolute, not `/`, without `.`, `..` or `//`, and not start with `-`, `(`, `)` or `!`"
    );
    assert!(data::check_paths(&["/".into()]).is_err());
    assert!(data::check_paths(&["/a/../b".into()]).is_err());
    assert!(data::check_paths(&["/-name".into()]).is_err());
    assert!(data::check_paths(&["/(x".into()]).is_err());
    assert!(data::check_paths(&["/srv/-ok".into()]).is_ok());
    assert!(data::check_paths(&[]).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_is_refused_when_the_snapshot_fails() {
    let Local { t, paths, store, exec, .. } = local(false);
    let now = NOW;

    // The snapshot fails (a declared path is missing): refused.
    let broken = spec("app", &[paths[0].clone(), t.path().join("gone").to_string_lossy().into_owned()]);
    let e = guard::before_destroy(&broken, Ok(&exec), &store, false, now).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with(
            "refusing to destroy app (vmid 4242): the data snapshot failed: this host: snapshot failed (exit code 4"
        ),
        "{msg}"
    );
    assert!(msg.ends_with("fix the cause, or re-run with --no-snapshot to destroy without a snapshot"), "{msg}");
    assert_eq!(files(&store.lib_dir("app")), Vec::<String>::new());

    // Unreachable: refused.
    let good = spec("app", &paths);
    let down = guard::Unreachable::new("SSH at 10.0.3.9:22 did not answer", "start it and make SSH work");
    let e = guard::before_destroy(&good, Err(down), &store, false, now).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "refusing to destroy app (vmid 4242): it declares data ({}) but cannot be reached to snapshot it: SSH at \
             10.0.3.9:22 did not answer; start it and make SSH work, or re-run with --no-snapshot to destroy without a snapshot",
            paths.join(", ")
        )
    );

    // --no-snapshot: allowed, nothing taken.
    let p = guard::before_destroy(&broken, Ok(&exec), &store, true, now).await.unwrap();
    assert_eq!((p.clone(), p.protected_by()), (Protection::Skipped, "none (--no-snapshot)".to_string()));
    // No data declared: nothing to protect.
    let p = guard::before_destroy(&spec("app", &[]), Ok(&exec), &store, false, now).await.unwrap();
    assert_eq!(p, Protection::NoData);
    // Reachable with data: a verified snapshot protects the destroy.
    let p = guard::before_destroy(&good, Ok(&exec), &store, false, now).await.unwrap();
    assert_eq!(
        p,
        Protection::Snapshot {
            id: "app-20261130-160102".into(),
            archive: store.lib_dir("app").join("app-20261130-160102.tar.gz")
        }
    );
    assert_eq!(p.protected_by(), "app-20261130-160102");
    assert_eq!(store.list("app").unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configure_restores_only_when_the_data_paths_are_empty() {
    let Local { t, data_root, paths, exec, .. } = local(false);
    let opts = SnapshotOptions { share: t.path().join("share"), keep: None, now: NOW };
    let spec = spec("app", &paths);
    // No snapshot yet: nothing to do.
    assert_eq!(step::restore_if_empty(&spec, &exec, &opts).await, None);
    let before = walk(&paths);
    let a = step::snapshot(&spec, &exec, None, &opts).await;
    assert_eq!(a.outcome, Outcome::Ok);
    // Data present: not restored.
    assert_eq!(step::restore_if_empty(&spec, &exec, &opts).await, None);
    // Paths missing / empty: the newest snapshot is restored.
    std::fs::remove_dir_all(data_root.join("app")).unwrap();
    for e in std::fs::read_dir(data_root.join("conf")).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let r = step::restore_if_empty(&spec, &exec, &opts).await.unwrap();
    assert_eq!((r.operation, r.verification, r.outcome), (Operation::Restore, Verification::Verified, Outcome::Ok));
    assert_eq!(r.snapshot_id.as_deref(), Some("app-20261130-160102"));
    assert_eq!(walk(&paths), before);
}

#[test]
fn cli_without_a_provision_artifact_fails_clearly_and_records_it() {
    let paths = vec!["/srv/app".to_string()];
    let (t, artifacts, share, inv) = cli_fixture(vec![spec("app", &paths), spec("plain", &[])]);
    let os = |s: &str| std::ffi::OsString::from(s);
    let base = [
        os("--artifacts"),
        artifacts.clone().into_os_string(),
        os("snapshot"),
        os("--inventory"),
        inv.clone().into_os_string(),
    ];
    let run = |extra: &[&str]| {
        let mut v: Vec<std::ffi::OsString> = base.to_vec();
        v.extend(extra.iter().map(|s| os(s)));
        let refs: Vec<&std::ffi::OsStr> = v.iter().map(|s| s.as_os_str()).collect();
        cli(&refs)
    };

    let (code, _, stderr) = run(&["--container", "app"]);
    assert_eq!(code, 1, "{stderr}");
    let reason = format!(
        "app (vmid 4242): no provision artifact {}; run `proxmox-gitops provision -c app` first (the snapshot step reaches the container \
         at the address and through the backend it recorded)",
        artifacts.join("provision/app.json").display()
    );
    assert!(stderr.contains(&format!("error: app: {reason}")), "{stderr}");
    let a: step::Snapshot = proxmox_gitops::artifact::read(&artifacts.join("snapshot/app.json")).unwrap();
    let mut expected = step::Snapshot::new(&spec("app", &paths), Operation::Snapshot);
    expected.outcome = Outcome::Failed { error: reason.clone() };
    assert_eq!(a, expected);
    assert_eq!(a.verification, Verification::NotRun);

    // A container of the pve backend is reached over SSH at the recorded address: first the key
    // is missing from the share, then nothing answers (a closed loopback port).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    write_pve_provision(&artifacts, "app", "127.0.0.1", port);
    let ssh_args = ["--container", "app", "--connect-timeout", "1", "--connect-budget", "3"];
    let (code, _, stderr) = run(&ssh_args);
    assert_eq!(code, 1, "{stderr}");
    let key = share.join(".keys/4242");
    let reason = format!(
        "app (vmid 4242): no SSH key {} (the provision step creates it; is --share / PROXMOX_SHARE the same as for \
         provision?)",
        key.display()
    );
    assert!(stderr.contains(&format!("error: app: {reason}")), "{stderr}");
    proxmox_gitops::ssh::keys::ensure(&share, 4242, "app").unwrap();
    let started = std::time::Instant::now();
    let (code, _, stderr) = run(&ssh_args);
    assert_eq!(code, 1, "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}", started.elapsed());
    assert!(stderr.contains(&format!("error: app: app: cannot reach SSH at 127.0.0.1:{port} after ")), "{stderr}");
    let a: step::Snapshot = proxmox_gitops::artifact::read(&artifacts.join("snapshot/app.json")).unwrap();
    let Outcome::Failed { error } = &a.outcome else { panic!("expected a failure: {a:?}") };
    assert!(error.starts_with(&format!("app: cannot reach SSH at 127.0.0.1:{port} after ")), "{error}");
    assert!(error.contains("Connection refused"), "{error}");
    assert_eq!(a.verification, Verification::NotRun);

    // Usage errors exit 2.
    let (code, _, stderr) = run(&["--container", "nope"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--container (nope): no container `nope` in stage `main`; known: app, plain"), "{stderr}");
    let (code, _, stderr) = run(&["--container", "app", "--keep", "0"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run(&["--container", "app", "--at", "20260101-000000"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--restore"), "{stderr}");
    let only_plain = write_inventory(t.path(), &t.path().join("a2"), &share, vec![spec("plain", &[])]);
    let refs = [
        os("--artifacts"),
        os(t.path().join("a2").to_str().unwrap()),
        os("snapshot"),
        os("--all"),
        os("--inventory"),
        only_plain.into_os_string(),
    ];
    let refs: Vec<&std::ffi::OsStr> = refs.iter().map(|s| s.as_os_str()).collect();
    let (code, _, stderr) = cli(&refs);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--all: no container of this stage declares SNAPSHOT paths"), "{stderr}");
}

/// A malformed `--at` is a usage error (exit 2) found before anything runs: no table row, no
/// artifact, the message names `--at` and the expected form. An id of a container that is not
/// selected is refused the same way.
#[test]
fn cli_rejects_a_malformed_at_before_doing_anything() {
    let (_t, artifacts, _share, inv) = cli_fixture(vec![spec("app", &["/srv/app".to_string()])]);
    let run = |extra: &[&str]| {
        let mut v = vec!["--artifacts", artifacts.to_str().unwrap(), "snapshot", "--inventory", inv.to_str().unwrap()];
        v.extend_from_slice(extra);
        let refs: Vec<&std::ffi::OsStr> = v.iter().map(std::ffi::OsStr::new).collect();
        cli(&refs)
    };
    let (code, stdout, stderr) = run(&["--container", "app", "--restore", "--at", "2026"]);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert!(
        stderr.starts_with(
            "error: invalid value '2026' for '--at <AT>': expected a snapshot time YYYYMMDD-HHMMSS (UTC), optionally \
             with -N, or a snapshot id <lib>-YYYYMMDD-HHMMSS[-N]\n"
        ),
        "{stderr}"
    );
    assert!(!artifacts.join("snapshot").exists(), "nothing ran");

    let (code, stdout, stderr) = run(&["--container", "app", "--restore", "--at", "other-20261130-101010"]);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert_eq!(
        stderr,
        "error: --at `other-20261130-101010` is a snapshot id of `other`, which is not among the selected containers \
         (app); give a snapshot time YYYYMMDD-HHMMSS[-N] or an id of a selected container\n"
    );
    assert!(!artifacts.join("snapshot").exists(), "nothing ran");
}

/// Neither --container nor --all: the usage error names both.
#[test]
fn cli_needs_container_or_all_and_says_so() {
    let (code, stdout, stderr) = cli(&[std::ffi::OsStr::new("snapshot")]);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert!(
        stderr.starts_with(
            "error: the following required arguments were not provided:\n  <--container <CONTAINERS>|--all>\n"
        ),
        "{stderr}"
    );
    let (code, _, stderr) = cli(&["snapshot", "--all", "-c", "app"].map(std::ffi::OsStr::new));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("'--all' cannot be used with '--container <CONTAINERS>'"), "{stderr}");
}

/// Writes `provision/<name>.json` of a pve-backend container at `address:port`.
fn write_pve_provision(artifacts: &Path, name: &str, address: &str, port: u16) {
    let mut p = support::provision::running(BackendKind::Pve, name, 4242, name);
    p.node = Some("pve1".into());
    p.address = Some(address.into());
    p.ssh_port = port;
    p.plan.start = true;
    support::provision::write(artifacts, &p);
}

/// Unmounts on drop.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_onto_a_mount_point_replaces_its_contents() {
    let t = tempfile::tempdir().unwrap();
    let data_root = t.path().join("data");
    let app = data_root.join("app");
    std::fs::create_dir_all(&app).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64m,mode=0710", "pgotest-snap"])
        .arg(&app)
        .status()
        .unwrap();
    assert!(st.success());
    let _m = Mounted(app.clone());
    // Busy: it is a mount point, so the restore cannot swap it by a rename.
    assert_eq!(std::fs::remove_dir(&app).unwrap_err().raw_os_error(), Some(16));
    let paths = make_data(&data_root, false);
    let store = Store::new(&t.path().join("share"));
    let exec = LocalExec::new();
    let before = walk(&paths);
    data::take(&exec, &store, &req("app", &paths, NOW)).await.unwrap();
    // Replace the contents of the mount point and its root's mode.
    for e in std::fs::read_dir(&app).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(p).unwrap()
        } else {
            std::fs::remove_file(p).unwrap()
        }
    }
    std::fs::write(app.join("junk"), "x").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&app, std::fs::Permissions::from_mode(0o777)).unwrap();
    data::restore(&exec, &store, "app", None).await.unwrap();
    assert_eq!(walk(&paths), before);
    assert_eq!(staging_left(&data_root), Vec::<String>::new());
}
