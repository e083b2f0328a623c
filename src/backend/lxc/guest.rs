//! Files the lxc backend writes into a container's root filesystem before it starts, so that it
//! is reachable the moment it boots:
//!
//! * the network: LXC configures `eth0`'s static address and default route
//!   (`lxc.net.0.ipv4.address`/`gateway`) before init runs, so the guest's ifupdown is told to
//!   leave `eth0` alone (`iface eth0 inet manual`, nothing waits for or asks DHCP) and
//!   `/etc/resolv.conf` names the bridge's dnsmasq, the resolver DHCP would have given;
//! * an SSH host key (new clones only): an ed25519 key generated here, with an `sshd_config.d`
//!   drop-in naming it as the only `HostKey`, instead of the base's first-boot `ssh-keygen -A`,
//!   whose RSA key alone takes seconds of CPU while sshd waits for it.
//!
//! Writes go to the rootfs as the container's config names it: `dir:PATH` (or a plain path), or
//! the upper directory of `overlay:LOWER:UPPER` (a file there hides the base's copy). They are
//! made only while the container is stopped, and never through a symlink: each directory on the
//! way must be a real directory (a container's own files cannot redirect a write of root on the
//! host), and the file is written to a temporary name and renamed.

use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};
use ssh_key::{Algorithm, LineEnding, PrivateKey, rand_core::OsRng};

use crate::lxc::LxcConfig;

/// Where the backend writes into a container's root filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestRoot {
    /// The directory written to: the rootfs, or the overlay's upper directory.
    pub dir: PathBuf,
    /// The overlay's lower directory (the base's rootfs), whose directory modes new directories
    /// in the upper one copy; `None` for a plain directory rootfs.
    pub lower: Option<PathBuf>,
}

/// The writable root of a container from its config's `lxc.rootfs.path`: `dir:PATH` or `PATH`,
/// or `overlay:LOWER:UPPER` (also `overlayfs:`). `None` for any other backing store (LVM, ZFS,
/// btrfs …), whose rootfs is not a host directory while the container is stopped.
pub fn guest_root(config: &LxcConfig) -> Option<GuestRoot> {
    let p = config.get("lxc.rootfs.path")?;
    if let Some(rest) = p.strip_prefix("overlay:").or_else(|| p.strip_prefix("overlayfs:")) {
        let (lower, upper) = rest.rsplit_once(':')?;
        return Some(GuestRoot { dir: upper.into(), lower: Some(lower.into()) });
    }
    let dir = p.strip_prefix("dir:").unwrap_or(p);
    dir.starts_with('/').then(|| GuestRoot { dir: dir.into(), lower: None })
}

/// `/etc/network/interfaces` of a container whose `eth0` LXC configures.
pub const INTERFACES: &str = "# Written by proxmox-gitops: LXC configures eth0's address and default route\n\
# (lxc.net.0.ipv4.address / gateway in the container's config) before the container starts,\n\
# so ifupdown only brings the link up and nothing waits for DHCP.\n\
auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet manual\n";

/// The `sshd_config.d` drop-in naming the host key the backend generated.
pub const SSHD_HOSTKEY_DROPIN: &str = "# Written by proxmox-gitops: the host key generated when this container was made.\n\
HostKey /etc/ssh/ssh_host_ed25519_key\n";

/// One file to write into the guest: path relative to its `/`, content, mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestFile {
    /// Path under the root, without a leading `/` (e.g. `etc/resolv.conf`).
    pub path: &'static str,
    /// Content.
    pub content: Vec<u8>,
    /// File mode.
    pub mode: u32,
}

/// The network files of a container with a static address on a bridge whose own address (the
/// gateway and, through lxc-net's dnsmasq, the resolver) is `bridge`.
pub fn network_files(bridge: Ipv4Addr) -> Vec<GuestFile> {
    vec![
        GuestFile { path: "etc/network/interfaces", content: INTERFACES.as_bytes().to_vec(), mode: 0o644 },
        GuestFile {
            path: "etc/resolv.conf",
            content: format!("# Written by proxmox-gitops: lxc-net's dnsmasq on the bridge.\nnameserver {bridge}\n")
                .into_bytes(),
            mode: 0o644,
        },
    ]
}

/// A new ed25519 SSH host key for the container `hostname`: the private key file, its `.pub`
/// and the drop-in naming it ([`SSHD_HOSTKEY_DROPIN`]).
///
/// # Errors
/// Key generation or encoding fails.
pub fn host_key_files(hostname: &str) -> Result<Vec<GuestFile>> {
    let mut key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).context("cannot generate an ed25519 host key")?;
    key.set_comment(format!("root@{hostname}"));
    let private = key.to_openssh(LineEnding::LF).context("cannot encode the host key")?;
    let public = key.public_key().to_openssh().context("cannot encode the host key")?;
    Ok(vec![
        GuestFile { path: "etc/ssh/ssh_host_ed25519_key", content: private.as_bytes().to_vec(), mode: 0o600 },
        GuestFile {
            path: "etc/ssh/ssh_host_ed25519_key.pub",
            content: format!("{public}\n").into_bytes(),
            mode: 0o644,
        },
        GuestFile {
            path: "etc/ssh/sshd_config.d/proxmox-gitops-hostkey.conf",
            content: SSHD_HOSTKEY_DROPIN.as_bytes().to_vec(),
            mode: 0o644,
        },
    ])
}

