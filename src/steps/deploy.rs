//! Step `deploy`: run the pipeline steps of a ref for a set of containers, resumably.
//!
//! What runs is decided by [`crate::steps::plan::steps_for_ref`] (the seed's branch model:
//! `release` → provision + configure, `main` → configure, `snapshot` → snapshot) unless the caller
//! names the steps explicitly (a workflow dispatch). A data snapshot before a recreate is part of
//! `provision` itself (its artifact records it in `protected_by`), not a separate step here.
//!
//! # Orchestration
//!
//! * Per container the steps run **in order**; a failed step stops that container (its later steps
//!   are recorded as `not-run`), never the others.
//! * Containers run concurrently, at most `jobs` at a time (a tokio semaphore).
//! * The run's summary is written atomically as `deploy.json` ([`Deploy`]) whatever happened, and
//!   the result says whether any container failed (the CLI exits 1 then).
//!
//! # Resume
//!
//! Each container gets an **inputs digest** ([`inputs_digest`]): SHA-256 over its
//! [`ContainerSpec`] as JSON, the files of its lib tree and of the base tree. A step whose artifact
//! (`provision/<name>.json`, `configure/<name>.json`, `snapshot/<name>.json`) shows success for the
//! same digest is skipped, unless `force`. Artifacts are read as loose JSON ([`read_step_status`]):
//! any step artifact with an `inputs_digest` and a `result` field takes part, whatever else it
//! holds. After a successful step whose artifact lacks the digest, deploy stamps it in (atomically),
//! so resume works even for a step that does not know about digests.
//!
//! Snapshots capture data that changes without any input changing: a snapshot step is only skipped
//! when it already succeeded for the same digest **in the same workflow run** (`run_id`, from
//! `GITHUB_RUN_ID`), i.e. when a failed run is re-run. Without a run id it always runs.
//!
//! A `configure` whose container's `provision` artifact shows a *failure* for the same digest is
//! `blocked` (the container is in an unknown state); `force` runs it anyway. This keeps the
//! per-container failure isolation when provision and configure run in separate workflow jobs.
//!
//! # Steps are pluggable
//!
//! Steps are invoked through [`StepRunner`]; tests use fakes, the binary uses [`BuiltinRunner`].

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::artifact::{self, Artifact, ArtifactDir};
use crate::backend::model::{BackendKind, RecreatePolicy};
use crate::error::{Error, Location, Result};
use crate::inventory::{ContainerSpec, Inventory, NotFound};
use crate::settings::{PublicSettings, Settings};
use crate::steps::plan::{Step, steps_for_ref};

// ------------------------------------------------------------------------------------------------
// The step seam
// ------------------------------------------------------------------------------------------------

/// Everything a step needs besides the container's spec.
#[derive(Debug, Clone)]
pub struct StepContext {
    /// The inventory (its `root` is the current checkout, see [`deploy`]).
    pub inventory: Arc<Inventory>,
    /// Where the step reads and writes its artifacts.
    pub artifacts: ArtifactDir,
    /// The ref being deployed (`refs/heads/release` …).
    pub git_ref: String,
    /// The backend provisioning uses.
    pub backend: BackendKind,
    /// The inputs digest of this container (`sha256:<hex>`); the step records it as
    /// `inputs_digest` in its artifact.
    pub digest: String,
}

/// What a successful step reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepSuccess {
    /// The artifact the step wrote (e.g. `provision/<name>.json`), if any.
    pub artifact: Option<PathBuf>,
}

/// A step's result: success, or the step's error (input problems keep their locations).
pub type StepResult = std::result::Result<StepSuccess, Error>;

/// Runs one pipeline step for one container. Implemented by [`BuiltinRunner`] for the binary and by
/// fakes in tests.
///
/// Contract: the step writes its artifact at the path [`step_artifact`] names, with
/// `inputs_digest` = `ctx.digest` and a `result` of `ok` or `failed` (as
/// [`crate::backend::model::Provision`] does). It must not panic; a panic is recorded as a failure of
/// that container only.
pub trait StepRunner: Send + Sync + 'static {
    /// Runs `step` for `spec`.
    fn run(&self, step: Step, spec: &ContainerSpec, ctx: &StepContext) -> impl Future<Output = StepResult> + Send;
}

/// How [`BuiltinRunner`] runs the steps: the options the `provision`, `configure` and `snapshot`
/// subcommands take, for one deploy.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    /// PVE TLS and timeouts (backend `pve`).
    pub pve: crate::backend::PveConnect,
    /// When an existing container may be destroyed and created again (provision).
    pub recreate: RecreatePolicy,
    /// Wait until SSH answers after a start (provision).
    pub wait_ssh: bool,
    /// SSH port to wait for and connect to (22).
    pub ssh_port: u16,
    /// How long provision waits for SSH (and a DHCP address) after a start.
    pub ssh_timeout: Duration,
    /// SSH connect tuning (configure).
    pub connect: crate::ssh::ConnectOptions,
    /// Upper bound of one engine run (base role, lib) in configure.
    pub run_timeout: Duration,
    /// Snapshots kept per lib (`None`: keep all).
    pub keep: Option<usize>,
    /// Let provision recreate without a verified data snapshot first (`--no-snapshot`).
    pub no_snapshot: bool,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        Self {
            pve: crate::backend::PveConnect::default(),
            recreate: RecreatePolicy::Never,
            wait_ssh: true,
            ssh_port: 22,
            ssh_timeout: Duration::from_secs(120),
            connect: crate::ssh::ConnectOptions::default(),
            run_timeout: Duration::from_secs(1800),
            keep: None,
            no_snapshot: false,
        }
    }
}

