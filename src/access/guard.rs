//! How the protect-before-destroy guard enters a live container for its data snapshot, per
//! backend, and what the user can do when it cannot (the remedy in [`Unreachable`]).
//!
//! The rule itself ([`crate::snapshot::guard::protect`]) knows nothing of backends: it receives
//! the result of [`for_guard`] as a future, awaited only when a snapshot is needed.

use std::path::Path;

use super::{AccessOptions, ReachError};
use crate::artifact::ArtifactDir;
use crate::exec::RemoteExec;
use crate::inventory::ContainerSpec;
use crate::lxc::{LxcClient, State};
use crate::model::BackendKind;
use crate::snapshot::guard::Unreachable;

/// The way into `spec`'s live container for the guard's data snapshot, or why there is none
/// and what to do about it. The `lxc` backend (`lxc`: its client) attaches to the running
/// container on this host, so the remedy is `lxc-start`. PVE containers are entered the way the
/// `snapshot` step enters them ([`super::exec_recorded`], over SSH from the container's last
/// `provision` artifact, whatever its outcome: the container still exists at the address it
/// recorded), so the remedy is starting the CT and making SSH work.
///
/// # Errors
/// [`Unreachable`] with the reason and the remedy for the container's backend.
pub async fn for_guard(
    backend: BackendKind,
    lxc: Option<&LxcClient>,
    spec: &ContainerSpec,
    artifacts: &ArtifactDir,
    share: &Path,
) -> Result<Box<dyn RemoteExec>, Unreachable> {
    match (backend, lxc) {
        (BackendKind::Lxc, Some(client)) => {
            let name = spec.hostname.as_str();
            match super::attach_running(client, name, None).await {
                Ok(attach) => Ok(Box::new(attach)),
                Err(ReachError::NotRunning { state, .. }) => Err(Unreachable::new(
                    format!("LXC container `{name}` is {}, not running", state.as_str()),
                    lxc_remedy(client.path(), name, state),
                )),
                Err(e) => Err(Unreachable::new(
                    format!("cannot read the state of LXC container `{name}`: {e}"),
                    format!("check it with `{}`", lxc_command(client.path(), "lxc-info", name)),
                )),
            }
        }
        _ => {
            let remedy = format!(
                "start it (`pct start {}` on {}, or the PVE API) and make SSH work",
                spec.vmid,
                spec.node.as_deref().map(|n| format!("node {n}")).unwrap_or_else(|| "its node".into())
            );
            let prov = super::read_provision(spec, artifacts)
                .map_err(|reason| Unreachable::new(reason.to_string(), remedy.clone()))?;
            super::exec_recorded(spec, &prov, artifacts, share, &AccessOptions::default(), lxc)
                .await
                .map_err(|reason| Unreachable::new(reason.to_string(), remedy))
        }
    }
}

/// `<tool> [-P <lxcpath>] -n <name>` as the user would type it (`-P` only when the LXC path is
/// not LXC's default `/var/lib/lxc`).
fn lxc_command(lxc_path: &Path, tool: &str, name: &str) -> String {
    if lxc_path == Path::new("/var/lib/lxc") {
        format!("{tool} -n {name}")
    } else {
        format!("{tool} -P {} -n {name}", lxc_path.display())
    }
}

/// What makes a non-running LXC container reachable through `lxc-attach` (no SSH involved).
fn lxc_remedy(lxc_path: &Path, name: &str, state: State) -> String {
    match state {
        State::Stopped => format!("start it (`{}`)", lxc_command(lxc_path, "lxc-start", name)),
        State::Starting => "wait until it is running".into(),
        _ => format!(
            "bring it to RUNNING (`{}` shows its state; `lxc-unfreeze` a frozen one)",
            lxc_command(lxc_path, "lxc-info", name)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lxc_remedy_names_lxc_start_not_ssh() {
        let default = Path::new("/var/lib/lxc");
        assert_eq!(lxc_remedy(default, "broker", State::Stopped), "start it (`lxc-start -n broker`)");
        assert_eq!(
            lxc_remedy(Path::new("/srv/lxc"), "broker", State::Stopped),
            "start it (`lxc-start -P /srv/lxc -n broker`)"
        );
        assert_eq!(lxc_remedy(default, "broker", State::Starting), "wait until it is running");
        assert_eq!(
            lxc_remedy(default, "broker", State::Other),
            "bring it to RUNNING (`lxc-info -n broker` shows its state; `lxc-unfreeze` a frozen one)"
        );
    }
}
