//! `plan` against fakepve: an existing container whose MEMORY and DISK changed shows each
//! setting old → new in the user's terms, the count line and the job summary's table;
//! `--detailed-exitcode` exits 0 (no changes), 2 (changes pending) or 1 (an error).

use crate::support;

use std::path::Path;

use support::fakepve::{FakePve, TEMPLATE};

/// A monorepo with the lib `broker` (vmid 101, loopback address) whose `container.env` has
/// `extra` on top.
fn write_env(repo: &Path, extra: &str) {
    std::fs::create_dir_all(repo.join("libs/broker")).unwrap();
    std::fs::write(repo.join("libs/broker/container.env"), format!("ID=101\nIP=127.0.0.1/8\nCORES=1\n{extra}"))
        .unwrap();
}

/// Runs the binary in `repo` against `pve` (root@pam, the test template, gateway on loopback)
/// with `env` on top; returns (exit code, stdout, stderr).
fn run(pve: &FakePve, repo: &Path, share: &Path, env: &[(&str, &Path)], args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .args(args)
        .arg("--repo")
        .arg(repo)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PROXMOX_HOST", "127.0.0.1")
        .env("PROXMOX_PORT", pve.port.to_string())
        .env("PROXMOX_USER", "root@pam")
        .env("PROXMOX_PASSWORD", support::fakepve::PASSWORD)
        .env("PROXMOX_TEMPLATE", TEMPLATE)
        .env("PROXMOX_STORAGE", "local")
        .env("PROXMOX_GATEWAY", "127.0.0.254")
        .env("PROXMOX_CA", &pve.ca)
        .env("PROXMOX_SHARE", share)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn changed_memory_and_disk_read_old_to_new_and_detailed_exitcode() {
    let pve = FakePve::start();
    pve.add_template();
    let repo = tempfile::tempdir().unwrap();
    let share = tempfile::tempdir().unwrap();
    let (repo, share) = (repo.path(), share.path());
    write_env(repo, "MEMORY=2048\nDISK=local-lvm:8\n");
    let (code, out, err) = run(&pve, repo, share, &[], &["provision", "--all", "--no-wait-ssh"]);
    assert_eq!(code, 0, "{out}\n{err}");

    // Right after the provision, configure has not run: pending, and the count line says what.
    let summary = repo.join("summary.md");
    let (code, out, err) = run(
        &pve,
        repo,
        share,
        &[("GITHUB_STEP_SUMMARY", &summary)],
        &["plan", "--ref", "refs/heads/release", "--detailed-exitcode"],
    );
    assert_eq!(code, 2, "configure pending:\n{out}\n{err}");
    let line = "0 to create, 0 to update in place, 0 to recreate, 1 unchanged; 1 to configure";
    assert!(out.contains(&format!("\n{line}\n")), "{out}");
    assert!(std::fs::read_to_string(&summary).unwrap().contains(&format!("\n{line}\n")));
    std::fs::remove_file(&summary).unwrap();

    // MEMORY and DISK change: one in-place update, each setting old → new.
    write_env(repo, "MEMORY=1024\nDISK=local-lvm:16\n");
    pve.writes(true);
    let summary = repo.join("summary.md");
    let (code, out, err) = run(
        &pve,
        repo,
        share,
        &[("GITHUB_STEP_SUMMARY", &summary)],
        &["plan", "--ref", "refs/heads/release", "--detailed-exitcode"],
    );
    assert_eq!(code, 2, "changes pending:\n{out}\n{err}");
    let details: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("broker (vmid 101)")).take(3).collect();
    assert_eq!(
        details,
        ["broker (vmid 101): update in place", "  MEMORY 2048 → 1024", "  DISK local-lvm:8 → local-lvm:16 (resize)"],
        "{out}"
    );
    assert!(out.contains("\n0 to create, 1 to update in place, 0 to recreate, 0 unchanged; 1 to configure\n"), "{out}");
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.contains(
            "| Container | VMID | Node | Action | Old → new | Deploy |\n|---|---|---|---|---|---|\n\
             | broker | 101 | pve1 | update in place | MEMORY 2048 → 1024, DISK local-lvm:8 → local-lvm:16 (resize) | \
             provision + configure |\n"
        ),
        "{md}"
    );
    let writes: Vec<_> = pve.writes(false).into_iter().filter(|(_, p, _)| p != "/access/ticket").collect();
    assert!(writes.is_empty(), "plan only reads: {writes:?}");

    // Back to what PVE has, and both steps recorded as done for these inputs: nothing to do.
    write_env(repo, "MEMORY=2048\nDISK=local-lvm:8\n");
    let (code, out, err) = run(&pve, repo, share, &[], &["--json", "plan", "--ref", "refs/heads/release"]);
    assert_eq!(code, 0, "{err}");
    let plan: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(plan["schema_version"], "1.2");
    let digest = plan["containers"][0]["inputs_digest"].as_str().unwrap().to_string();
    for step in ["provision", "configure"] {
        let dir = repo.join(".proxmox-gitops").join(step);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("broker.json"),
            serde_json::json!({"inputs_digest": digest, "result": "ok"}).to_string(),
        )
        .unwrap();
    }
    let (code, out, err) = run(&pve, repo, share, &[], &["plan", "--ref", "refs/heads/release", "--detailed-exitcode"]);
    assert_eq!(code, 0, "no changes:\n{out}\n{err}");
    assert!(
        out.contains(
            "deploy skips (already succeeded for the same inputs; --force runs them): broker (provision, configure)"
        ),
        "{out}"
    );

    // Errors are 1 with the flag; without it a bad ref stays 2 (invalid input).
    let (code, _, err) = run(&pve, repo, share, &[], &["plan", "--ref", "refs/heads/feature", "--detailed-exitcode"]);
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = run(&pve, repo, share, &[], &["plan", "--ref", "refs/heads/feature"]);
    assert_eq!(code, 2, "{err}");
    drop(pve);
}

