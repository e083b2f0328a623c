//! [`crate::live::Containers`] on Proxmox VE (dispatched by [`crate::backend::live::Live`]):
//! state and identity from `GET …/status/current`,
//! snapshots through [`PveSnapshots`] (`…/lxc/{vmid}/snapshot`), reboot (`POST
//! …/status/reboot`) and rollback with start (`POST …/snapshot/{snapname}/rollback`, `start=1`)
//! through [`crate::pve::ct`], each task waited for; commands over SSH (see [`crate::backend::live`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use tokio::sync::OnceCell;

use crate::backend::pve::placement::Wish;
use crate::exec::RemoteExec;
use crate::inventory::ContainerSpec;
use crate::live::{CtState, SnapshotTaken};
use crate::pve::PveClient;
use crate::snapshot::ct::{CtSnapshotInfo, CtSnapshots};
use crate::snapshot::pve::PveSnapshots;

/// How [`PveLive`] reaches containers and bounds its tasks.
#[derive(Debug, Clone)]
pub struct PveLiveOptions {
    /// Task bounds: `start` for starts, `shutdown` for the clean part of a reboot.
    pub timeouts: super::Timeouts,
    /// Bound of one snapshot task (create, rollback, delete), e.g. 600 s.
    pub snapshot_timeout: Duration,
    /// The share holding `.keys/<vmid>` (SSH into the containers).
    pub share: std::path::PathBuf,
    /// The artifacts directory: `known_hosts/<name>` of SSH connections.
    pub artifacts: crate::artifact::ArtifactDir,
    /// SSH connect tuning.
    pub ssh: crate::ssh::ConnectOptions,
    /// SSH port (22).
    pub ssh_port: u16,
}

/// Operations on PVE containers through one client (one session for the run).
pub struct PveLive {
    client: Arc<PveClient>,
    node: Option<String>,
    discovered: OnceCell<String>,
    /// The containers of the cluster (`GET /cluster/resources?type=vm`), read once per run.
    listed: OnceCell<crate::pve::ClusterResources>,
    interface: String,
    opts: PveLiveOptions,
}

impl PveLive {
    pub(crate) fn new(client: Arc<PveClient>, node: Option<String>, interface: String, opts: PveLiveOptions) -> Self {
        Self { client, node, discovered: OnceCell::new(), listed: OnceCell::new(), interface, opts }
    }

    /// The client (one session for the run).
    pub(crate) fn client(&self) -> &PveClient {
        &self.client
    }

    /// The configured node (`PROXMOX_NODE`), if any.
    pub(crate) fn configured_node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// The node the container is on (`GET /cluster/resources?type=vm`, read once per run for
    /// every container: moved by HA or by hand, it is found where it is); when it is not listed,
    /// the spec's `NODE`, else `PROXMOX_NODE`, else the only online node; `None` for `NODE=auto`
    /// (no node to look on: absent).
    async fn find(&self, spec: &ContainerSpec) -> anyhow::Result<Option<String>> {
        if let Some(ct) = self.listed().await?.ct(spec.vmid) {
            return Ok(Some(ct.node.clone()));
        }
        match Wish::of(spec.node.as_deref(), self.node.as_deref()) {
            Wish::Named(n) => Ok(Some(n)),
            Wish::Auto => Ok(None),
            Wish::Unset => Ok(Some(
                self.discovered.get_or_try_init(|| crate::backend::pve::discover_node(&self.client)).await?.clone(),
            )),
        }
    }

    /// The containers of the cluster as `GET /cluster/resources?type=vm` lists them, read once
    /// per run (the first caller reads; the run's other containers use the same listing).
    ///
    /// # Errors
    /// API errors, naming the request.
    pub(crate) async fn listed(&self) -> anyhow::Result<&crate::pve::ClusterResources> {
        self.listed
            .get_or_try_init(|| self.client.cluster_resources(Some("vm")))
            .await
            .context("cannot list the cluster's containers (GET /cluster/resources?type=vm)")
    }

    /// [`Self::find`], and an error naming the container when it is on no node (`NODE=auto`).
    pub(crate) async fn node(&self, spec: &ContainerSpec) -> anyhow::Result<String> {
        self.find(spec).await?.ok_or_else(|| anyhow!("CT {} ({}) is on no node of the cluster", spec.vmid, spec.name))
    }

    fn snaps(&self, node: &str, spec: &ContainerSpec) -> PveSnapshots {
        PveSnapshots::new(self.client.clone(), node, spec.vmid).with_timeout(self.opts.snapshot_timeout)
    }

    pub(crate) async fn status(&self, spec: &ContainerSpec) -> anyhow::Result<CtState> {
        let Some(node) = self.find(spec).await? else { return Ok(CtState::Absent) };
        let vmid = spec.vmid;
        let Some(st) = self
            .client
            .ct(&node, vmid)
            .status()
            .await
            .with_context(|| format!("cannot read the status of CT {vmid} on node {node}"))?
        else {
            return Ok(CtState::Absent);
        };
        // PVE reports the hostname as `name`; an old answer without it is checked on the config.
        let hostname = match st.name.clone() {
            Some(n) => n,
            None => {
                let c = self
                    .client
                    .ct(&node, vmid)
                    .config()
                    .await
                    .with_context(|| format!("cannot read the config of CT {vmid} on node {node}"))?;
                c.map(|c| c.hostname().to_string()).unwrap_or_default()
            }
        };
        if hostname != spec.hostname {
            return Ok(CtState::Foreign {
                detail: format!(
                    "CT {vmid} on node {node} holds hostname `{hostname}`, not `{}`: it is not {}'s container",
                    spec.hostname, spec.name
                ),
            });
        }
        Ok(if st.running() { CtState::Running } else { CtState::NotRunning { state: st.status.clone() } })
    }

