//! Data snapshots (runner-side verified archives of a lib's declared paths), container
//! snapshots (PVE `…/lxc/{vmid}/snapshot`, `lxc-snapshot`), retention, and the rule that nothing
//! is destroyed without a snapshot.
//!
//! * [`scripts`] — the fixed shell scripts run as root in the container (through a
//!   [`crate::exec::RemoteExec`]: SSH, `lxc-attach` or this host);
//! * [`record`] — the `snapshot/<name>.json` artifact, [`record::restore`] and
//!   [`record::restore_if_empty`] (shared by the `snapshot` and `configure` steps);
//! * [`manifest`] — per-entry manifests, digest, comparison;
//! * [`store`] — `<share>/snapshots/<lib>/<lib>-YYYYMMDD-HHMMSS.tar.gz` + `.json`, ordering by
//!   parsed time, retention;
//! * [`data`] — take / verify / restore;
//! * [`ct`] — container snapshots behind [`ct::CtSnapshots`]: names `pgo-YYYYMMDD-HHMMSS`,
//!   retention of our own snapshots only, error classification;
//! * [`lxc`] — [`ct::CtSnapshots`] over [`crate::lxc::LxcClient`]'s `lxc-snapshot`;
//! * [`pve`] — [`ct::CtSnapshots`] over the PVE API (`…/lxc/{vmid}/snapshot`);
//! * [`guard`] — the safety rule before a destroy or recreate.

pub mod ct;
pub mod data;
pub mod guard;
pub mod lxc;
pub mod manifest;
pub mod pve;
pub mod record;
pub mod scripts;
pub mod store;

pub use crate::exec::{ExecStatus, LocalExec, RemoteExec, SshExec, SshTransport};