#[test]
fn mount_changes_plan_in_place_and_a_shrink_is_refused_naming_the_key() {
    let pve = FakePve::start_scaled(0.02);
    pve.add_template();
    let repo = tempfile::tempdir().unwrap();
    let share = tempfile::tempdir().unwrap();
    let (repo, share) = (repo.path(), share.path());
    write_env(repo, "MOUNT=local-lvm:4:/data,local-lvm:2:/logs\n");
    let (code, out, err) = run(&pve, repo, share, &[], &["provision", "--all", "--no-wait-ssh"]);
    assert_eq!(code, 0, "{out}\n{err}");

    // /logs removed, /data grown, /cache added: all in place; the removal waits for a restart.
    write_env(repo, "MOUNT=local-lvm:8:/data,local-lvm:1:/cache\n");
    pve.writes(true);
    let (code, out, err) = run(&pve, repo, share, &[], &["plan", "--ref", "refs/heads/release", "--detailed-exitcode"]);
    assert_eq!(code, 2, "changes pending:\n{out}\n{err}");
    let details: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("broker (vmid 101)")).take(4).collect();
    assert_eq!(
        details,
        [
            "broker (vmid 101): update in place, reboot needed",
            "  MOUNT -local-lvm:2:/logs (pending until restart)",
            "  MOUNT +local-lvm:1:/cache",
            "  MOUNT local-lvm:4:/data → local-lvm:8:/data (resize)",
        ],
        "{out}"
    );
    assert!(out.contains("\n0 to create, 1 to update in place, 0 to recreate, 0 unchanged; 1 to configure\n"), "{out}");
    // With --allow-recreate the removal is applied by a reboot, still no recreate.
    let (code, out, err) = run(
        &pve,
        repo,
        share,
        &[],
        &["plan", "--ref", "refs/heads/release", "--allow-recreate", "--detailed-exitcode"],
    );
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.contains("  MOUNT -local-lvm:2:/logs (reboot)\n"), "{out}");
    assert!(out.contains("\n0 to create, 1 to update in place, 0 to recreate, 0 unchanged; 1 to configure\n"), "{out}");

    // A shrink: refused, naming the file, the key and both sizes.
    write_env(repo, "MOUNT=local-lvm:1:/data,local-lvm:2:/logs\n");
    let (code, out, err) = run(&pve, repo, share, &[], &["plan", "--ref", "refs/heads/release", "--allow-recreate"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(
            "refused: MOUNT in libs/broker/container.env: mp0 (local-lvm:1:/data) is 4 GiB on PVE, the spec asks \
             for 1 GiB, and PVE cannot shrink a volume; write local-lvm:4:/data (or more)"
        ),
        "{out}"
    );
    assert!(
        out.contains("\n0 to create, 0 to update in place, 0 to recreate, 0 unchanged, 1 refused (see the reasons); 1 to configure\n"),
        "{out}"
    );
    // With --detailed-exitcode a refused container is an error (its provision would fail), not
    // a pending change.
    let (code, out, err) = run(
        &pve,
        repo,
        share,
        &[],
        &["plan", "--ref", "refs/heads/release", "--allow-recreate", "--detailed-exitcode"],
    );
    assert_eq!(code, 1, "{out}\n{err}");
    let writes: Vec<_> = pve.writes(false).into_iter().filter(|(_, p, _)| p != "/access/ticket").collect();
    assert!(writes.is_empty(), "plan only reads: {writes:?}");
}

/// `plan` (and `provision`) of several containers reads the cluster once (`GET
/// /cluster/resources`), not once per container, and drift reads the container listing once for
/// all of them too.
#[test]
fn the_cluster_is_read_once_per_plan_and_drift_run() {
    let pve = FakePve::start();
    pve.add_template();
    let repo = tempfile::tempdir().unwrap();
    let share = tempfile::tempdir().unwrap();
    let (repo, share) = (repo.path(), share.path());
    for (lib, id, ip) in [("alpha", 101, "127.0.0.1"), ("beta", 102, "127.0.0.2"), ("gamma", 103, "127.0.0.3")] {
        std::fs::create_dir_all(repo.join("libs").join(lib)).unwrap();
        std::fs::write(repo.join("libs").join(lib).join("container.env"), format!("ID={id}\nIP={ip}/8\n")).unwrap();
    }
    let reads = |pve: &FakePve| {
        pve.requests(true).iter().filter(|(m, p, _)| m == "GET" && p.starts_with("/cluster/resources")).count()
    };
    let (code, out, err) = run(&pve, repo, share, &[], &["plan", "--ref", "refs/heads/release"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("3 to create"), "{out}");
    assert_eq!(reads(&pve), 1, "one cluster read for three plans");

    // provision plans its containers as one round too (the creates then write under their
    // leases; a plan made again under a lease reads the cluster fresh).
    let (code, out, err) = run(&pve, repo, share, &[], &["provision", "--all", "--no-wait-ssh"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(reads(&pve), 1, "{out}\n{err}");

    let (code, out, err) = run(&pve, repo, share, &[], &["drift", "--all", "--backend", "pve"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(reads(&pve), 1, "one container listing for three containers:\n{out}");
}
