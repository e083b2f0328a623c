//! The host bridge LXC containers attach to (`lxcbr0`, managed by `lxc-net`): its address, the
//! address `lxc-net` will give it, and bringing it up with DHCP when it is missing or its dnsmasq
//! is gone; lxc-net's DHCP range, its dnsmasq's leases, and the part of the subnet left for
//! static addresses ([`static_pool`], [`reserve_static_range`]).
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

/// The settings file of `lxc-net` (sourced by its script through `/etc/default/lxc`).
pub const LXC_NET_SETTINGS: &str = "/etc/default/lxc-net";

/// The value of `key` in a shell settings file like `/etc/default/lxc-net` (`KEY="value"`, last
/// assignment wins, comments and blank values skipped), `None` when it is not set.
pub fn setting(text: Option<&str>, key: &str) -> Option<String> {
    text.unwrap_or("")
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.split(" #").next().unwrap_or("").trim().trim_matches('"').trim_matches('\'').to_string())
        .rfind(|v| !v.is_empty())
}

/// lxc-net's default DHCP range (`LXC_DHCP_RANGE` in `/usr/libexec/lxc/lxc-net`): the whole
/// default subnet 10.0.3.0/24 but the bridge's own address.
pub const LXC_NET_DEFAULT_DHCP_RANGE: (Ipv4Addr, Ipv4Addr) = (Ipv4Addr::new(10, 0, 3, 2), Ipv4Addr::new(10, 0, 3, 254));

/// The addresses lxc-net's dnsmasq leases (`LXC_DHCP_RANGE="FIRST,LAST"` of its settings file),
/// lxc-net's default [`LXC_NET_DEFAULT_DHCP_RANGE`] when unset. `None` when the value is not two
/// IPv4 addresses (then nothing is known to be free of leases).
pub fn lxc_net_dhcp_range(text: Option<&str>) -> Option<(Ipv4Addr, Ipv4Addr)> {
    match setting(text, "LXC_DHCP_RANGE") {
        None => Some(LXC_NET_DEFAULT_DHCP_RANGE),
        Some(v) => {
            let (a, b) = v.split_once(',')?;
            let (a, b): (Ipv4Addr, Ipv4Addr) =
                (a.trim().parse().ok()?, b.trim().split(',').next()?.trim().parse().ok()?);
            Some(if u32::from(a) <= u32::from(b) { (a, b) } else { (b, a) })
        }
    }
}

/// The host addresses of the subnet `net` (address, prefix length): network and broadcast
/// addresses excluded; `None` for prefixes above /30.
fn hosts(net: (Ipv4Addr, u8)) -> Option<(u32, u32)> {
    if net.1 > 30 {
        return None;
    }
    let mask = if net.1 == 0 { 0 } else { u32::MAX << (32 - u32::from(net.1)) };
    let base = u32::from(net.0) & mask;
    Some((base + 1, (base | !mask) - 1))
}

/// The addresses of the bridge's subnet `net` (bridge address, prefix length) that a DHCP server
/// leasing `dhcp` (first, last) never hands out: the longest run of host addresses outside
/// `dhcp` and other than the bridge's own, as (first, last). `None` when there is none (lxc-net's
/// default range covers its whole subnet). The lxc backend gives containers static addresses
/// from it, so a static address can never collide with a lease.
pub fn static_pool(net: (Ipv4Addr, u8), dhcp: (Ipv4Addr, Ipv4Addr)) -> Option<(Ipv4Addr, Ipv4Addr)> {
    let (first, last) = hosts(net)?;
    let (d0, d1) = (u32::from(dhcp.0), u32::from(dhcp.1));
    let mut outside = Vec::new();
    if d1 < first || d0 > last {
        outside.push((first, last));
    } else {
        if d0 > first {
            outside.push((first, d0 - 1));
        }
        if d1 < last {
            outside.push((d1 + 1, last));
        }
    }
    // Each run split at the bridge's own address.
    let bridge = u32::from(net.0);
    let mut runs = Vec::new();
    for (a, b) in outside {
        if (a..=b).contains(&bridge) {
            if bridge > a {
                runs.push((a, bridge - 1));
            }
            if bridge < b {
                runs.push((bridge + 1, b));
            }
        } else {
            runs.push((a, b));
        }
    }
    runs.into_iter()
        .max_by_key(|(a, b)| (b - a, std::cmp::Reverse(*a)))
        .map(|(a, b)| (Ipv4Addr::from(a), Ipv4Addr::from(b)))
}

