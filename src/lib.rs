//! proxmox-gitops: turn a Git monorepo into running Proxmox VE containers.
//!
//! # Floors
//!
//! The crate is a house with floors; `use` arrows only point down.
//!
//! 1. [`cli`] — argument parsing (shared groups in `cli/args.rs`), one file per subcommand, the
//!    one async runner and `$GITHUB_OUTPUT` writer (`cli/run.rs`), exit codes, human wording
//!    (tables and the plan in words, `cli/describe/`). No subcommand imports another: what two
//!    share is an argument group (`cli/args.rs`), a wording (`cli/describe/`) or `cli::Ctx`
//!    (the inventory and the settings, each read once per run).
//! 2. [`steps`] — the pipeline steps (`resolve`, `rewrite`, `publish`, `plan`, `provision`,
//!    `configure`, `snapshot`, `destroy`, `render_workflows`) and the tasks' steps (`health`,
//!    `update`, `auto_merge`) as library functions: typed
//!    artifact in → plan → effects → typed artifact out. A step never imports another step;
//!    only [`steps::deploy`] composes them.
//! 3. [`backend`] — provisioning backends (PVE, local LXC) behind one enum ([`backend::Backend`],
//!    chosen by [`backend::open`]), each in its own folder: a pure planner over desired state,
//!    a thin executor, and its live view of deployed containers without artifacts (state, way
//!    in, snapshots, reboot, rollback), dispatched by [`backend::live::Live`]. Below them, on
//!    the same floor and unaware of any backend: [`live`] — the [`live::Containers`] trait the
//!    `health` and `update` steps use, and the container health check over it; [`access`] — the
//!    one way into a container, from its provision artifact or from what its backend reports
//!    live (`lxc-attach` or SSH with its own key pair), and the guard's way in with its
//!    remedies; [`snapshot`] — data archives (with the pre- and post-snapshot hooks), container
//!    snapshots and the protect-before-destroy rule ([`snapshot::guard`]).
//!    [`control_plane`] — what the control plane's container `config` runs (Gitea and its runner):
//!    its programs (given or downloaded and verified) and its rendered configuration.
//! 4. Clients, one per external system, unaware of the pipeline and of each other:
//!    [`pve`] (Proxmox VE API; the only place that builds an API path: typed handles for one
//!    node, [`pve::Node`], and one container, [`pve::Ct`]), [`gitea`] (Gitea API), [`actions`]
//!    (Gitea/GitHub Actions: workflow commands, step outputs, the job summary), [`ssh`] (OpenSSH,
//!    the containers' key pairs, waiting for sshd), [`git`] (gix reads and the `git` CLI), [`lxc`] (every `lxc-*` process), and [`exec`] ("run this command in that container",
//!    over SSH, `lxc-attach` or locally, behind one trait: transport only, no artifact read).
//! 5. Data and leaf helpers: [`inventory`] (the monorepo model and its env files), [`model`]
//!    (the backend-neutral provision model: plans, the recreate policy, the provision artifact,
//!    drifted keys; what backends, steps, snapshots and `access` share), [`artifact`]
//!    (the artifacts directory, every artifact path, and [`artifact::pack`] for job outputs),
//!    [`settings`] (from the environment and `local/config*.json`), [`remote_url`]
//!    (URLs with their credentials redacted), [`error`], [`pipe`], [`progress`],
//!    [`workflows`] (the workflow files proxmox-gitops renders and installs), [`share`] (the CIFS
//!    client units of the share, rendered for the base role).

pub mod access;
pub mod actions;
pub mod artifact;
pub mod backend;
pub mod cli;
pub mod control_plane;
pub mod error;
pub mod exec;
pub mod git;
pub mod gitea;
pub mod inventory;
pub mod live;
pub mod lxc;
pub mod model;
pub mod pipe;
pub mod progress;
pub mod pve;
pub mod remote_url;
pub mod settings;
pub mod share;
pub mod snapshot;
pub mod ssh;
pub mod steps;
pub mod workflows;
