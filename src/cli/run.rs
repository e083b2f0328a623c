//! The one way a subcommand runs its step's async work and hands results to the workflow.
//!
//! The steps are async (PVE, Gitea, SSH); the CLI is not. [`runtime`] builds the tokio runtime
//! a subcommand needs ([`Threads`]: the default multi-thread pool, one thread for a handful of
//! sequential API calls, or a pool sized to the jobs), and [`block_on`] runs one future on a
//! fresh one. [`outputs`] and [`step_outputs`] write `$GITHUB_OUTPUT` (see [`crate::actions`]) and
//! turn a write failure into the same operational error (exit 1) everywhere.

use std::future::Future;
use std::path::Path;

use crate::error::{Error, Result};

/// The worker threads of a subcommand's runtime.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Threads {
    /// A multi-thread runtime with tokio's default worker count (one per core).
    Default,
    /// A current-thread runtime: the subcommand makes a few API calls one after the other.
    Current,
    /// A multi-thread runtime with this many workers (at least 1).
    Workers(usize),
}

/// A tokio runtime with timers and I/O enabled.
///
/// # Errors
/// [`Error::Failed`] when the runtime cannot be started (no threads, no epoll).
pub(crate) fn runtime(threads: Threads) -> Result<tokio::runtime::Runtime> {
    let mut builder = match threads {
        Threads::Current => tokio::runtime::Builder::new_current_thread(),
        Threads::Default | Threads::Workers(_) => tokio::runtime::Builder::new_multi_thread(),
    };
    if let Threads::Workers(n) = threads {
        builder.worker_threads(n.max(1));
    }
    builder.enable_all().build().map_err(|e| Error::Failed(anyhow::anyhow!("cannot start the async runtime: {e}")))
}

/// Runs `fut` to completion on a fresh [`runtime`] of `threads`.
///
/// # Errors
/// See [`runtime`]; the future's own result is returned as its output.
pub(crate) fn block_on<F: Future>(threads: Threads, fut: F) -> Result<F::Output> {
    Ok(runtime(threads)?.block_on(fut))
}

/// Appends `outputs` to `$GITHUB_OUTPUT` when it is set ([`crate::actions::set_outputs`]).
///
/// # Errors
/// [`Error::Failed`] naming `$GITHUB_OUTPUT` when the file cannot be written.
pub(crate) fn outputs(outputs: &[(&str, String)]) -> Result<()> {
    crate::actions::set_outputs(outputs).map_err(output_error)
}

/// Appends a per-container step's outputs (`succeeded`, `failed`, `<step>_dir`) to
/// `$GITHUB_OUTPUT` ([`crate::actions::set_step_outputs`]); `states` is (container, succeeded).
///
/// # Errors
/// As [`outputs`].
pub(crate) fn step_outputs(step: &str, dir: &Path, states: &[(&str, bool)]) -> Result<()> {
    crate::actions::set_step_outputs(step, dir, states).map_err(output_error)
}

fn output_error(e: std::io::Error) -> Error {
    Error::Failed(anyhow::anyhow!("cannot write $GITHUB_OUTPUT: {e}"))
}