/// The lines proxmox-gitops appends to lxc-net's settings file `text` so that its dnsmasq leases
/// only the lower part of the bridge's subnet `net` (up to about 40 %: 10.0.3.2–10.0.3.99 on
/// lxc-net's default /24) and the rest stays for static addresses. `None` when nothing needs to
/// change: the file sets its own `LXC_DHCP_RANGE` (the user's choice is kept), a static pool
/// exists already, the bridge is not the subnet's first address, or the subnet is smaller than
/// /26.
pub fn dhcp_split(text: Option<&str>, net: (Ipv4Addr, u8)) -> Option<String> {
    if setting(text, "LXC_DHCP_RANGE").is_some() || net.1 > 26 {
        return None;
    }
    let dhcp = lxc_net_dhcp_range(text)?;
    if static_pool(net, dhcp).is_some() {
        return None;
    }
    let (first, last) = hosts(net)?;
    if u32::from(net.0) != first {
        return None;
    }
    let size = last - first + 3;
    let dhcp_last = first - 1 + size * 100 / 256 - 1;
    let (d0, d1) = (Ipv4Addr::from(first + 1), Ipv4Addr::from(dhcp_last));
    let (s0, s1) = (Ipv4Addr::from(dhcp_last + 1), Ipv4Addr::from(last));
    Some(format!(
        "\n# Added by proxmox-gitops (see its docs/lxc.md, \"Addresses\"): lxc-net's dnsmasq leases only\n\
         # {d0}-{d1}; proxmox-gitops gives its containers static addresses from {s0}-{s1},\n\
         # so a static address never collides with a lease. Remove these lines to undo.\n\
         LXC_DHCP_RANGE=\"{d0},{d1}\"\nLXC_DHCP_MAX=\"{}\"\n",
        dhcp_last - first
    ))
}

/// One lease of a dnsmasq leases file (`EXPIRY MAC IP HOSTNAME CLIENT-ID` per line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The leased address.
    pub address: Ipv4Addr,
    /// When it expires, Unix seconds; 0 for an infinite lease.
    pub expires: u64,
    /// The client's MAC address.
    pub hwaddr: String,
}

/// The IPv4 leases of a dnsmasq leases file's `text`; malformed lines are skipped.
pub fn parse_leases(text: &str) -> Vec<Lease> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let expires = f.next()?.parse().ok()?;
            let hwaddr = f.next()?.to_string();
            let address = f.next()?.parse().ok()?;
            Some(Lease { address, expires, hwaddr })
        })
        .collect()
}

/// The leases file lxc-net's dnsmasq keeps for `bridge`
/// (`/var/lib/misc/dnsmasq.<bridge>.leases`, see `--dhcp-leasefile` in lxc-net's script).
pub fn leases_file(bridge: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/var/lib/misc/dnsmasq.{bridge}.leases"))
}

