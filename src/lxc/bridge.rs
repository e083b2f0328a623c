//! The host bridge LXC containers attach to (`lxcbr0`, managed by `lxc-net`): its address, the
//! address `lxc-net` will give it, and bringing it up with DHCP when it is missing or its dnsmasq
//! is gone.
//!
//! Kept apart from [`super::LxcClient`] because it is host networking, not containers: it runs
//! `ip`, `systemctl` or lxc-net's script (through [`super::process::run`]), never an `lxc-*` tool.

use std::net::Ipv4Addr;
use std::path::Path;

use super::process::{os, run, which};
use super::{LxcError, QUICK_TIMEOUT, Result};

/// The IPv4 address and prefix length of `bridge` (`ip -j -4 addr show dev BRIDGE`), `None`
/// when the bridge does not exist or has no IPv4 address.
///
/// # Errors
/// `ip` missing or printing unexpected output.
pub async fn bridge_ipv4(bridge: &str) -> Result<Option<(Ipv4Addr, u8)>> {
    let args = os(&["-j", "-4", "addr", "show", "dev", bridge]);
    let out = match run("ip", &args, None, QUICK_TIMEOUT).await {
        Ok(o) => o,
        // `ip` fails with "Device … does not exist".
        Err(LxcError::Command { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    let found = v
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default())
        .find_map(|a| {
            let ip: Ipv4Addr = a["local"].as_str()?.parse().ok()?;
            let prefix = u8::try_from(a["prefixlen"].as_u64()?).ok()?;
            Some((ip, prefix))
        });
    Ok(found)
}

/// The address `lxc-net` gives its bridge, from its settings file (`/etc/default/lxc-net`:
/// `LXC_ADDR`, `LXC_NETMASK`), with lxc-net's own defaults 10.0.3.1/24. Used to plan without
/// bringing the bridge up.
pub fn lxc_net_settings(text: Option<&str>) -> (Ipv4Addr, u8) {
    let mut addr = Ipv4Addr::new(10, 0, 3, 1);
    let mut prefix = 24u8;
    for line in text.unwrap_or("").lines() {
        let Some((k, v)) = line.trim().split_once('=') else { continue };
        let v = v.trim().trim_matches('"').trim_matches('\'');
        match k.trim() {
            "LXC_ADDR" => addr = v.parse().unwrap_or(addr),
            "LXC_NETMASK" => {
                if let Ok(m) = v.parse::<Ipv4Addr>() {
                    prefix = u32::from(m).count_ones() as u8;
                }
            }
            _ => {}
        }
    }
    (addr, prefix)
}

/// The bridge's address if it is up, else the one `lxc-net` will give it (see
/// [`lxc_net_settings`]). Changes nothing on the host.
///
/// # Errors
/// `ip` missing.
pub async fn bridge_ipv4_or_planned(bridge: &str) -> Result<(Ipv4Addr, u8)> {
    if let Some(found) = bridge_ipv4(bridge).await? {
        return Ok(found);
    }
    Ok(lxc_net_settings(std::fs::read_to_string("/etc/default/lxc-net").ok().as_deref()))
}

/// Where `lxc-net` keeps its run state (`varrun` in `/usr/libexec/lxc/lxc-net`): the marker
/// `network_up` and dnsmasq's `dnsmasq.pid`.
pub const LXC_NET_RUN_DIR: &str = "/run/lxc";

/// The bridge `lxc-net` manages, from its settings file (`/etc/default/lxc-net`: `LXC_BRIDGE`),
/// with lxc-net's default `lxcbr0`.
pub fn lxc_net_bridge(text: Option<&str>) -> String {
    text.unwrap_or("")
        .lines()
        .filter_map(|l| l.trim().split_once('='))
        .filter(|(k, _)| k.trim() == "LXC_BRIDGE")
        .map(|(_, v)| v.trim().trim_matches('"').trim_matches('\'').to_string())
        .filter(|v| !v.is_empty())
        .last()
        .unwrap_or_else(|| "lxcbr0".to_string())
}

/// Whether a dnsmasq serving `bridge` runs: a process whose `comm` is `dnsmasq` and whose
/// command line has `--interface=<bridge>` (how `lxc-net` starts it). Reads only `proc_root`
/// (`/proc` on a host; a directory of the same shape in tests).
pub fn dnsmasq_serves(proc_root: &Path, bridge: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(proc_root) else { return false };
    let wanted = format!("--interface={bridge}");
    entries.flatten().any(|e| {
        let is_pid = e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        is_pid
            && std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == "dnsmasq")
            && std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == wanted.as_bytes()))
    })
}