/// The runner the binary ships: each arm calls the step's library function for one container.
///
/// * `provision`: [`crate::steps::provision`] on the backend of `ctx.backend`, built once per
///   deploy (one PVE session for every container): plan with [`RunnerOptions::recreate`], apply,
///   write `provision/<name>.json`;
/// * `configure`: [`crate::steps::configure::configure`] for the container (it reads
///   `provision/<name>.json` and writes `configure/<name>.json`);
/// * `snapshot`: [`crate::steps::snapshot::snapshot`] through the container's transport
///   ([`crate::steps::snapshot::connect`]); a container without `SNAPSHOT` paths gets an `ok`
///   artifact with a warning and is not contacted.
///
/// Every artifact records `inputs_digest` = `ctx.digest` (failures too); a step whose outcome is
/// `failed` returns [`Error::Failed`] with the artifact's error.
pub struct BuiltinRunner {
    /// Settings with secrets (PVE, Gitea, share), loaded once by the CLI.
    pub settings: Arc<Settings>,
    /// Step options.
    pub options: RunnerOptions,
    backend: tokio::sync::OnceCell<crate::backend::Backend>,
}

impl std::fmt::Debug for BuiltinRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinRunner")
            .field("settings", &self.settings)
            .field("options", &self.options)
            .field("backend", &self.backend.get().map(|b| b.kind()))
            .finish()
    }
}

impl BuiltinRunner {
    /// A runner using `settings` and default step options.
    pub fn new(settings: Settings) -> Self {
        Self::with_options(settings, RunnerOptions::default())
    }

    /// A runner using `settings` and `options`.
    pub fn with_options(settings: Settings, options: RunnerOptions) -> Self {
        Self { settings: Arc::new(settings), options, backend: tokio::sync::OnceCell::new() }
    }

    async fn backend(&self, kind: BackendKind) -> Result<&crate::backend::Backend> {
        let b = self
            .backend
            .get_or_try_init(|| async { crate::backend::open(kind, &self.settings, &self.options.pve) })
            .await?;
        if b.kind() != kind {
            return Err(Error::Failed(anyhow::anyhow!(
                "one deploy uses one backend; asked for {kind}, built {}",
                b.kind()
            )));
        }
        Ok(b)
    }

    async fn provision(&self, spec: &ContainerSpec, ctx: &StepContext) -> StepResult {
        use crate::backend::model::{ApplyOptions, Outcome};
        let path = ctx.artifacts.provision(&spec.name);
        let opts = ApplyOptions {
            share: self.settings.share.clone(),
            wait_ssh: self.options.wait_ssh,
            ssh_port: self.options.ssh_port,
            ssh_timeout: self.options.ssh_timeout,
            recreate: self.options.recreate,
            no_snapshot: self.options.no_snapshot,
        };
        let _group = crate::ci::Group::start(&format!("provision {}", spec.name));
        // Do not create a container that the ref's configure step could not configure.
        let configures = crate::steps::plan::steps_for_ref(&ctx.git_ref).is_ok_and(|s| s.contains(&Step::Configure));
        let contract = crate::steps::configure::Contract::from_settings(&self.settings.gitea);
        let missing = crate::steps::configure::missing_requirements(&ctx.inventory, spec, &contract);
        let mut prov = if configures && !missing.is_empty() {
            let e = anyhow::anyhow!("{}", crate::steps::configure::requirements_error(spec, &missing));
            crate::backend::failed_before_plan(ctx.backend, spec, &opts, &e)
        } else {
            match self.backend(ctx.backend).await {
                Ok(backend) => match backend.plan(spec, self.options.recreate).await {
                    Ok(plan) => {
                        tracing::info!("{}: plan: {}", spec.name, crate::cli::describe::describe(&plan));
                        backend.apply(spec, &plan, &opts, &ctx.artifacts).await
                    }
                    Err(e) => crate::backend::failed_before_plan(ctx.backend, spec, &opts, &e),
                },
                // A backend that cannot be built (missing PROXMOX_HOST …) fails every container.
                Err(e) => {
                    let e = anyhow::anyhow!("{}", render_error(&e));
                    crate::backend::failed_before_plan(ctx.backend, spec, &opts, &e)
                }
            }
        };
        prov.inputs_digest = Some(ctx.digest.clone());
        for w in &prov.warnings {
            tracing::warn!("{}: {w}", spec.name);
        }
        artifact::write(&path, &prov)
            .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
        match prov.outcome {
            Outcome::Ok => Ok(StepSuccess { artifact: Some(path) }),
            Outcome::Failed { error } => Err(Error::Failed(anyhow::anyhow!("{error}"))),
        }
    }

    async fn configure(&self, spec: &ContainerSpec, ctx: &StepContext) -> StepResult {
        use crate::steps::configure::{ConfigureOptions, Contract, configure};
        let g = &self.settings.gitea;
        let opts = ConfigureOptions {
            containers: vec![spec.name.clone()],
            jobs: 1,
            artifacts: ctx.artifacts.clone(),
            contract: Contract::from_settings(g),
            connect: self.options.connect.clone(),
            run_timeout: self.options.run_timeout,
            ..ConfigureOptions::default()
        };
        let results = configure(&ctx.inventory, &opts).await?;
        let path = ctx.artifacts.configure(&spec.name);
        force_digest(&path, &ctx.digest);
        let Some(c) = results.into_iter().next() else {
            return Err(Error::Failed(anyhow::anyhow!("configure returned no result for {}", spec.name)));
        };
        match c.outcome {
            crate::backend::model::Outcome::Ok => Ok(StepSuccess { artifact: Some(path) }),
            crate::backend::model::Outcome::Failed { error } => {
                // The last lines of the engine's output (the error itself is reported by deploy).
                for l in c.log_tail.iter().filter(|l| !l.starts_with("error: ")) {
                    tracing::error!("{}: {l}", spec.name);
                }
                Err(Error::Failed(anyhow::anyhow!("{error}")))
            }
        }
    }

