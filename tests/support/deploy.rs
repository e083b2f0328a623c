//! Test support for `deploy`: fixture monorepos and a fake step runner.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proxmox_gitops::inventory::{ContainerSpec, Inventory};
use proxmox_gitops::steps::deploy::{StepContext, StepResult, StepRunner, StepSuccess, step_artifact};
use proxmox_gitops::steps::plan::Step;

use super::fs::write_files;

/// A monorepo with a control plane (`config`, vmid 100) and libs `names` (vmids 101…), each
/// with a loopback address, plus a `base/` tree.
pub fn monorepo(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), &[("container.env", "ID=100\nIP=127.0.20.1/24\n"), ("base/tasks.yml", "- base\n")]);
    for (i, n) in names.iter().enumerate() {
        write_files(
            dir.path(),
            &[
                (&format!("libs/{n}/container.env"), &format!("ID={}\nIP=127.0.20.{}/24\n", 101 + i, 2 + i)),
                (&format!("libs/{n}/configure.sh"), "echo hi\n"),
            ],
        );
    }
    dir
}

/// Resolves the monorepo at `root` (stage main, no settings from the environment).
pub fn inventory(root: &Path) -> Inventory {
    proxmox_gitops::steps::resolve::resolve(
        &proxmox_gitops::steps::resolve::ResolveOptions { repo: root.to_path_buf(), stage: "main".into() },
        &BTreeMap::<String, String>::new(),
    )
    .unwrap()
}

/// A fake step runner: records every call, fails where told, writes artifacts like a real step
/// (`inputs_digest` + `result`), and measures how many containers ran at once.
#[derive(Default)]
pub struct Fake {
    /// (container, step) pairs that fail.
    pub fail: BTreeSet<(String, Step)>,
    /// (container, step) pairs that succeed without writing an artifact.
    pub no_artifact: BTreeSet<(String, Step)>,
    /// Simulated duration of a step.
    pub work: Duration,
    /// Calls in the order they started: (container, step).
    pub calls: Mutex<Vec<(String, Step)>>,
    /// Digests passed to the steps: (container, step) → digest.
    pub digests: Mutex<BTreeMap<(String, Step), String>>,
    pub running: AtomicUsize,
    /// Highest number of steps running at once.
    pub max_running: AtomicUsize,
}

impl Fake {
    pub fn failing(pairs: &[(&str, Step)]) -> Self {
        Fake { fail: pairs.iter().map(|(n, s)| (n.to_string(), *s)).collect(), ..Default::default() }
    }

    pub fn calls(&self) -> Vec<(String, Step)> {
        self.calls.lock().unwrap().clone()
    }

    /// The calls of one container, in order.
    pub fn calls_of(&self, name: &str) -> Vec<Step> {
        self.calls().into_iter().filter(|(n, _)| n == name).map(|(_, s)| s).collect()
    }
}

impl StepRunner for Fake {
    async fn run(&self, step: Step, spec: &ContainerSpec, ctx: &StepContext) -> StepResult {
        self.calls.lock().unwrap().push((spec.name.clone(), step));
        self.digests.lock().unwrap().insert((spec.name.clone(), step), ctx.digest.clone());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        let key = (spec.name.clone(), step);
        let failed = self.fail.contains(&key);
        let path = step_artifact(&ctx.artifacts, step, &spec.name);
        if !self.no_artifact.contains(&key) {
            let body = serde_json::json!({
                "kind": step.to_string(),
                "schema_version": "1.0",
                "name": spec.name,
                "actions": [{"action": format!("{step}-action")}],
                "inputs_digest": ctx.digest,
                "result": if failed { "failed" } else { "ok" },
            });
            proxmox_gitops::artifact::write_bytes(&path, body.to_string().as_bytes()).unwrap();
        }
        if failed {
            return Err(proxmox_gitops::error::Error::Failed(anyhow::anyhow!("{step} of {} broke", spec.name)));
        }
        Ok(StepSuccess { artifact: (!self.no_artifact.contains(&key)).then_some(path) })
    }
}
