//! A typed client for the Proxmox VE HTTP API (`https://HOST:8006/api2/json`).
//!
//! One module per concern:
//!
//! * [`client`] — [`PveClient`]: authentication (ticket or API token), requests,
//!   bounded retries of transport failures for calls that are safe to replay and of gateway
//!   errors (502/503/504) on reads, a request counter;
//! * [`tls`] — certificate verification: system roots, a CA file, or a pinned SHA-256
//!   fingerprint (the usual self-signed PVE node), or `--insecure`;
//! * [`task_wait`] — waiting for asynchronous tasks (UPIDs) with backoff and a timeout;
//! * [`cluster`] — the cluster's view (`GET /cluster/resources`: containers on any node, nodes
//!   with their memory, storages per node);
//! * [`node`] — [`Node`], one node: its status, templates, the container create, its tasks; and
//!   the node list;
//! * [`ct`] — [`Ct`], one container: config with digest, guarded config writes, pending keys,
//!   status, interfaces, power tasks, resize, migrate, destroy, snapshots;
//! * [`error`] — [`PveError`], which names method, path, HTTP status, PVE's message and its
//!   per-field `errors`; and the reading of an HTTP answer into `data` or such an error.
//!
//! This module is the only door to the PVE API: no path under `/nodes` or `/cluster` is built
//! outside it. The client knows nothing about container specs or policy: the `backend::pve`
//! module decides what to call, in which order, and what a failure means.

pub mod client;
pub mod cluster;
pub mod ct;
pub mod error;
pub mod node;
pub mod task_prior;
pub mod task_wait;
pub mod tls;

pub use client::{Auth, ClientOptions, DEFAULT_READ_TIMEOUT, DEFAULT_WRITE_TIMEOUT, PveClient, Replay};
pub use cluster::{ClusterResources, CtResource, NodeResource, StorageResource};
pub use ct::{Ct, CtConfig, CtInterface, CtSnapshotEntry, CtStatus, PendingKey};
pub use error::PveError;
pub use node::{Node, NodeEntry, TaskEntry, TaskFilter};
pub use task_wait::{TaskOutcome, upid_start};
pub use tls::TlsMode;