    async fn snapshot(&self, spec: &ContainerSpec, ctx: &StepContext) -> StepResult {
        use crate::steps::snapshot::{self as step, Operation, SnapshotOptions};
        let opts = SnapshotOptions {
            share: self.settings.share.clone(),
            keep: self.options.keep,
            now: time::OffsetDateTime::now_utc(),
        };
        let result = if spec.snapshot_paths.is_empty() {
            let mut a = step::Snapshot::new(spec, Operation::Snapshot);
            a.warnings.push(format!("{} declares no SNAPSHOT paths: nothing to snapshot", spec.name));
            a
        } else {
            let pve = match ctx.backend {
                crate::backend::model::BackendKind::Pve if self.settings.pve.host.is_some() => {
                    match crate::backend::pve_client(&self.settings, &self.options.pve) {
                        Ok(client) => Some(step::PveCtAccess {
                            client: std::sync::Arc::new(client),
                            task_timeout: self.options.pve.timeouts.create,
                        }),
                        Err(e) => {
                            tracing::warn!("{}: no PVE container snapshot: {}", spec.name, render_error(&e));
                            None
                        }
                    }
                }
                _ => None,
            };
            let connect =
                step::ConnectOptions { transport: step::Transport::Auto, ssh: self.options.connect.clone(), pve };
            match step::connect(spec, &ctx.artifacts, &opts.share, &connect).await {
                Ok(conn) => step::snapshot(spec, conn.exec.as_ref(), conn.ct.as_deref(), &opts).await,
                Err(reason) => {
                    let mut a = step::Snapshot::new(spec, Operation::Snapshot);
                    a.outcome = crate::backend::model::Outcome::Failed { error: reason.to_string() };
                    a
                }
            }
        };
        for w in &result.warnings {
            tracing::warn!("{}: {w}", spec.name);
        }
        let path = ctx.artifacts.snapshot(&spec.name);
        artifact::write(&path, &result)
            .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
        force_digest(&path, &ctx.digest);
        match result.outcome {
            crate::backend::model::Outcome::Ok => {
                if let Some(id) = &result.snapshot_id {
                    tracing::info!(
                        "{}: snapshot {id} verified ({} entries, {} bytes)",
                        spec.name,
                        result.entry_count,
                        result.bytes
                    );
                }
                Ok(StepSuccess { artifact: Some(path) })
            }
            crate::backend::model::Outcome::Failed { error } => Err(Error::Failed(anyhow::anyhow!("{error}"))),
        }
    }
}

impl StepRunner for BuiltinRunner {
    async fn run(&self, step: Step, spec: &ContainerSpec, ctx: &StepContext) -> StepResult {
        match step {
            Step::Provision => self.provision(spec, ctx).await,
            Step::Configure => self.configure(spec, ctx).await,
            Step::Snapshot => self.snapshot(spec, ctx).await,
        }
    }
}

/// Sets `inputs_digest` = `digest` in the artifact at `path` (atomic rewrite), whatever it held:
/// for steps whose artifact type has no such field.
fn force_digest(path: &Path, digest: &str) {
    let Ok(text) = std::fs::read_to_string(path) else { return };
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(&text) else { return };
    let Some(obj) = value.as_object_mut() else { return };
    obj.insert("inputs_digest".into(), digest.into());
    let mut s = serde_json::to_string_pretty(&value).expect("JSON values render");
    s.push('\n');
    if let Err(e) = artifact::write_bytes(path, s.as_bytes()) {
        tracing::warn!("cannot record the inputs digest in {}: {e}", path.display());
    }
}

/// The artifact path of `step` for container `name`.
pub fn step_artifact(dir: &ArtifactDir, step: Step, name: &str) -> PathBuf {
    match step {
        Step::Provision => dir.provision(name),
        Step::Configure => dir.configure(name),
        Step::Snapshot => dir.snapshot(name),
    }
}

// ------------------------------------------------------------------------------------------------
// Inputs digest
// ------------------------------------------------------------------------------------------------

/// File names never part of a digest: `*.local.*` (machine-local overrides and secrets, git-ignored).
fn is_local_file(name: &str) -> bool {
    name.contains(".local.") || name.ends_with(".local")
}

/// One file of a tree as it enters the digest.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TreeFile {
    rel: String,
    /// Git-style mode: `100644`, `100755` or `120000` (symlink; content = link target).
    mode: &'static str,
    path: PathBuf,
}

