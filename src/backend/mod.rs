//! Provisioning backends: they compare a [`crate::inventory::ContainerSpec`] with the live
//! container, plan, and apply the plan.
//!
//! Each backend offers the same three methods, so the provision step dispatches over an enum of
//! them:
//!
//! * `plan(&self, spec, policy) -> anyhow::Result<ContainerPlan>` — reads live state only;
//! * `apply(&self, spec, plan, opts) -> Provision` — never panics; failures become
//!   `Outcome::Failed` with the actions done so far;
//! * `destroy(&self, spec) -> anyhow::Result<Vec<ActionRecord>>`.

pub mod lxc;
pub mod model;
pub mod pve;
