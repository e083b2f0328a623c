//! The integration tests, one binary with one module per area (the layout cargo's own test suite
//! uses): every former `tests/<area>.rs` binary linked the whole crate and its dependencies on its
//! own, so one binary builds in a fraction of the time (docs/benchmarks/test-build.md).
//!
//! A module's tests keep the names they had as a binary, prefixed by the area:
//! `cargo test --test suite resolve::` runs what `cargo test --test resolve` ran. Filters are
//! substrings, so `plan::` also matches `saved_plan::`; add `--skip saved_plan::` for plan alone.
//!
//! Areas now share one process: tests of different areas run in parallel, where the binaries ran
//! one after the other. The areas that use real LXC containers, the real Gitea or its runner take
//! [`support::heavy::area`] first, so no two of them overlap (see there). Nothing here may change
//! process-wide state (`std::env::set_var`, the current directory, the umask): pass it to child
//! processes instead.
//!
//! `tests/provision_lxc.rs` stays a binary of its own (its own harness, see Cargo.toml).

#[path = "../support/mod.rs"]
mod support;

mod bad_input;
mod cli_conventions;
mod cluster_pve;
mod configure;
mod control_plane;
mod deploy;
mod deploy_cli;
mod drift;
mod gitea_publish;
mod gitea_tasks;
mod guard_lxc;
mod guard_pve;
mod health;
mod local_run;
mod loop_e2e;
mod plan;
mod properties;
mod provision_pve;
mod provision_pve_storage;
mod real_host;
mod real_host_concurrency;
mod real_host_pipeline;
mod render_workflows;
mod resolve;
mod saved_plan;
mod share;
mod snapshot;
mod snapshot_lxc;
mod snapshot_pve;
mod snapshot_ssh;
mod update_lxc;
mod update_pve;
mod workflows_act;
