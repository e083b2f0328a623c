//! The former home of the transport seam, now [`crate::exec`]; kept as re-exports so the paths
//! the test support tree imports (`snapshot::remote::{CommandExec, RemoteExec, …}`) still
//! resolve. New code imports [`crate::exec`]; this module goes once `tests/support/` does.

pub use crate::exec::{BoxFuture, ExecStatus, RemoteExec, SSH_EXEC_TIMEOUT, SshExec, SshTransport, run_collect};

/// The local executor under its former name ([`crate::exec::LocalExec`]).
pub type CommandExec = crate::exec::LocalExec;

impl crate::exec::LocalExec {
    /// This host, as the current user: [`crate::exec::LocalExec::new`] under its former name.
    pub fn local() -> Self {
        Self::new()
    }
}