    /// The address to reach: the spec's static one, else the configured interface's IPv4 from
    /// `GET …/interfaces`.
    async fn address(&self, spec: &ContainerSpec) -> anyhow::Result<String> {
        if let Some(a) = spec.ip.address() {
            return Ok(a.to_string());
        }
        let node = self.node(spec).await?;
        let ifs = self
            .client
            .ct(&node, spec.vmid)
            .interfaces()
            .await
            .with_context(|| format!("cannot read the interfaces of CT {} on node {node}", spec.vmid))?;
        ifs.iter()
            .filter(|i| i.name == self.interface)
            .find_map(|i| i.inet.as_deref().and_then(|c| c.split('/').next()).map(str::to_string))
            .ok_or_else(|| {
                anyhow!(
                    "{} (IP=dhcp): CT {} reports no IPv4 address on {} (GET /nodes/{node}/lxc/{}/interfaces); \
                     is it on the network?",
                    spec.name,
                    spec.vmid,
                    self.interface,
                    spec.vmid
                )
            })
    }

    pub(crate) async fn exec(&self, spec: &ContainerSpec, timeout: Duration) -> anyhow::Result<Box<dyn RemoteExec>> {
        let address = self.address(spec).await?;
        let known_hosts = self.opts.artifacts.known_hosts(&spec.name);
        let target = crate::access::ssh_target(
            &spec.name,
            spec.vmid,
            &address,
            self.opts.ssh_port,
            &self.opts.share,
            known_hosts,
            false,
        )?;
        let exec = crate::access::ssh_exec(&target, &self.opts.ssh, timeout).await?;
        tracing::debug!("{}: connected over SSH as {}", spec.name, exec.connection().user());
        Ok(Box::new(exec))
    }

    pub(crate) async fn snapshot(
        &self,
        spec: &ContainerSpec,
        name: &str,
        description: &str,
    ) -> anyhow::Result<SnapshotTaken> {
        let node = self.node(spec).await?;
        let created = self.snaps(&node, spec).create(name, description).await?;
        Ok(SnapshotTaken { upid: created.upid, restarted: false, downtime_ms: created.downtime_ms })
    }

    pub(crate) async fn snapshots(&self, spec: &ContainerSpec) -> anyhow::Result<Vec<CtSnapshotInfo>> {
        let node = self.node(spec).await?;
        Ok(self.snaps(&node, spec).list().await?)
    }

    pub(crate) async fn delete_snapshot(&self, spec: &ContainerSpec, name: &str) -> anyhow::Result<Option<String>> {
        let node = self.node(spec).await?;
        Ok(self.snaps(&node, spec).delete(name).await?)
    }

    pub(crate) async fn rollback(&self, spec: &ContainerSpec, name: &str) -> anyhow::Result<Option<String>> {
        let node = self.node(spec).await?;
        let vmid = spec.vmid;
        if !valid_snapname(name) {
            bail!("`{name}` is not a valid PVE snapshot name");
        }
        let upid = self
            .client
            .ct(&node, vmid)
            .rollback(name, true)
            .await
            .with_context(|| format!("cannot roll CT {vmid} on node {node} back to {name}"))?;
        // The rollback task stops, restores and starts: bound it by the snapshot and the start
        // timeouts together.
        let bound = self.opts.snapshot_timeout + self.opts.timeouts.start;
        let out = self
            .client
            .wait_task(&upid, bound, &format!("rollback CT {vmid} to {name}"))
            .await
            .with_context(|| format!("rolling CT {vmid} on node {node} back to {name} failed"))?;
        Ok(Some(out.upid))
    }

    pub(crate) async fn reboot(&self, spec: &ContainerSpec) -> anyhow::Result<Option<String>> {
        let node = self.node(spec).await?;
        let vmid = spec.vmid;
        let shutdown = self.opts.timeouts.shutdown;
        let upid = self
            .client
            .ct(&node, vmid)
            .reboot(shutdown.as_secs())
            .await
            .with_context(|| format!("cannot reboot CT {vmid} on node {node}"))?;
        let bound = shutdown + self.opts.timeouts.start + Duration::from_secs(30);
        let out = self
            .client
            .wait_task(&upid, bound, &format!("reboot CT {vmid}"))
            .await
            .with_context(|| format!("rebooting CT {vmid} on node {node} failed"))?;
        Ok(Some(out.upid))
    }
}

/// A PVE `pve-configid`: a letter, then letters, digits, `-`, `_`; at most 40 (checked before
/// the name goes into a path).
fn valid_snapname(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 40
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    #[test]
    fn snapshot_names_for_paths() {
        assert!(super::valid_snapname("pgo-update-20261201-170000"));
        assert!(!super::valid_snapname("../x"));
        assert!(!super::valid_snapname("1abc"));
        assert!(!super::valid_snapname(&"a".repeat(41)));
    }
}