/// Lists the files of the tree at `dir`, sorted by relative path (`/`-separated).
///
/// Walks like git would see the working tree: `.gitignore` files apply (so build outputs such as
/// `target/` do not count), hidden files are included, `.git` entries (directories, and the files
/// submodules have) are skipped, as are `*.local.*` files and every directory in `exclude`
/// (absolute paths: the base tree and the other containers' trees when `dir` is the monorepo root).
fn tree_files(dir: &Path, exclude: &[PathBuf]) -> Result<Vec<TreeFile>> {
    let mut out = Vec::new();
    if !dir.is_dir() {
        return Ok(out);
    }
    let exclude: Vec<PathBuf> = exclude.to_vec();
    let walker = ignore::WalkBuilder::new(dir)
        .hidden(false)
        .git_ignore(true)
        .git_exclude(false)
        .git_global(false)
        .ignore(false)
        .parents(false)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |e| {
            let name = e.file_name().to_string_lossy();
            if name == ".git" || (e.depth() > 0 && exclude.iter().any(|x| x == e.path())) {
                return false;
            }
            !(e.file_type().is_some_and(|t| !t.is_dir()) && is_local_file(&name))
        })
        .build();
    for entry in walker {
        let entry = entry.map_err(|e| Error::Failed(anyhow::anyhow!("cannot walk {}: {e}", dir.display())))?;
        let Some(ft) = entry.file_type() else { continue };
        if ft.is_dir() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(dir)
            .unwrap_or(entry.path())
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let mode = if ft.is_symlink() {
            "120000"
        } else {
            use std::os::unix::fs::PermissionsExt;
            let meta = entry
                .metadata()
                .map_err(|e| Error::Failed(anyhow::anyhow!("cannot stat {}: {e}", entry.path().display())))?;
            if meta.permissions().mode() & 0o111 != 0 { "100755" } else { "100644" }
        };
        out.push(TreeFile { rel, mode, path: entry.path().to_path_buf() });
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// Feeds one length-prefixed field to the hasher (unambiguous framing).
fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

fn hash_tree(h: &mut Sha256, label: &str, dir: Option<&Path>, exclude: &[PathBuf]) -> Result<()> {
    field(h, label.as_bytes());
    let files = match dir {
        Some(d) => tree_files(d, exclude)?,
        None => Vec::new(),
    };
    h.update((files.len() as u64).to_be_bytes());
    let mut buf = vec![0u8; 64 * 1024];
    for f in files {
        field(h, f.rel.as_bytes());
        field(h, f.mode.as_bytes());
        let io = |e: std::io::Error| Error::Failed(anyhow::anyhow!("cannot read {}: {e}", f.path.display()));
        if f.mode == "120000" {
            let target = std::fs::read_link(&f.path).map_err(io)?;
            field(h, target.to_string_lossy().as_bytes());
        } else {
            let mut file = std::fs::File::open(&f.path).map_err(io)?;
            let len = file.metadata().map_err(io)?.len();
            h.update(len.to_be_bytes());
            let mut seen = 0u64;
            loop {
                let n = file.read(&mut buf).map_err(io)?;
                if n == 0 {
                    break;
                }
                seen += n as u64;
                h.update(&buf[..n]);
            }
            if seen != len {
                return Err(Error::Failed(anyhow::anyhow!(
                    "{} changed while it was read for the inputs digest",
                    f.path.display()
                )));
            }
        }
    }
    Ok(())
}

/// The inputs digest of container `spec`: `sha256:<64 hex>` over
///
/// 1. the [`ContainerSpec`] serialized as JSON (so every `container*.env` value counts);
/// 2. the lib tree `<root>/<spec.dir>`: each file's `/`-separated relative path, git-style mode
///    (`100644`/`100755`/`120000`) and content (a symlink's target), sorted by path;
/// 3. the base tree `<root>/<inv.base>` the same way (empty when there is none);
/// 4. the resolved globals (`globals.json` overlaid by `globals.local.json`), which every lib's
///    configuration sees;
/// 5. the settings that shape what is built (see [`ShapingSettings`]): template, storage, node,
///    host, network defaults, share, Gitea host and login. How the tool connects (port, user,
///    auth kind) does not count, and secrets never do: after changing `PASSWORD` or a token,
///    re-run with `--force`.
///
/// `.git`, `*.local.*` and git-ignored files are left out, and so is `artifacts` (the artifacts
/// directory, when it lies inside a tree; pass it canonical, like `root`). For the control plane
/// (`dir` = `.`) the lib tree is the monorepo root without `libs/` (the other containers) and the
/// base tree.
///
/// # Errors
/// [`Error::Failed`] when a file cannot be read.
pub fn inputs_digest(root: &Path, inv: &Inventory, spec: &ContainerSpec, artifacts: &Path) -> Result<String> {
    let mut h = Sha256::new();
    field(&mut h, b"proxmox-gitops inputs digest v2");
    let spec_json = serde_json::to_vec(spec).map_err(|e| Error::Failed(e.into()))?;
    field(&mut h, &spec_json);
    let lib_dir = root.join(&spec.dir);
    let base_dir = inv.base.as_ref().map(|b| root.join(b));
    let mut exclude: Vec<PathBuf> = base_dir.iter().cloned().collect();
    exclude.push(artifacts.to_path_buf());
    if spec.dir == Path::new(".") || spec.dir.as_os_str().is_empty() {
        let lib_dir = root.to_path_buf();
        exclude.push(lib_dir.join("libs"));
        for c in &inv.containers {
            if c.name != spec.name {
                exclude.push(root.join(&c.dir));
            }
        }
        exclude.retain(|p| p != &lib_dir);
        hash_tree(&mut h, "lib", Some(&lib_dir), &exclude)?;
    } else {
        hash_tree(&mut h, "lib", Some(&lib_dir), &exclude)?;
    }
    hash_tree(&mut h, "base", base_dir.as_deref(), &[artifacts.to_path_buf()])?;
    field(&mut h, b"globals");
    field(&mut h, &serde_json::to_vec(&inv.globals).map_err(|e| Error::Failed(e.into()))?);
    field(&mut h, b"settings");
    let shaping = ShapingSettings::of(&inv.settings);
    field(&mut h, &serde_json::to_vec(&shaping).map_err(|e| Error::Failed(e.into()))?);
    Ok(format!("sha256:{}", hex::encode(h.finalize())))
}

/// The part of [`PublicSettings`] that changes what `provision` builds or what `configure`
/// hands a lib, hashed into [`inputs_digest`]. Connection details (port, user, token id, auth
/// kind) are left out: reaching the same host another way builds the same containers.
#[derive(Debug, Serialize)]
pub struct ShapingSettings<'a> {
    /// `PROXMOX_HOST`: another cluster means other containers.
    pub pve_host: Option<&'a str>,
    /// `PROXMOX_NODE`.
    pub pve_node: Option<&'a str>,
    /// `PROXMOX_GATEWAY`.
    pub gateway: Option<&'a str>,
    /// `PROXMOX_MASK` (prefix length).
    pub mask: Option<u8>,
    /// `PROXMOX_INTERFACE` (net0's name in the container).
    pub interface: &'a str,
    /// `PROXMOX_BRIDGE`.
    pub bridge: &'a str,
    /// `PROXMOX_STORAGE` (template storage).
    pub storage: Option<&'a str>,
    /// `PROXMOX_TEMPLATE` (the ostemplate).
    pub template: Option<&'a str>,
    /// `PROXMOX_SHARE` on the runner (keys, snapshots).
    pub share: &'a Path,
    /// `HOST` (Gitea), which libs receive.
    pub gitea_host: Option<&'a str>,
    /// `LOGIN`, which libs receive (e.g. the broker's user).
    pub gitea_login: Option<&'a str>,
}

