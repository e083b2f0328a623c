//! proxmox-gitops: turn a Git monorepo into running Proxmox VE containers.
//!
//! Floors, top to bottom (arrows only point down):
//!
//! * `cli` — argument parsing, one file per subcommand, exit codes, human output;
//! * [`steps`] — the pipeline steps (resolve, plan, provision, configure, snapshot, …) as
//!   library functions over typed artifacts; a step never imports another step (only `deploy`
//!   composes them);
//! * [`backend`] — provisioning backends (PVE, LXC) behind one enum, each a pure planner over
//!   desired state plus a thin executor, and the provision model ([`backend::model`]);
//! * data and client modules — [`inventory`], [`artifact`], [`settings`], [`git`], [`ci`],
//!   [`progress`], and one client module per external system.

pub mod artifact;
pub mod backend;
pub mod bundle;
pub mod ci;
pub mod cli;
pub mod error;
pub mod exec;
pub mod git;
pub mod git_cli;
pub mod gitea;
pub mod inventory;
pub mod keys;
pub mod lxc;
pub mod net;
pub mod pipe;
pub mod progress;
pub mod pve;
pub mod settings;
pub mod snapshot;
pub mod ssh;
pub mod steps;
