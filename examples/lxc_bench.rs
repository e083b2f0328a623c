//! Benchmark of the lxc backend (run by `benches/lxc.sh`, needs root and LXC):
//!
//! 1. base bootstrap, cold (a private, empty debootstrap cache: downloads from Debian's mirror)
//!    and warm (the cache from 1);
//! 2. one container cloned from the cached base, until SSH answers;
//! 3. five, then ten containers in parallel, until SSH answers on all.
//!
//! Prints a Markdown table of wall times. Everything it creates is named `pgobench-<pid>-…` and
//! removed at the end, also on failure.

use std::process::Command;
use std::time::{Duration, Instant};

use proxmox_gitops::backend::lxc::{LxcBackend, LxcOptions};
use proxmox_gitops::backend::model::{ApplyOptions, Outcome, Provision, RecreatePolicy};
use proxmox_gitops::inventory::{ContainerSpec, Disk, IpConfig};

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
    let mut rows: Vec<(String, f64)> = Vec::new();

    if std::env::var_os("PGO_BENCH_SKIP_BOOTSTRAP").is_none() && std::env::var_os("PGO_BENCH_BASE").is_none() {
        let t = Instant::now();
        b.ensure_base().await?;
        rows.push(("base bootstrap, cold (empty debootstrap cache, Debian mirror)".into(), t.elapsed().as_secs_f64()));
        b.destroy_base().await?;
        let t = Instant::now();
        b.ensure_base().await?;
        rows.push(("base bootstrap, warm (debootstrap cache filled)".into(), t.elapsed().as_secs_f64()));
    } else {
        b.ensure_base().await?;
    }

    let (p, took) = provision(&b, &spec(&prefix, "one", 95001), &apply).await?;
    let clone_ms = p.actions.iter().find(|a| a.action == "clone").map_or(0, |a| a.duration_ms);
    rows.push((
        format!("1 container from the cached base to SSH-ready (clone itself: {clone_ms} ms)"),
        took.as_secs_f64(),
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
        rows.push((format!("{n} containers in parallel to SSH-ready (each: {} s)", each.join(", ")), wall));
    }

    println!("| what | wall time |");
    println!("|---|---|");
    for (what, secs) in rows {
        println!("| {what} | {secs:.2} s |");
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