impl<'a> ShapingSettings<'a> {
    /// Borrows the shaping fields of `s`.
    pub fn of(s: &'a PublicSettings) -> Self {
        Self {
            pve_host: s.pve_host.as_deref(),
            pve_node: s.pve_node.as_deref(),
            gateway: s.gateway.as_deref(),
            mask: s.mask,
            interface: &s.interface,
            bridge: &s.bridge,
            storage: s.storage.as_deref(),
            template: s.template.as_deref(),
            share: &s.share,
            gitea_host: s.gitea_host.as_deref(),
            gitea_login: s.gitea_login.as_deref(),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Reading any step artifact loosely
// ------------------------------------------------------------------------------------------------

/// What [`read_step_status`] makes of a step artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepStatus {
    /// The artifact's `inputs_digest`, when it has one.
    pub digest: Option<String>,
    /// `Some(true)` for a success, `Some(false)` for a failure, `None` when the result is unknown.
    pub ok: Option<bool>,
    /// The `action` of each entry of the artifact's `actions` array, when it has one.
    pub actions: Vec<String>,
}

/// Reads the outcome of a step from its artifact as loose JSON, tolerant of the artifact's shape.
///
/// * digest: `inputs_digest` (or `digest`), at the top level or under `outcome`;
/// * result: `result` (`ok`/`success`/`succeeded`/`changed`/`unchanged` → success;
///   `failed`/`failure`/`error` → failure), at the top level or under `outcome`; a boolean `ok`
///   is accepted too;
/// * actions: `actions[].action` (or the entries themselves when they are strings).
///
/// Returns `None` when the file does not exist or is not a JSON object (never an error: an
/// unreadable artifact only means the step is not skipped).
pub fn read_step_status(path: &Path) -> Option<StepStatus> {
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    status_of(&value)
}

fn status_of(value: &serde_json::Value) -> Option<StepStatus> {
    let obj = value.as_object()?;
    let scopes: Vec<&serde_json::Map<String, serde_json::Value>> =
        std::iter::once(obj).chain(obj.get("outcome").and_then(|o| o.as_object())).collect();
    let find = |keys: &[&str]| scopes.iter().find_map(|s| keys.iter().find_map(|k| s.get(*k).filter(|v| !v.is_null())));
    let digest = find(&["inputs_digest", "digest"]).and_then(|v| v.as_str()).map(str::to_string);
    let ok = match find(&["result", "ok", "status"]) {
        Some(serde_json::Value::Bool(b)) => Some(*b),
        Some(serde_json::Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "ok" | "success" | "succeeded" | "changed" | "unchanged" => Some(true),
            "failed" | "failure" | "error" => Some(false),
            _ => None,
        },
        _ => None,
    };
    let actions = obj
        .get("actions")
        .and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| match x {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Object(o) => o.get("action").and_then(|v| v.as_str()).map(str::to_string),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Some(StepStatus { digest, ok, actions })
}

/// Sets `inputs_digest` in the artifact at `path` when it has none (atomic rewrite). Returns
/// whether the file was changed.
fn stamp_digest(path: &Path, digest: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else { return false };
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(&text) else { return false };
    let Some(obj) = value.as_object_mut() else { return false };
    match obj.get("inputs_digest") {
        Some(serde_json::Value::String(d)) => {
            if d != digest {
                tracing::warn!(
                    "{}: records inputs_digest {d}, deploy computed {digest}; it will not be skipped next time",
                    path.display()
                );
            }
            false
        }
        _ => {
            obj.insert("inputs_digest".into(), digest.into());
            let mut s = serde_json::to_string_pretty(&value).expect("JSON values render");
            s.push('\n');
            artifact::write_bytes(path, s.as_bytes()).is_ok()
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The deploy.json artifact
// ------------------------------------------------------------------------------------------------

/// What happened to one step of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepState {
    /// The step ran and succeeded.
    Ok,
    /// The step ran and failed.
    Failed,
    /// Not run: its artifact already shows success for the same inputs.
    Skipped,
    /// Not run: a `provision` failure for the same inputs leaves the container in an unknown state.
    Blocked,
    /// Not run: an earlier step of this container failed or was blocked.
    NotRun,
}

/// One step of one container in `deploy.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step.
    pub step: Step,
    /// What happened.
    pub state: StepState,
    /// Wall time in milliseconds (0 when not run).
    pub duration_ms: u64,
    /// The step's artifact, relative to the artifacts directory, when it exists.
    pub artifact: Option<String>,
    /// The actions the step's artifact lists (e.g. `create`, `start`, `wait-ssh`).
    pub actions: Vec<String>,
    /// Why it was skipped, blocked or not run.
    pub reason: Option<String>,
    /// The error, for a failed step (secrets redacted).
    pub error: Option<String>,
}

/// Final result of one container, or of the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunResult {
    /// Every step succeeded or was skipped.
    Ok,
    /// Some step failed or was blocked.
    Failed,
}

/// One container in `deploy.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// Container name.
    pub name: String,
    /// Hostname.
    pub hostname: String,
    /// vmid.
    pub vmid: u32,
    /// The inputs digest the steps ran for (`sha256:<hex>`); `None` when it could not be computed.
    pub inputs_digest: Option<String>,
    /// Result.
    pub result: RunResult,
    /// Wall time of all its steps, in milliseconds.
    pub duration_ms: u64,
    /// The steps, in order.
    pub steps: Vec<StepRecord>,
    /// The steps skipped because their artifact already showed success (shortcut for `steps`).
    pub skipped_steps: Vec<Step>,
    /// The first error, when the container failed.
    pub error: Option<String>,
}

/// The `deploy.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deploy {
    /// The ref deployed.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// Stage.
    pub stage: String,
    /// Backend used by provisioning.
    pub backend: BackendKind,
    /// The steps run per container, in order.
    pub steps: Vec<Step>,
    /// True when the steps were given explicitly (workflow dispatch) instead of by the ref.
    pub explicit_steps: bool,
    /// `--force`: nothing was skipped.
    pub force: bool,
    /// Maximum containers in parallel.
    pub jobs: usize,
    /// Start time, RFC 3339 UTC.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: time::OffsetDateTime,
    /// Wall time of the run in milliseconds.
    pub duration_ms: u64,
    /// `failed` when any container failed.
    pub result: RunResult,
    /// One entry per container, in inventory order.
    pub containers: Vec<ContainerRecord>,
}

impl Artifact for Deploy {
    const KIND: &'static str = "deploy";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

impl Deploy {
    /// Names of the containers that failed.
    pub fn failed(&self) -> Vec<&str> {
        self.containers.iter().filter(|c| c.result == RunResult::Failed).map(|c| c.name.as_str()).collect()
    }
}

// ------------------------------------------------------------------------------------------------
// The step
// ------------------------------------------------------------------------------------------------

/// Options of [`deploy`].
#[derive(Debug, Clone)]
pub struct DeployOptions {
    /// The monorepo checkout whose trees are hashed and deployed. When the inventory was resolved
    /// elsewhere (another workflow job), its `root` is replaced by this path.
    pub repo: PathBuf,
    /// The artifacts directory.
    pub artifacts: ArtifactDir,
    /// The ref; decides the steps unless `steps` is non-empty.
    pub git_ref: String,
    /// Explicit steps (workflow dispatch); run in pipeline order (provision, configure, snapshot).
    pub steps: Vec<Step>,
    /// Container names (lib name or hostname); empty = all of the stage.
    pub containers: Vec<String>,
    /// Run steps even when their artifact shows success for the same inputs.
    pub force: bool,
    /// At most this many containers at once (≥ 1).
    pub jobs: usize,
    /// Backend for provisioning.
    pub backend: BackendKind,
    /// The workflow run (`GITHUB_RUN_ID`), which makes snapshot steps resumable within a run.
    pub run_id: Option<String>,
}

/// The steps a deploy runs: the explicit ones in pipeline order, or the ref's.
///
/// # Errors
/// [`Error::Input`] for a ref that does not deploy (when no steps are given).
pub fn steps_to_run(git_ref: &str, explicit: &[Step]) -> Result<Vec<Step>> {
    if explicit.is_empty() {
        return steps_for_ref(git_ref);
    }
    let mut s = explicit.to_vec();
    s.sort();
    s.dedup();
    Ok(s)
}

/// Runs the deploy and writes `deploy.json`.
///
/// Input problems (a ref that does not deploy, an unknown container, `jobs` = 0) are returned
/// before anything runs. Otherwise the run always completes and returns the [`Deploy`] summary —
/// check [`Deploy::result`]; step failures are recorded in it, not returned.
///
/// # Errors
/// [`Error::Input`] as above; [`Error::Failed`] when `deploy.json` cannot be written.
pub async fn deploy<R: StepRunner>(runner: Arc<R>, inventory: Inventory, opts: &DeployOptions) -> Result<Deploy> {
    let steps = steps_to_run(&opts.git_ref, &opts.steps)?;
    if opts.jobs == 0 {
        return Err(Error::input(Location::file("--jobs"), "expected at least 1 container at a time, found 0"));
    }
    let selected: Vec<ContainerSpec> =
        inventory.select(&opts.containers, true, NotFound::InStage)?.into_iter().cloned().collect();

    let mut inventory = inventory;
    let root = opts
        .repo
        .canonicalize()
        .map_err(|e| Error::input(Location::file(&opts.repo), format!("cannot open the repository directory: {e}")))?;
    if inventory.root != root {
        tracing::info!(
            "inventory was resolved in {}; deploying the checkout at {}",
            inventory.root.display(),
            root.display()
        );
        inventory.root = root.clone();
    }
    let artifacts_dir = opts.artifacts.root();
    std::fs::create_dir_all(artifacts_dir).and_then(|_| artifacts_dir.canonicalize()).map_err(|e| {
        Error::Failed(anyhow::anyhow!("cannot create the artifacts directory {}: {e}", artifacts_dir.display()))
    })?;
    let inventory = Arc::new(inventory);
    let previous = Arc::new(previous_failures(&opts.artifacts.deploy()));
    let started_at = time::OffsetDateTime::now_utc();
    let started = Instant::now();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(opts.jobs));
    let mut set = tokio::task::JoinSet::new();
    let mut task_index = BTreeMap::new();
    for (i, spec) in selected.iter().enumerate() {
        let job = ContainerJob {
            runner: runner.clone(),
            inventory: inventory.clone(),
            spec: spec.clone(),
            steps: steps.clone(),
            opts: opts.clone(),
            semaphore: semaphore.clone(),
            previous: previous.clone(),
        };
        let handle = set.spawn(async move { (i, job.run().await) });
        task_index.insert(handle.id(), i);
    }
    let mut records: Vec<Option<ContainerRecord>> = vec![None; selected.len()];
    while let Some(joined) = set.join_next_with_id().await {
        match joined {
            Ok((_, (i, rec))) => records[i] = Some(rec),
            Err(e) => {
                let Some(&i) = task_index.get(&e.id()) else { continue };
                let spec = &selected[i];
                tracing::error!("{}: the deploy task crashed: {e}", spec.name);
                records[i] = Some(ContainerRecord {
                    name: spec.name.clone(),
                    hostname: spec.hostname.clone(),
                    vmid: spec.vmid,
                    inputs_digest: None,
                    result: RunResult::Failed,
                    duration_ms: 0,
                    steps: Vec::new(),
                    skipped_steps: Vec::new(),
                    error: Some(format!("the deploy task crashed: {e}")),
                });
            }
        }
    }
    let containers: Vec<ContainerRecord> = records.into_iter().flatten().collect();
    let result =
        if containers.iter().any(|c| c.result == RunResult::Failed) { RunResult::Failed } else { RunResult::Ok };
    let summary = Deploy {
        git_ref: opts.git_ref.clone(),
        stage: inventory.stage.clone(),
        backend: opts.backend,
        steps,
        explicit_steps: !opts.steps.is_empty(),
        force: opts.force,
        jobs: opts.jobs,
        started_at,
        duration_ms: started.elapsed().as_millis() as u64,
        result,
        containers,
    };
    artifact::write(&opts.artifacts.deploy(), &summary).map_err(|e| Error::Failed(e.into()))?;
    Ok(summary)
}

struct ContainerJob<R> {
    runner: Arc<R>,
    inventory: Arc<Inventory>,
    spec: ContainerSpec,
    steps: Vec<Step>,
    opts: DeployOptions,
    semaphore: Arc<tokio::sync::Semaphore>,
    previous: Arc<BTreeMap<String, String>>,
}

/// From an earlier `deploy.json` (e.g. the provision job's, handed over in the bundle): container
/// name → inputs digest, for every container whose `provision` failed or was blocked there.
fn previous_failures(path: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(path) else { return out };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else { return out };
    for c in value.get("containers").and_then(|c| c.as_array()).into_iter().flatten() {
        let (Some(name), Some(digest)) =
            (c.get("name").and_then(|v| v.as_str()), c.get("inputs_digest").and_then(|v| v.as_str()))
        else {
            continue;
        };
        let failed = c.get("steps").and_then(|s| s.as_array()).into_iter().flatten().any(|s| {
            s.get("step").and_then(|v| v.as_str()) == Some("provision")
                && matches!(s.get("state").and_then(|v| v.as_str()), Some("failed" | "blocked"))
        });
        if failed {
            out.insert(name.to_string(), digest.to_string());
        }
    }
    out
}

fn render_error(e: &Error) -> String {
    let text = match e {
        Error::Failed(e) => format!("{e:#}"),
        other => other.to_string(),
    };
    crate::ci::redact(text.trim_end())
}

impl<R: StepRunner> ContainerJob<R> {
    async fn run(self) -> ContainerRecord {
        let _permit = self.semaphore.clone().acquire_owned().await.expect("the semaphore is never closed");
        let started = Instant::now();
        let name = self.spec.name.clone();
        let mut rec = ContainerRecord {
            name: name.clone(),
            hostname: self.spec.hostname.clone(),
            vmid: self.spec.vmid,
            inputs_digest: None,
            result: RunResult::Ok,
            duration_ms: 0,
            steps: Vec::new(),
            skipped_steps: Vec::new(),
            error: None,
        };
        let root = self.inventory.root.clone();
        let inv = self.inventory.clone();
        let spec = self.spec.clone();
        let artifacts =
            self.opts.artifacts.root().canonicalize().unwrap_or_else(|_| self.opts.artifacts.root().to_path_buf());
        let digest = match tokio::task::spawn_blocking(move || inputs_digest(&root, &inv, &spec, &artifacts)).await {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return self.fail_all(rec, render_error(&e), started),
            Err(e) => return self.fail_all(rec, format!("computing the inputs digest crashed: {e}"), started),
        };
        rec.inputs_digest = Some(digest.clone());
        let ctx = StepContext {
            inventory: self.inventory.clone(),
            artifacts: self.opts.artifacts.clone(),
            git_ref: self.opts.git_ref.clone(),
            backend: self.opts.backend,
            digest: digest.clone(),
        };
        let mut stopped: Option<String> = None;
        for &step in &self.steps {
            let path = step_artifact(&self.opts.artifacts, step, &name);
            let rel = |p: &Path| p.strip_prefix(self.opts.artifacts.root()).unwrap_or(p).to_string_lossy().into_owned();
            let mut record = StepRecord {
                step,
                state: StepState::NotRun,
                duration_ms: 0,
                artifact: None,
                actions: Vec::new(),
                reason: None,
                error: None,
            };
            if let Some(why) = &stopped {
                record.reason = Some(why.clone());
                rec.steps.push(record);
                continue;
            }
            // The key this step's success is recorded under (snapshots: per run).
            let step_digest = match step {
                Step::Snapshot => self.opts.run_id.as_ref().map(|run| run_digest(&digest, run)),
                _ => Some(digest.clone()),
            };
            if !self.opts.force {
                if let Some(why) = self.blocked(step, &digest) {
                    tracing::error!("{name}: {step} blocked: {why}");
                    record.state = StepState::Blocked;
                    record.reason = Some(why.clone());
                    rec.result = RunResult::Failed;
                    rec.error.get_or_insert(format!("{step}: {why}"));
                    stopped = Some(format!("{step} was blocked"));
                    rec.steps.push(record);
                    continue;
                }
                if let Some(status) = read_step_status(&path)
                    && status.ok == Some(true)
                    && step_digest.is_some()
                    && status.digest == step_digest
                {
                    tracing::info!("{name}: {step} skipped: already succeeded for inputs {digest}");
                    record.state = StepState::Skipped;
                    record.reason = Some("already succeeded for the same inputs".into());
                    record.artifact = Some(rel(&path));
                    record.actions = status.actions;
                    rec.skipped_steps.push(step);
                    rec.steps.push(record);
                    continue;
                }
            }
            let step_ctx = StepContext { digest: step_digest.clone().unwrap_or_else(|| digest.clone()), ..ctx.clone() };
            tracing::info!("{name}: {step}");
            let t = Instant::now();
            let result = self.runner.run(step, &self.spec, &step_ctx).await;
            record.duration_ms = t.elapsed().as_millis() as u64;
            let written = match &result {
                Ok(s) => s.artifact.clone().unwrap_or_else(|| path.clone()),
                Err(_) => path.clone(),
            };
            if let Some(status) = read_step_status(&written) {
                record.artifact = Some(rel(&written));
                record.actions = status.actions;
            }
            match result {
                Ok(_) => {
                    if written.is_file() {
                        stamp_digest(&written, &step_ctx.digest);
                    }
                    record.state = StepState::Ok;
                    tracing::info!("{name}: {step} ok in {:.1}s", record.duration_ms as f64 / 1000.0);
                }
                Err(e) => {
                    let msg = render_error(&e);
                    tracing::error!("{name}: {step} failed: {msg}");
                    record.state = StepState::Failed;
                    record.error = Some(msg.clone());
                    rec.result = RunResult::Failed;
                    rec.error.get_or_insert(format!("{step}: {msg}"));
                    stopped = Some(format!("{step} failed"));
                }
            }
            rec.steps.push(record);
        }
        rec.duration_ms = started.elapsed().as_millis() as u64;
        rec
    }

