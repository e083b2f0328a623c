//! Benchmark of the lxc backend (run by `benches/lxc.sh`, needs root and LXC):
//!
//! 1. base bootstrap, cold (a private, empty debootstrap cache: downloads from Debian's mirror)
//!    and warm (the cache from 1);
//! 2. one container cloned from the cached base, until SSH answers;
//! 3. five, then ten containers in parallel, until SSH answers on all.
//!
//! Prints a Markdown table of wall times next to the figures measured before containers had
//! static addresses ([`BEFORE`]). `PGO_BENCH_BASE=NAME` reuses a ready base (no bootstrap rows).
//! Everything it creates is named `pgobench-<pid>-…` and removed at the end, also on failure.

use std::process::Command;
use std::time::{Duration, Instant};

use proxmox_gitops::backend::lxc::{LxcBackend, LxcOptions};
use proxmox_gitops::inventory::{ContainerSpec, Disk, IpConfig};
use proxmox_gitops::model::{ApplyOptions, Outcome, Provision, RecreatePolicy};

/// The figures of `benches/lxc.sh` on 2026-11-30 (2 CPUs, every container waiting for its DHCP
/// lease), by row key.
const BEFORE: &[(&str, f64)] = &[("cold", 154.7), ("warm", 38.4), ("one", 5.3), ("par5", 17.8)];

struct Cleanup {
    lxc_path: std::path::PathBuf,
    prefix: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let out = Command::new("lxc-ls").arg("-P").arg(&self.lxc_path).arg("-1").output();
        let mut names: Vec<String> = out
            .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        names.retain(|n| n.starts_with(&self.prefix));
        names.sort_by_key(|n| n.ends_with("-base"));
        for n in names {
            let _ = Command::new("lxc-stop").arg("-P").arg(&self.lxc_path).args(["-n", &n, "-k"]).output();
            let _ = Command::new("lxc-destroy").arg("-P").arg(&self.lxc_path).args(["-n", &n]).output();
        }
        let _ = std::fs::remove_file(self.lxc_path.join(format!(".{}base.lock", self.prefix)));
    }
}

fn spec(prefix: &str, short: &str, vmid: u32) -> ContainerSpec {
    let name = format!("{prefix}{short}");
    ContainerSpec {
        memory_mib: 256,
        swap_mib: 0,
        rootfs: Disk { storage: "local".into(), size_gib: 4 },
        onboot: false,
        dir: format!("libs/{short}").into(),
        sources: vec![],
        ..ContainerSpec::new(&name, vmid, IpConfig::Dhcp)
    }
}

async fn provision(b: &LxcBackend, s: &ContainerSpec, opts: &ApplyOptions) -> anyhow::Result<(Provision, Duration)> {
    let t = Instant::now();
    let plan = b.plan(s, RecreatePolicy::Never).await?;
    let p = b.apply(s, &plan, opts).await;
    if let Outcome::Failed { error } = &p.outcome {
        anyhow::bail!("{}: {error}", s.name);
    }
    Ok((p, t.elapsed()))
}

const COLD: &str = "base bootstrap, cold (empty debootstrap cache, Debian mirror)";
const WARM: &str = "base bootstrap, warm (debootstrap cache filled)";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let prefix = format!("pgobench-{}-", std::process::id());
    let cache = tempfile::tempdir()?;
    let share = tempfile::tempdir()?;
    let mut opts = LxcOptions {
        base: format!("{prefix}base"),
        share: share.path().join("share"),
        cache_path: Some(cache.path().to_path_buf()),
        ..LxcOptions::default()
    };
    // Only the clone-to-SSH figures: reuse a ready base (e.g. local/run.sh's pgo-base-bookworm).
    if let Ok(base) = std::env::var("PGO_BENCH_BASE") {
        opts.base = base;
    }
    let b = LxcBackend::new(opts).await?;
    let _cleanup = Cleanup { lxc_path: b.client().path().to_path_buf(), prefix: prefix.clone() };
    let apply = ApplyOptions { share: share.path().to_path_buf(), ..ApplyOptions::default() };
    let mut rows: Vec<(&str, String, Option<f64>)> = Vec::new();

    if std::env::var_os("PGO_BENCH_SKIP_BOOTSTRAP").is_none() && std::env::var_os("PGO_BENCH_BASE").is_none() {
        let t = Instant::now();
        b.ensure_base().await?;
        rows.push(("cold", COLD.into(), Some(t.elapsed().as_secs_f64())));
        b.destroy_base().await?;
        let t = Instant::now();
        b.ensure_base().await?;
        rows.push(("warm", WARM.into(), Some(t.elapsed().as_secs_f64())));
    } else {
        b.ensure_base().await?;
        rows.push(("cold", COLD.into(), None));
        rows.push(("warm", WARM.into(), None));
    }

    let (p, took) = provision(&b, &spec(&prefix, "one", 95001), &apply).await?;
    let clone_ms = p.actions.iter().find(|a| a.action == "clone").map_or(0, |a| a.duration_ms);
    rows.push((
        "one",
        format!("1 container from the cached base to SSH-ready (clone itself: {clone_ms} ms)"),
        Some(took.as_secs_f64()),
    ));

    let mut vmid = 95010;
    for n in [5u32, 10] {
        let specs: Vec<ContainerSpec> = (0..n).map(|i| spec(&prefix, &format!("p{n}x{i}"), vmid + i)).collect();
        vmid += 100;
        let t = Instant::now();
        let results = futures_join(&b, &specs, &apply).await;
        let wall = t.elapsed().as_secs_f64();
        let mut each = Vec::new();
        for r in results {
            let (p, took) = r?;
            let steps: Vec<String> =
                p.actions.iter().map(|a| format!("{} {:.2}", a.action, a.duration_ms as f64 / 1000.0)).collect();
            eprintln!("{}: {:.2} s total; {}", p.name, took.as_secs_f64(), steps.join(", "));
            each.push(format!("{:.1}", took.as_secs_f64()));
        }
        let key = if n == 5 { "par5" } else { "par10" };
        rows.push((key, format!("{n} containers in parallel to SSH-ready (each: {} s)", each.join(", ")), Some(wall)));
    }

    println!("| what | before: DHCP (2026-11-30) | now: static addresses |");
    println!("|---|---|---|");
    for (key, what, secs) in rows {
        let before =
            BEFORE.iter().find(|(k, _)| *k == key).map_or("not measured".to_string(), |(_, s)| format!("{s:.1} s"));
        let now = secs.map_or("not re-measured".to_string(), |s| format!("{s:.2} s"));
        println!("| {what} | {before} | {now} |");
    }
    Ok(())
}

async fn futures_join(
    b: &LxcBackend,
    specs: &[ContainerSpec],
    apply: &ApplyOptions,
) -> Vec<anyhow::Result<(Provision, Duration)>> {
    let mut set = tokio::task::JoinSet::new();
    for (i, s) in specs.iter().enumerate() {
        let (b, s, apply) = (b.clone(), s.clone(), apply.clone());
        set.spawn(async move { (i, provision(&b, &s, &apply).await) });
    }
    let mut out: Vec<Option<anyhow::Result<(Provision, Duration)>>> = (0..specs.len()).map(|_| None).collect();
    while let Some(r) = set.join_next().await {
        match r {
            Ok((i, r)) => out[i] = Some(r),
            Err(e) => return vec![Err(anyhow::anyhow!("task failed: {e}"))],
        }
    }
    out.into_iter().map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("missing result")))).collect()
}
