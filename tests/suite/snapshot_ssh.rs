//! Data snapshots over SSH and the automatic restore in `configure`, against one real LXC
//! container made by the lxc backend (see tests/support/configure.rs).
//!
//! Containers are named `pgotest-ssh-<pid>-…` and removed afterwards (also when the test fails);
//! they are clones of the base `pgotest-ssh-base`, bootstrapped on the first run and kept for
//! later ones. Traffic goes only to the container on lxcbr0 (and, from inside it, Debian's
//! mirror for the base role's packages).
//! Run: `cargo test --test suite snapshot_ssh::` (root, lxc, debootstrap, ansible).

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use pretty_assertions::assert_eq;
use proxmox_gitops::artifact::{self, ArtifactDir};
use proxmox_gitops::inventory::Inventory;
use proxmox_gitops::model::Outcome;
use proxmox_gitops::snapshot::data;
use proxmox_gitops::snapshot::store::Store;
use proxmox_gitops::steps::configure::{Configure, ConfigureOptions, Contract, configure};
use proxmox_gitops::steps::resolve::{ResolveOptions, resolve};
use proxmox_gitops::steps::snapshot::{self as step, Operation, Snapshot, SnapshotOptions, Transport, Verification};
use secrecy::SecretString;
use support::configure as sup;

const KIND: &str = "ssh";
const BASE: &str = "pgotest-ssh-base";
const VMID: u32 = 9301;

/// The lib's data inside the container (test-only script, constant): nested directories, a
/// relative symlink, a 0600 file owned by a non-root user, a hard link, an empty directory with
/// an old mtime, 2 MB of random bytes, and a single-file path.
const POPULATE: &str = r#"set -euo pipefail
mkdir -p /srv/keeper/state/a/b /srv/keeper/empty
echo 41 > /srv/keeper/state/counter
echo deep > /srv/keeper/state/a/b/deep.txt
ln -s state/a/b/deep.txt /srv/keeper/link
echo s3cret > /srv/keeper/secret
chown 4242:4242 /srv/keeper/secret
chmod 600 /srv/keeper/secret
ln /srv/keeper/secret /srv/keeper/state/secret-hardlink
head -c 2000000 /dev/urandom > /srv/keeper/blob.bin
touch -m -d @1500000000 /srv/keeper/empty
printf 'listen=1\n' > /etc/keeper.conf
"#;

/// The lib's configuration: it reads the data, so it proves the restore ran before it.
const CONFIGURE_SH: &str = "set -eu\necho \"KEEPER_COUNTER=$(cat /srv/keeper/state/counter)\" >> \"$PGO_OUTPUT\"\n";