/// Makes room for static addresses on lxc-net's bridge: when lxc-net's DHCP range covers its
/// whole subnet (its default) and its settings file does not set `LXC_DHCP_RANGE` itself,
/// appends [`dhcp_split`]'s lines to [`LXC_NET_SETTINGS`] and restarts lxc-net (the bridge stays,
/// with its attached containers; dnsmasq comes back with the smaller range). Returns true when
/// it changed the file. A bridge lxc-net does not manage is left alone.
///
/// # Errors
/// [`LxcError::Io`] when the settings file cannot be written, [`LxcError::Bridge`] when lxc-net
/// does not come back.
pub async fn reserve_static_range(bridge: &str, net: (Ipv4Addr, u8)) -> Result<bool> {
    let path = Path::new(LXC_NET_SETTINGS);
    if lxc_net_bridge(std::fs::read_to_string(path).ok().as_deref()) != bridge
        || dhcp_split(std::fs::read_to_string(path).ok().as_deref(), net).is_none()
    {
        return Ok(false);
    }
    // Concurrent provisions (threads or processes) change the file once: under a lock, read again.
    let lock_path = Path::new(LXC_NET_RUN_DIR).join("proxmox-gitops-settings.lock");
    let lock = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
        std::fs::create_dir_all(LXC_NET_RUN_DIR)?;
        let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path)?;
        f.lock()?;
        Ok(f)
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|r| r)
    .map_err(|source| LxcError::Io { path: Path::new(LXC_NET_RUN_DIR).join("proxmox-gitops-settings.lock"), source })?;
    let text = std::fs::read_to_string(path).ok();
    let Some(lines) = dhcp_split(text.as_deref(), net) else { return Ok(false) };
    let mut new = text.unwrap_or_default();
    new.push_str(&lines);
    super::write_atomic(path, new.as_bytes(), 0o644)?;
    tracing::warn!(
        "{LXC_NET_SETTINGS}: lxc-net's DHCP range now leaves room for static container addresses \
         (LXC_DHCP_RANGE added); restarting lxc-net"
    );
    let tried = restart_lxc_net().await;
    tracing::debug!("restarted lxc-net: {}", tried.join("; "));
    ensure_bridge(bridge).await?;
    drop(lock);
    Ok(true)
}

/// Restarts lxc-net (`systemctl restart lxc-net`, else its script's `stop` and `start`); returns
/// what was tried and how it ended, one entry per command.
async fn restart_lxc_net() -> Vec<String> {
    let mut tried = Vec::new();
    if Path::new("/run/systemd/system").is_dir() && which("systemctl").is_some() {
        let r = run("systemctl", &os(&["restart", "lxc-net"]), None, QUICK_TIMEOUT).await;
        tried.push(format!("systemctl restart lxc-net: {}", r.err().map_or("ok".to_string(), |e| e.to_string())));
    } else if let Some(script) = lxc_net_script() {
        for verb in ["stop", "start"] {
            let r = run(script, &os(&[verb]), None, QUICK_TIMEOUT).await;
            tried.push(format!("{script} {verb}: {}", r.err().map_or("ok".to_string(), |e| e.to_string())));
        }
    }
    tried
}

