//! Provision artifacts for tests that start after the provision step (snapshot, configure):
//! one [`running`] artifact to adjust, and [`write`] to put it where the later steps read it.

use std::path::Path;

use proxmox_gitops::artifact;
use proxmox_gitops::model::{Action, BackendKind, ContainerPlan, Outcome, Provision};

/// The provision artifact of container `name` (vmid `vmid`, host name `hostname`) on `backend`
/// that was running and left as it was: no node, no address, SSH port 22, plan `Nothing`
/// without a start, no actions or warnings, status `running`, not created (no creation time),
/// outcome ok. Tests
/// change the fields their case needs.
pub fn running(backend: BackendKind, name: &str, vmid: u32, hostname: &str) -> Provision {
    Provision {
        backend,
        name: name.into(),
        node: None,
        vmid,
        hostname: hostname.into(),
        address: None,
        ssh_port: 22,
        plan: ContainerPlan::new(name, vmid, hostname, Action::Nothing, false),
        actions: vec![],
        warnings: vec![],
        status: Some("running".into()),
        created: false,
        created_at: None,
        protected_by: None,
        inputs_digest: None,
        outcome: Outcome::Ok,
    }
}

/// Writes `p` to `<artifacts>/provision/<name>.json`, as the provision step does.
pub fn write(artifacts: &Path, p: &Provision) {
    artifact::write(&artifacts.join("provision").join(format!("{}.json", p.name)), p).unwrap();
}