    /// Why `step` must not run for these inputs, if so (see the module docs).
    fn blocked(&self, step: Step, digest: &str) -> Option<String> {
        if step != Step::Configure || self.steps.contains(&Step::Provision) {
            return None;
        }
        let name = &self.spec.name;
        let artifact = read_step_status(&self.opts.artifacts.provision(name));
        let by_artifact = artifact.as_ref().is_some_and(|s| s.ok == Some(false) && s.digest.as_deref() == Some(digest));
        // A provision that failed before writing its artifact is only known from deploy.json.
        let by_summary = !artifact.as_ref().is_some_and(|s| s.ok == Some(true) && s.digest.as_deref() == Some(digest))
            && self.previous.get(name).is_some_and(|d| d == digest);
        if by_artifact {
            Some(format!(
                "provision failed for the same inputs (see provision/{name}.json); fix it and re-run, or pass --force"
            ))
        } else if by_summary {
            Some("provision failed for the same inputs (see deploy.json of the provision run); fix it and re-run, or pass --force".into())
        } else {
            None
        }
    }

    fn fail_all(&self, mut rec: ContainerRecord, msg: String, started: Instant) -> ContainerRecord {
        tracing::error!("{}: {msg}", rec.name);
        rec.result = RunResult::Failed;
        rec.error = Some(msg.clone());
        rec.steps = self
            .steps
            .iter()
            .map(|&step| StepRecord {
                step,
                state: StepState::NotRun,
                duration_ms: 0,
                artifact: None,
                actions: Vec::new(),
                reason: Some(msg.clone()),
                error: None,
            })
            .collect();
        rec.duration_ms = started.elapsed().as_millis() as u64;
        rec
    }
}

/// The key a snapshot's success is recorded under: the inputs digest bound to the workflow run.
pub fn run_digest(digest: &str, run_id: &str) -> String {
    let mut h = Sha256::new();
    field(&mut h, digest.as_bytes());
    field(&mut h, run_id.as_bytes());
    format!("sha256:{}", hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_status() {
        let s = status_of(&serde_json::json!({"kind":"provision","inputs_digest":"sha256:ab","result":"ok",
            "actions":[{"action":"create"},{"action":"start"}]}))
        .unwrap();
        assert_eq!(
            s,
            StepStatus {
                digest: Some("sha256:ab".into()),
                ok: Some(true),
                actions: vec!["create".into(), "start".into()]
            }
        );
        let s = status_of(&serde_json::json!({"outcome":{"result":"failed","digest":"d"}})).unwrap();
        assert_eq!(s, StepStatus { digest: Some("d".into()), ok: Some(false), actions: vec![] });
        let s = status_of(&serde_json::json!({"ok":true,"actions":["a"]})).unwrap();
        assert_eq!(s, StepStatus { digest: None, ok: Some(true), actions: vec!["a".into()] });
        assert_eq!(status_of(&serde_json::json!([1])), None);
        let s = status_of(&serde_json::json!({"result":"weird"})).unwrap();
        assert_eq!(s.ok, None);
    }

    #[test]
    fn explicit_steps_are_ordered_and_override_the_ref() {
        assert_eq!(
            steps_to_run("refs/heads/feature", &[Step::Snapshot, Step::Provision, Step::Snapshot]).unwrap(),
            vec![Step::Provision, Step::Snapshot]
        );
        assert_eq!(steps_to_run("refs/heads/release", &[]).unwrap(), vec![Step::Provision, Step::Configure]);
        assert_eq!(steps_to_run("refs/heads/feature", &[]).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn local_files() {
        assert!(is_local_file("container.local.env"));
        assert!(is_local_file("config.local.json"));
        assert!(is_local_file("x.local"));
        assert!(!is_local_file("locale.json"));
    }
}