/// Writes `file` under `root` (see the module docs: no symlink is followed, missing directories
/// are created with the mode of the lower directory's counterpart, else 0755; the file is
/// replaced atomically). Call it only while the container is stopped.
///
/// # Errors
/// A path component that is a symlink or not a directory, I/O failures; each names the path.
pub fn write(root: &GuestRoot, file: &GuestFile) -> Result<()> {
    let rel = Path::new(file.path);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        bail!("{}: not a plain relative path", file.path);
    }
    let parent = rel.parent().unwrap_or(Path::new(""));
    let mut dir = root.dir.clone();
    let mut lower = root.lower.clone();
    for c in parent.components() {
        dir.push(c);
        lower = lower.map(|l| l.join(c));
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(_) => bail!("{}: not a directory (a symlink or a file), not writing through it", dir.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mode = lower
                    .as_deref()
                    .and_then(|l| std::fs::symlink_metadata(l).ok())
                    .filter(|m| m.file_type().is_dir())
                    .map_or(0o755, |m| m.permissions().mode() & 0o7777);
                std::fs::DirBuilder::new()
                    .mode(mode)
                    .create(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
                    .with_context(|| format!("cannot set the mode of {}", dir.display()))?;
            }
            Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", dir.display())),
        }
    }
    let target = root.dir.join(rel);
    let mut tmp = tempfile::Builder::new()
        .prefix(".pgo-")
        .tempfile_in(&dir)
        .with_context(|| format!("cannot create a file in {}", dir.display()))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(file.mode))
        .and_then(|()| tmp.write_all(&file.content))
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("cannot write {}", target.display()))?;
    tmp.persist(&target).map_err(|e| e.error).with_context(|| format!("cannot write {}", target.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writable_root_comes_from_the_rootfs_path() {
        let c = |p: &str| LxcConfig::parse(&format!("lxc.rootfs.path = {p}\n"));
        assert_eq!(
            guest_root(&c("overlay:/var/lib/lxc/base/rootfs:/var/lib/lxc/web/overlay/delta")),
            Some(GuestRoot {
                dir: "/var/lib/lxc/web/overlay/delta".into(),
                lower: Some("/var/lib/lxc/base/rootfs".into())
            })
        );
        assert_eq!(
            guest_root(&c("dir:/var/lib/lxc/web/rootfs")),
            Some(GuestRoot { dir: "/var/lib/lxc/web/rootfs".into(), lower: None })
        );
        assert_eq!(guest_root(&c("/srv/web")), Some(GuestRoot { dir: "/srv/web".into(), lower: None }));
        assert_eq!(guest_root(&c("lvm:/dev/vg/web")), None);
        assert_eq!(guest_root(&LxcConfig::parse("")), None);
    }

    #[test]
    fn files_are_written_with_modes_and_never_through_a_symlink() {
        let lower = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(lower.path().join("etc/ssh")).unwrap();
        std::fs::set_permissions(lower.path().join("etc/ssh"), std::fs::Permissions::from_mode(0o750)).unwrap();
        let root = GuestRoot { dir: upper.path().into(), lower: Some(lower.path().into()) };
        for f in network_files(Ipv4Addr::new(10, 0, 3, 1)).iter().chain(&host_key_files("web").unwrap()) {
            write(&root, f).unwrap();
        }
        let mode = |p: &str| std::fs::metadata(upper.path().join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(std::fs::read_to_string(upper.path().join("etc/network/interfaces")).unwrap(), INTERFACES);
        assert_eq!(
            std::fs::read_to_string(upper.path().join("etc/resolv.conf")).unwrap(),
            "# Written by proxmox-gitops: lxc-net's dnsmasq on the bridge.\nnameserver 10.0.3.1\n"
        );
        assert_eq!(mode("etc/ssh"), 0o750, "a new directory copies the base's mode");
        assert_eq!(mode("etc/network"), 0o755);
        assert_eq!(mode("etc/ssh/ssh_host_ed25519_key"), 0o600);
        let public = std::fs::read_to_string(upper.path().join("etc/ssh/ssh_host_ed25519_key.pub")).unwrap();
        assert!(public.starts_with("ssh-ed25519 ") && public.ends_with(" root@web\n"), "{public}");
        let private = PrivateKey::read_openssh_file(&upper.path().join("etc/ssh/ssh_host_ed25519_key")).unwrap();
        assert_eq!(format!("{}\n", private.public_key().to_openssh().unwrap()), public);

        // A symlink planted on the way is refused, and nothing is written where it points.
        let elsewhere = tempfile::tempdir().unwrap();
        let evil = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), evil.path().join("etc")).unwrap();
        let e = write(&GuestRoot { dir: evil.path().into(), lower: None }, &network_files(Ipv4Addr::LOCALHOST)[1])
            .unwrap_err();
        assert!(e.to_string().contains("not a directory (a symlink or a file)"), "{e}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }
}
