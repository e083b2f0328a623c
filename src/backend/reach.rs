//! How the safety rule reaches a live container for its data snapshot, per backend, and what
//! the user can do when it cannot (the remedy in [`Unreachable`]).
//!
//! The rule itself ([`crate::snapshot::guard::protect`]) knows nothing of backends: it receives
//! the result of [`reach`] as a future, awaited only when a snapshot is needed.

use std::path::Path;

use super::Backend;
use crate::artifact::ArtifactDir;
use crate::exec::{LxcAttach, RemoteExec};
use crate::inventory::ContainerSpec;
use crate::snapshot::guard::Unreachable;

/// The transport to `spec`'s live container for the guard's data snapshot, or why there is
/// none and what to do about it: the lxc backend attaches to the running container on this host
/// (`lxc-attach`), so the remedy is `lxc-start`; PVE containers are reached the way the
/// `snapshot` step reaches them ([`crate::exec::reach`], over SSH from the
/// container's last `provision` artifact), so the remedy is starting the CT and making SSH work.
///
/// # Errors
/// [`Unreachable`] with the reason and the remedy for the container's backend.
pub async fn reach(
    backend: &Backend,
    spec: &ContainerSpec,
    artifacts: &ArtifactDir,
    share: &Path,
) -> std::result::Result<Box<dyn RemoteExec>, Unreachable> {
    match backend {
        Backend::Lxc(b) => {
            let name = spec.hostname.as_str();
            match b.client().state(name).await {
                Ok(crate::lxc::State::Running) => Ok(Box::new(LxcAttach::new(b.client().clone(), name))),
                Ok(state) => Err(Unreachable::new(
                    format!("LXC container `{name}` is {}, not running", state.as_str()),
                    lxc_remedy(b.client().path(), name, state),
                )),
                Err(e) => Err(Unreachable::new(
                    format!("cannot read the state of LXC container `{name}`: {e:#}"),
                    format!("check it with `{}`", lxc_command(b.client().path(), "lxc-info", name)),
                )),
            }
        }
        Backend::Pve(_) => {
            let remedy = format!(
                "start it (`pct start {}` on {}, or the PVE API) and make SSH work",
                spec.vmid,
                spec.node.as_deref().map(|n| format!("node {n}")).unwrap_or_else(|| "its node".into())
            );
            // The last provision run may have failed (e.g. this recreate was refused before):
            // the container still exists at the address it recorded.
            let prov = crate::exec::read_provision(spec, artifacts)
                .map_err(|reason| Unreachable::new(reason.to_string(), remedy.clone()))?;
            let opts = crate::exec::ReachOptions::default();
            crate::exec::reach(spec, &prov, artifacts, share, &opts, None)
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
fn lxc_remedy(lxc_path: &Path, name: &str, state: crate::lxc::State) -> String {
    match state {
        crate::lxc::State::Stopped => format!("start it (`{}`)", lxc_command(lxc_path, "lxc-start", name)),
        crate::lxc::State::Starting => "wait until it is running".into(),
        _ => format!(
            "bring it to RUNNING (`{}` shows its state; `lxc-unfreeze` a frozen one)",
            lxc_command(lxc_path, "lxc-info", name)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lxc::State;

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
