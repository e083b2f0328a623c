//! Provisioning backends: they compare a [`crate::inventory::ContainerSpec`] with the live
//! container, plan, and apply the plan.
//!
//! * [`crate::model`] (below, on the data floor) — the backend-neutral result model: the
//!   per-container [`crate::model::ContainerPlan`], the [`crate::model::RecreatePolicy`] and the
//!   `provision/<name>.json` [`crate::model::Provision`] artifact;
//! * [`failed`] — that artifact for a container that could not be planned;
//! * [`pve`] — Proxmox VE over its API; [`lxc`] — LXC containers on this host. Both follow one
//!   shape: `desired` (the spec as the backend's own settings, plain data), `planner` (a pure
//!   function of desired and live state, unit-tested without a server) and a thin executor;
//! * [`choose`] — which backend a run uses and how it is opened from the settings;
//! * [`dispatch`] — [`Backend`], the enum over both, with the safety rule before a recreate, and
//!   [`plan_all`];
//! * [`live`] — operations on existing containers from the inventory and the settings alone
//!   (state, a way in, container snapshots, reboot, rollback) and the container health check,
//!   for `health` and `update`.
//!
//! Each backend offers the same three methods, so [`Backend`] dispatches over them:
//!
//! * `plan(&self, spec, policy) -> anyhow::Result<ContainerPlan>` — reads live state only;
//! * `apply(&self, spec, plan, opts) -> Provision` — never panics; failures become
//!   `Outcome::Failed` with the actions done so far;
//! * `destroy(&self, spec) -> anyhow::Result<Vec<ActionRecord>>`.
//!
//! Steps (`plan`, `provision`, `destroy`, `deploy`) use this module; it never calls a step.

pub mod choose;
pub mod dispatch;
pub mod failed;
pub mod live;
pub mod lxc;
pub mod pve;

pub use choose::{PveConnect, default_backend, lxc_backend, open, pve_backend, pve_client};
pub use dispatch::{Backend, Planned, plan_all};
pub use failed::failed_before_plan;
