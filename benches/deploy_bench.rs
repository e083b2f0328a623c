//! Benchmark of `deploy`'s own work: the inputs digest of lib trees of growing size, and the
//! orchestration overhead with a no-op step runner at several `--jobs` values.
//!
//! Run: `cargo bench --bench deploy_bench` (output goes to docs/benchmarks/deploy.md).
//! Everything happens in a temporary directory; no network.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxmox_gitops::artifact::ArtifactDir;
use proxmox_gitops::inventory::ContainerSpec;
use proxmox_gitops::model::BackendKind;
use proxmox_gitops::steps::deploy::{
    DeployOptions, StepContext, StepResult, StepRunner, StepSuccess, deploy, inputs_digest,
};
use proxmox_gitops::steps::plan::Step;

struct Noop(Duration);

impl StepRunner for Noop {
    async fn run(&self, _step: Step, _spec: &ContainerSpec, _ctx: &StepContext) -> StepResult {
        if !self.0.is_zero() {
            tokio::time::sleep(self.0).await;
        }
        Ok(StepSuccess::default())
    }
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A monorepo with `libs` libs of `files` files of `size` bytes each.
fn monorepo(libs: usize, files: usize, size: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "container.env", "ID=100\nIP=127.0.40.1/24\n");
    write(root, "base/tasks.yml", "- base\n");
    let body = "x".repeat(size);
    for l in 0..libs {
        write(
            root,
            &format!("libs/lib{l}/container.env"),
            &format!("ID={}\nIP=127.0.{}.{}/24\n", 101 + l, 41 + l / 200, 1 + l % 200),
        );
        for f in 0..files {
            write(root, &format!("libs/lib{l}/files/d{}/f{f}.txt", f % 10), &body);
        }
    }
    dir
}

fn inventory(root: &Path) -> proxmox_gitops::inventory::Inventory {
    proxmox_gitops::steps::resolve::resolve(
        &proxmox_gitops::steps::resolve::ResolveOptions { repo: root.to_path_buf(), stage: "main".into() },
        &std::collections::BTreeMap::<String, String>::new(),
    )
    .unwrap()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    println!("# deploy benchmarks\n");
    println!("`cargo bench --bench deploy_bench` on the development machine (2 shared cores, other builds");
    println!("running); median of 5 runs, warm page cache.\n");
    println!("## Inputs digest of one lib tree\n");
    println!("| files | file size | total | digest time | throughput |");
    println!("|---:|---:|---:|---:|---:|");
    for (files, size) in [(10, 1024), (1000, 1024), (10_000, 1024), (100, 1024 * 1024)] {
        let repo = monorepo(1, files, size);
        let root = repo.path().canonicalize().unwrap();
        let inv = inventory(&root);
        let spec = inv.container("lib0").unwrap().clone();
        let art = root.join(".proxmox-gitops");
        let times: Vec<Duration> = (0..5)
            .map(|_| {
                let t = Instant::now();
                inputs_digest(&root, &inv, &spec, &art).unwrap();
                t.elapsed()
            })
            .collect();
        let m = median(times);
        let total = (files * size) as f64 / 1024.0 / 1024.0;
        println!(
            "| {files} | {} KiB | {total:.1} MiB | {:.1} ms | {:.0} MiB/s |",
            size / 1024,
            m.as_secs_f64() * 1000.0,
            total / m.as_secs_f64()
        );
    }

    println!(
        "\n## Orchestration: 51 containers (control plane + 50 libs), one step each (`refs/heads/main`), `--force`\n"
    );
    println!("Each lib has 20 files of 1 KiB. The step runner sleeps the given time (a stand-in for a step).\n");
    println!("| step time | jobs | wall time | ideal (⌈51/jobs⌉ × step) |");
    println!("|---:|---:|---:|---:|");
    let repo = monorepo(50, 20, 1024);
    let root = repo.path().canonicalize().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    for (step_ms, jobs) in [(0u64, 1usize), (0, 8), (100, 1), (100, 4), (100, 16)] {
        let opts = DeployOptions {
            repo: root.clone(),
            artifacts: ArtifactDir::new(root.join(".proxmox-gitops")),
            git_ref: "refs/heads/main".into(),
            steps: vec![],
            containers: vec![],
            force: true,
            jobs,
            backend: BackendKind::Pve,
            run_id: None,
        };
        let runs = if step_ms == 0 { 5 } else { 1 };
        let times: Vec<Duration> = (0..runs)
            .map(|_| {
                let inv = inventory(&root);
                let t = Instant::now();
                let s = rt.block_on(deploy(Arc::new(Noop(Duration::from_millis(step_ms))), inv, &opts)).unwrap();
                assert_eq!(s.containers.len(), 51);
                t.elapsed()
            })
            .collect();
        let ideal = 51usize.div_ceil(jobs) as u64 * step_ms;
        println!("| {step_ms} ms | {jobs} | {:.0} ms | {ideal} ms |", median(times).as_secs_f64() * 1000.0);
    }
}