/// Forgets `lxc-net`'s run state in `run_dir` when its dnsmasq is gone (the bridge and its address
/// outlive the process, e.g. when the session that started it was killed): without this,
/// `lxc-net start` answers "already running" and the stale `dnsmasq.pid` would make its `stop`
/// `kill -9` whatever process now has that pid.
fn forget_stale_lxc_net_state(run_dir: &Path) {
    for f in ["network_up", "dnsmasq.pid"] {
        let p = run_dir.join(f);
        match std::fs::remove_file(&p) {
            Ok(()) => tracing::debug!("removed stale {}", p.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("could not remove stale {}: {e}", p.display()),
        }
    }
}

/// Makes sure LXC's bridge is up with DHCP and returns its address. When `bridge` has no IPv4
/// address — or it is lxc-net's bridge (see [`lxc_net_bridge`]) and no dnsmasq serves it (see
/// [`dnsmasq_serves`]), so containers would never get an address — starts `lxc-net`
/// (`systemctl restart lxc-net` on a systemd host, else `/usr/libexec/lxc/lxc-net start`, which
/// creates `lxcbr0` with dnsmasq for DHCP) and looks again. A bridge that lxc-net does not
/// manage is taken as it is.
///
/// # Errors
/// [`LxcError::Bridge`] when the bridge is still missing or still has no DHCP server, saying
/// what to configure.
pub async fn ensure_bridge(bridge: &str) -> Result<(Ipv4Addr, u8)> {
    let managed = lxc_net_bridge(std::fs::read_to_string("/etc/default/lxc-net").ok().as_deref()) == bridge;
    let proc_root = Path::new("/proc");
    if let Some(found) = bridge_ipv4(bridge).await? {
        if !managed || dnsmasq_serves(proc_root, bridge) {
            return Ok(found);
        }
        tracing::warn!(
            "{bridge} is up but lxc-net's dnsmasq does not run (no DHCP for containers): restarting lxc-net"
        );
        forget_stale_lxc_net_state(Path::new(LXC_NET_RUN_DIR));
    }
    let mut tried = Vec::new();
    if Path::new("/run/systemd/system").is_dir() && which("systemctl").is_some() {
        let r = run("systemctl", &os(&["restart", "lxc-net"]), None, QUICK_TIMEOUT).await;
        tried.push(format!("systemctl restart lxc-net: {}", r.err().map_or("ok".to_string(), |e| e.to_string())));
    } else {
        for script in ["/usr/libexec/lxc/lxc-net", "/usr/lib/x86_64-linux-gnu/lxc/lxc-net", "/usr/lib/lxc/lxc-net"] {
            if Path::new(script).is_file() {
                let r = run(script, &os(&["start"]), None, QUICK_TIMEOUT).await;
                tried.push(format!("{script} start: {}", r.err().map_or("ok".to_string(), |e| e.to_string())));
                break;
            }
        }
    }
    if let Some(found) = bridge_ipv4(bridge).await? {
        if !managed || dnsmasq_serves(proc_root, bridge) {
            return Ok(found);
        }
        tried.push("dnsmasq still does not serve it".to_string());
    }
    let hint = if tried.is_empty() {
        "lxc-net was not found; install `lxc` and set USE_LXC_BRIDGE=\"true\" in /etc/default/lxc-net".to_string()
    } else {
        format!(
            "tried {}; check USE_LXC_BRIDGE=\"true\" in /etc/default/lxc-net and that dnsmasq-base is installed",
            tried.join("; ")
        )
    };
    Err(LxcError::Bridge { bridge: bridge.to_string(), hint })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lxc_net_bridge_and_default() {
        assert_eq!(lxc_net_bridge(None), "lxcbr0");
        assert_eq!(lxc_net_bridge(Some("USE_LXC_BRIDGE=\"true\"\nLXC_BRIDGE=\"br-lab\"\n")), "br-lab");
        assert_eq!(lxc_net_bridge(Some("LXC_BRIDGE=\n")), "lxcbr0");
    }

    /// A fake /proc: pid directories with `comm` and a NUL-separated `cmdline`.
    fn fake_proc(procs: &[(&str, &str, &[&str])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("self")).unwrap();
        for (pid, comm, args) in procs {
            let p = dir.path().join(pid);
            std::fs::create_dir(&p).unwrap();
            std::fs::write(p.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(p.join("cmdline"), args.join("\0") + "\0").unwrap();
        }
        dir
    }

    #[test]
    fn dnsmasq_serving_the_bridge_is_found_by_its_interface_argument() {
        let lxc_dnsmasq: &[&str] =
            &["dnsmasq", "--conf-file=/dev/null", "--interface=lxcbr0", "--listen-address", "10.0.3.1"];
        let running = fake_proc(&[("1", "systemd", &["/sbin/init"]), ("18671", "dnsmasq", lxc_dnsmasq)]);
        assert!(dnsmasq_serves(running.path(), "lxcbr0"));
        assert!(!dnsmasq_serves(running.path(), "lxcbr1"), "another bridge's dnsmasq does not count");
        // The pid file's process is gone and its pid reused by something else.
        let dead = fake_proc(&[
            ("18671", "bash", &["bash", "--interface=lxcbr0"]),
            ("20", "dnsmasq", &["dnsmasq", "--interface=virbr0"]),
        ]);
        assert!(!dnsmasq_serves(dead.path(), "lxcbr0"));
        assert!(!dnsmasq_serves(Path::new("/nonexistent-proc"), "lxcbr0"));
    }

    #[test]
    fn stale_lxc_net_state_is_forgotten() {
        let run = tempfile::tempdir().unwrap();
        std::fs::write(run.path().join("network_up"), "").unwrap();
        std::fs::write(run.path().join("dnsmasq.pid"), "18671\n").unwrap();
        std::fs::write(run.path().join("lock"), "").unwrap();
        forget_stale_lxc_net_state(run.path());
        assert!(!run.path().join("network_up").exists());
        assert!(!run.path().join("dnsmasq.pid").exists());
        assert!(run.path().join("lock").exists(), "only lxc-net's state files go");
        forget_stale_lxc_net_state(run.path()); // nothing left: no error
    }

    #[test]
    fn lxc_net_settings_and_defaults() {
        assert_eq!(lxc_net_settings(None), (Ipv4Addr::new(10, 0, 3, 1), 24));
        let text = "USE_LXC_BRIDGE=\"true\"\nLXC_ADDR=\"10.1.0.1\"\nLXC_NETMASK='255.255.0.0'\n# LXC_ADDR=1.2.3.4\n";
        assert_eq!(lxc_net_settings(Some(text)), (Ipv4Addr::new(10, 1, 0, 1), 16));
    }
}