/// lxc-net's script, where the distribution installs it.
fn lxc_net_script() -> Option<&'static str> {
    ["/usr/libexec/lxc/lxc-net", "/usr/lib/x86_64-linux-gnu/lxc/lxc-net", "/usr/lib/lxc/lxc-net"]
        .into_iter()
        .find(|s| Path::new(s).is_file())
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
        .rfind(|v| !v.is_empty())
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
    fn dhcp_range_and_static_pool() {
        let net = (Ipv4Addr::new(10, 0, 3, 1), 24);
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(lxc_net_dhcp_range(None), Some(LXC_NET_DEFAULT_DHCP_RANGE));
        assert_eq!(static_pool(net, LXC_NET_DEFAULT_DHCP_RANGE), None, "lxc-net's default leaves nothing");
        let text = "USE_LXC_BRIDGE=\"true\"\nLXC_DHCP_RANGE=\"10.0.3.2,10.0.3.99\" # ours\n";
        assert_eq!(lxc_net_dhcp_range(Some(text)), Some((ip("10.0.3.2"), ip("10.0.3.99"))));
        assert_eq!(static_pool(net, (ip("10.0.3.2"), ip("10.0.3.99"))), Some((ip("10.0.3.100"), ip("10.0.3.254"))));
        // A range in the middle: the longer side wins; the bridge's own address is never in it.
        assert_eq!(static_pool(net, (ip("10.0.3.50"), ip("10.0.3.200"))), Some((ip("10.0.3.201"), ip("10.0.3.254"))));
        assert_eq!(static_pool(net, (ip("10.0.3.60"), ip("10.0.3.230"))), Some((ip("10.0.3.2"), ip("10.0.3.59"))));
        assert_eq!(static_pool(net, (ip("10.0.3.100"), ip("10.0.3.254"))), Some((ip("10.0.3.2"), ip("10.0.3.99"))));
        // A range outside the subnet leaves all of it but the bridge.
        assert_eq!(static_pool(net, (ip("10.9.0.2"), ip("10.9.0.9"))), Some((ip("10.0.3.2"), ip("10.0.3.254"))));
        assert_eq!(lxc_net_dhcp_range(Some("LXC_DHCP_RANGE=nonsense\n")), None);
        assert_eq!(static_pool((ip("10.0.3.1"), 31), LXC_NET_DEFAULT_DHCP_RANGE), None);
    }

    #[test]
    fn the_dhcp_split_is_added_once_and_never_over_the_users_range() {
        let net = (Ipv4Addr::new(10, 0, 3, 1), 24);
        let text = "USE_LXC_BRIDGE=\"true\"\n";
        let lines = dhcp_split(Some(text), net).unwrap();
        assert!(lines.contains("\nLXC_DHCP_RANGE=\"10.0.3.2,10.0.3.99\"\nLXC_DHCP_MAX=\"98\"\n"), "{lines}");
        assert!(lines.contains("static addresses from 10.0.3.100-10.0.3.254"), "{lines}");
        let after = format!("{text}{lines}");
        assert_eq!(lxc_net_dhcp_range(Some(&after)), Some(("10.0.3.2".parse().unwrap(), "10.0.3.99".parse().unwrap())));
        assert_eq!(dhcp_split(Some(&after), net), None, "added once");
        assert_eq!(dhcp_split(Some("LXC_DHCP_RANGE=\"10.0.3.2,10.0.3.254\"\n"), net), None, "the user's choice");
        assert_eq!(dhcp_split(None, (Ipv4Addr::new(10, 0, 3, 1), 28)), None, "too small to split");
        // lxc-net's literal default range does not cover another subnet: nothing to split.
        assert_eq!(dhcp_split(None, (Ipv4Addr::new(10, 1, 0, 1), 16)), None);
    }

    #[test]
    fn leases_are_parsed() {
        let text = "1796157924 00:16:3e:e1:23:a7 10.0.3.160 app ff:3e\n0 00:16:3e:00:00:01 10.0.3.7 * *\nbad line\n";
        assert_eq!(
            parse_leases(text),
            vec![
                Lease {
                    address: "10.0.3.160".parse().unwrap(),
                    expires: 1_796_157_924,
                    hwaddr: "00:16:3e:e1:23:a7".into()
                },
                Lease { address: "10.0.3.7".parse().unwrap(), expires: 0, hwaddr: "00:16:3e:00:00:01".into() },
            ]
        );
        assert_eq!(leases_file("lxcbr0"), std::path::PathBuf::from("/var/lib/misc/dnsmasq.lxcbr0.leases"));
    }

    #[test]
    fn lxc_net_settings_and_defaults() {
        assert_eq!(lxc_net_settings(None), (Ipv4Addr::new(10, 0, 3, 1), 24));
        let text = "USE_LXC_BRIDGE=\"true\"\nLXC_ADDR=\"10.1.0.1\"\nLXC_NETMASK='255.255.0.0'\n# LXC_ADDR=1.2.3.4\n";
        assert_eq!(lxc_net_settings(Some(text)), (Ipv4Addr::new(10, 1, 0, 1), 16));
    }
}
