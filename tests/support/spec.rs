//! The one [`ContainerSpec`] builder of the tests, over [`ContainerSpec::new`] (the
//! `container.env` defaults: DHCP, 1 core, 512 MiB memory and swap, `local-lvm:8`, start at
//! boot, `libs/<name>`).
//!
//! `spec(name, vmid)` starts from those defaults; each setter changes what a test needs and
//! [`SpecBuilder::build`] returns the spec: `spec("app", 101).loopback().build()`.

use proxmox_gitops::inventory::{ContainerSpec, Disk, IpConfig};

/// Starts a spec called `name` (also its hostname) with `vmid` and the defaults.
pub fn spec(name: &str, vmid: u32) -> SpecBuilder {
    SpecBuilder(ContainerSpec::new(name, vmid, IpConfig::Dhcp))
}

/// A [`ContainerSpec`] being built (see [`spec`]).
#[derive(Debug, Clone)]
pub struct SpecBuilder(ContainerSpec);

impl SpecBuilder {
    /// The static address 127.0.0.1/8: API tests never reach the container, and an SSH wait
    /// only ever goes to loopback.
    pub fn loopback(mut self) -> Self {
        self.0.ip = IpConfig::Static { address: "127.0.0.1".parse().unwrap(), prefix: Some(8) };
        self
    }

    /// `cores`, memory and swap in MiB.
    pub fn resources(mut self, cores: u32, memory_mib: u64, swap_mib: u64) -> Self {
        self.0.cores = cores;
        self.0.memory_mib = memory_mib;
        self.0.swap_mib = swap_mib;
        self
    }

    /// No swap.
    pub fn no_swap(mut self) -> Self {
        self.0.swap_mib = 0;
        self
    }

    /// The root filesystem: `size_gib` GiB on `storage`.
    pub fn rootfs(mut self, storage: &str, size_gib: u64) -> Self {
        self.0.rootfs = Disk { storage: storage.into(), size_gib };
        self
    }

    /// `NODE`: a PVE node name, or `auto`.
    pub fn node(mut self, node: &str) -> Self {
        self.0.node = Some(node.into());
        self
    }

    /// Not started at boot.
    pub fn no_onboot(mut self) -> Self {
        self.0.onboot = false;
        self
    }

    /// The small container of the LXC tests: 256 MiB, no swap, `local:4`, not started at boot.
    pub fn small_lxc(self) -> Self {
        let mut s = self.no_swap().rootfs("local", 4).no_onboot();
        s.0.memory_mib = 256;
        s
    }

    /// The lib's directory `libs/<lib>` and its `container.env` as the only source (for a spec
    /// whose name is not the lib's, e.g. a prefixed test container).
    pub fn lib(mut self, lib: &str) -> Self {
        self.0.dir = format!("libs/{lib}").into();
        self.0.sources = vec![format!("libs/{lib}/container.env").into()];
        self
    }

    /// The `SNAPSHOT` paths.
    pub fn snapshot_paths<S: AsRef<str>>(mut self, paths: &[S]) -> Self {
        self.0.snapshot_paths = paths.iter().map(|p| p.as_ref().to_string()).collect();
        self
    }

    /// The `SERVICES` units, as `resolve` stores them (full unit names).
    pub fn services<S: AsRef<str>>(mut self, units: &[S]) -> Self {
        self.0.services = units.iter().map(|u| u.as_ref().to_string()).collect();
        self
    }

    /// The spec.
    pub fn build(self) -> ContainerSpec {
        self.0
    }
}