fn monorepo(dir: &Path) -> std::path::PathBuf {
    support::fs::copy_dir(&support::fs::source_root().join("base"), &dir.join("base"));
    std::fs::write(dir.join("globals.json"), r#"{"SHARE_HOST": ""}"#).unwrap();
    let lib = dir.join("libs/keeper");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(
        lib.join("container.env"),
        format!("ID={VMID}\nIP=dhcp\nMEMORY=256\nSNAPSHOT=/srv/keeper,/etc/keeper.conf\n"),
    )
    .unwrap();
    std::fs::write(lib.join("configure.sh"), CONFIGURE_SH).unwrap();
    dir.to_path_buf()
}

fn inventory(root: &Path, share: &Path) -> Inventory {
    let env: BTreeMap<String, String> = [("PROXMOX_SHARE".to_string(), share.display().to_string())].into();
    resolve(&ResolveOptions { repo: root.to_path_buf(), stage: sup::stage_for(KIND) }, &env).unwrap()
}

fn ssh_connect() -> step::AccessOptions {
    step::AccessOptions {
        transport: Transport::Ssh,
        ssh: proxmox_gitops::ssh::ConnectOptions {
            connect_timeout: Duration::from_secs(10),
            total_timeout: Duration::from_secs(60),
            attempts: 6,
        },
        pve: None,
    }
}

#[test]
fn snapshot_over_ssh_then_configure_restores_the_wiped_data() {
    let _heavy = support::heavy::area("snapshot_ssh");
    let tmp = tempfile::tempdir().unwrap();
    let share = tmp.path().join("share");
    let artifacts = tmp.path().join("artifacts");
    let dir = ArtifactDir::new(&artifacts);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lab = rt.block_on(sup::Lab::open(&share, KIND, BASE));
    let root = monorepo(&tmp.path().join("repo"));
    let inv = inventory(&root, &share);
    let spec = inv.container("keeper").unwrap().clone();
    let paths = vec!["/srv/keeper".to_string(), "/etc/keeper.conf".to_string()];
    assert_eq!(spec.snapshot_paths, paths);
    let prov = rt.block_on(lab.provision(&spec, &artifacts));
    assert!(prov.created);
    let ct = prov.hostname.clone();
    assert!(ct.starts_with(&sup::prefix_for(KIND)), "{ct}");
    let made = lab.attach(&ct, &["bash", "-c", POPULATE]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));

    // 1. A snapshot over SSH (the base role has not run: root logs in with the container key).
    let opts = SnapshotOptions { share: share.clone(), keep: None, now: time::OffsetDateTime::now_utc() };
    let conn = rt.block_on(step::open(&spec, &dir, &share, &ssh_connect())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conn.exec.target(), format!("keeper at {}:22 over SSH (as root)", prov.address.as_deref().unwrap()));
    let before = rt.block_on(data::live_manifest(conn.exec.as_ref(), &paths)).unwrap();
    assert_eq!(before.len(), 12, "{before:#?}");
    let taken = rt.block_on(step::snapshot(&spec, conn.exec.as_ref(), conn.ct.as_deref(), &opts));
    drop(conn);
    let store = Store::new(&share);
    let stored = store.pick("keeper", None).unwrap();
    let archived = rt.block_on(data::verify(&stored)).unwrap();
    assert_eq!(archived.entries, before, "the archive's manifest differs from the container's tree");
    // The running overlay-backed LXC container also gets a container snapshot: frozen for the
    // copy of its overlay, the pause recorded.
    assert_eq!(taken.warnings, Vec::<String>::new());
    let record = taken.ct_snapshot.clone().unwrap_or_else(|| panic!("a container snapshot: {taken:#?}"));
    assert!(record.name.starts_with("pgo-") && record.downtime_ms.is_some(), "{record:?}");
    let mut want = Snapshot::new(&spec, Operation::Snapshot);
    want.ct_snapshot = Some(record);
    want.snapshot_id = Some(stored.id.clone());
    want.archive = Some(stored.archive.clone());
    want.manifest = Some(stored.manifest.clone());
    want.manifest_digest = Some(archived.digest.clone());
    want.entry_count = before.len() as u64;
    want.bytes = std::fs::metadata(&stored.archive).unwrap().len();
    want.data_bytes = archived.data_bytes;
    want.verification = Verification::Verified;
    want.warnings = taken.warnings.clone();
    assert_eq!(taken, want);
    assert!(archived.data_bytes > 2_000_000);

    // 2. Wipe the data: the directory is emptied, the file removed.
    let wiped = lab.attach(&ct, &["bash", "-c", "find /srv/keeper -mindepth 1 -delete && rm /etc/keeper.conf"]);
    assert!(wiped.status.success(), "{}", String::from_utf8_lossy(&wiped.stderr));

    // 3. configure restores the newest snapshot after the base role and before the lib, which
    // reads the restored data.
    let copts = ConfigureOptions {
        containers: vec!["keeper".into()],
        jobs: 1,
        artifacts: dir.clone(),
        contract: Contract {
            host: Some("http://127.0.0.1:9".into()),
            login: Some("pgo-admin".into()),
            password: Some(SecretString::from("pw-not-used".to_string())),
        },
        connect: ssh_connect().ssh,
        run_timeout: Duration::from_secs(900),
        ..ConfigureOptions::default()
    };
    let results = rt.block_on(configure(&inv, &copts)).unwrap();
    let c = &results[0];
    assert!(c.ok(), "{:?}\n{}", c.outcome, c.log_tail.join("\n"));
    assert_eq!(c.outputs, BTreeMap::from([("KEEPER_COUNTER".to_string(), "41".to_string())]));
    let restored = c.restore.clone().expect("configure did not restore the data");
    let mut want = Snapshot::new(&spec, Operation::Restore);
    want.snapshot_id = Some(stored.id.clone());
    want.archive = Some(stored.archive.clone());
    want.manifest = Some(stored.manifest.clone());
    want.manifest_digest = Some(archived.digest.clone());
    want.entry_count = before.len() as u64;
    want.bytes = archived.archive_bytes;
    want.data_bytes = archived.data_bytes;
    want.verification = Verification::Verified;
    assert_eq!(restored, want);
    // The restore's own artifact is written, and the configure artifact on disk carries it.
    let on_disk: Snapshot = artifact::read(&dir.snapshot("keeper")).unwrap();
    assert_eq!(on_disk, restored);
    let cfg: Configure = artifact::read(&dir.configure("keeper")).unwrap();
    assert_eq!(&cfg, c);
    assert_eq!(cfg.outcome, Outcome::Ok);

    // 4. The tree is identical (manifests: types, modes, owners, mtimes, sizes, sha256, link
    // targets), read over SSH as `config` through sudo now that the base role ran.
    let conn = rt.block_on(step::open(&spec, &dir, &share, &ssh_connect())).unwrap_or_else(|e| panic!("{e}"));
    assert!(conn.exec.target().ends_with("over SSH (as config)"), "{}", conn.exec.target());
    let after = rt.block_on(data::live_manifest(conn.exec.as_ref(), &paths)).unwrap();
    assert_eq!(after, before);
    // Data present now: a restore is not attempted again.
    assert_eq!(rt.block_on(step::restore_if_empty(&spec, conn.exec.as_ref(), &opts)), None);
    drop(conn);
    // A re-run with nothing changed skips the base role and the lib (the data is there: no
    // restore either) and still reports the lib's outputs.
    let again = rt.block_on(configure(&inv, &copts)).unwrap();
    let c = &again[0];
    assert!(c.ok(), "{:?}\n{}", c.outcome, c.log_tail.join("\n"));
    assert_eq!((c.skipped.as_deref(), c.restore.as_ref()), (Some("unchanged"), None));
    assert_eq!(c.outputs, BTreeMap::from([("KEEPER_COUNTER".to_string(), "41".to_string())]));

    // 5. The CLI over SSH (`--transport ssh` for an lxc container), with retention: the first
    // archive is pruned, the new one verified.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .arg("--repo")
        .arg(&root)
        .arg("--artifacts")
        .arg(&artifacts)
        .args(["--stage", &sup::stage_for(KIND), "snapshot", "-c", "keeper", "--transport", "ssh", "--keep", "1"])
        .env("PROXMOX_SHARE", &share)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITEA_ACTIONS")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let cli: Snapshot = artifact::read(&dir.snapshot("keeper")).unwrap();
    assert_eq!(
        (cli.operation, cli.verification, cli.outcome.clone()),
        (Operation::Snapshot, Verification::Verified, Outcome::Ok)
    );
    assert_eq!(cli.pruned, vec![stored.archive.clone()]);
    let newest = store.pick("keeper", None).unwrap();
    assert_eq!(cli.snapshot_id.as_ref(), Some(&newest.id));
    assert_ne!(newest.id, stored.id);
    assert_eq!(rt.block_on(data::verify(&newest)).unwrap().entries, before);
    assert_eq!(store.list("keeper").unwrap().len(), 1);
    drop(lab);
}
