//! The one support tree of the integration tests: the `suite` binary (tests/suite/main.rs) and
//! `tests/provision_lxc.rs` declare `mod support;` and use what they need from here.
//!
//! Shared by all: [`git`] (the one `git` runner, isolated from the host's global and system
//! configuration), [`fs`] (copying and writing fixture trees) and [`spec`] (the one
//! [`ContainerSpec`](proxmox_gitops::inventory::ContainerSpec) builder). Per area: [`fakepve`]
//! (fakepve on loopback), [`gitea`] (the Gitea double), [`fixture`] (`resolve`'s monorepos),
//! [`deploy`] (fake step runners), [`provision`] (provision artifacts), [`configure`], [`lxc`], [`snapshot`] and [`workflows`] (real
//! LXC containers, data snapshots, act runs), [`runner`] (Gitea's runner dispatch played on the
//! Gitea double: pushes run the published workflows with act), [`real_gitea`] (the real Gitea and
//! its real runner on loopback, built by `tests/real_host/build.sh`), [`real_pipeline`] (the broker
//! monorepo published there, and what its runs did), [`heavy`] (one area of real containers or
//! the real Gitea at a time within the suite).
//!
//! Each binary uses a part of the tree, so unused items are allowed here.
#![allow(dead_code)]

pub mod configure;
pub mod deploy;
pub mod fakepve;
pub mod fixture;
pub mod fs;
pub mod git;
pub mod gitea;
pub mod heavy;
pub mod lxc;
pub mod provision;
pub mod real_gitea;
pub mod real_pipeline;
pub mod runner;
pub mod snapshot;
pub mod spec;
pub mod workflows;
