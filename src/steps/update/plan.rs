//! The pure half of `update`: which package manager a container has and the commands that
//! upgrade it, the snapshot's name, which older update snapshots go, and whether a container is
//! updated at all given its health before. Every function here is plain data in, plain data
//! out, unit-tested below.

use time::OffsetDateTime;

use crate::live::{ContainerHealth, HealthState};
use crate::snapshot::ct::CtSnapshotInfo;
use crate::snapshot::store::Stamp;

/// Prefix of the container snapshots `update` takes (`pgo-update-YYYYMMDD-HHMMSS[-N]`, UTC).
/// The `snapshot` step's retention (`pgo-YYYYMMDD-…`) never matches these, and `update` only
/// ever deletes these.
pub const PREFIX: &str = "pgo-update-";

/// Where a distribution says that a reboot is due after an upgrade (Debian/Ubuntu's
/// `update-notifier-common` convention, written by package maintainer scripts).
pub const REBOOT_REQUIRED: &str = "/var/run/reboot-required";

/// How a container's packages are upgraded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PackageManager {
    /// Debian, Ubuntu and their derivatives: `apt-get`.
    Apt,
    /// Alpine: `apk`.
    Apk,
}

/// The distribution `/etc/os-release` describes (`os-release(5)`): its package manager and a
/// name for reports (`PRETTY_NAME`, else `ID VERSION_ID`).
///
/// # Errors
/// A distribution that is neither Debian/Ubuntu-like (`ID` or `ID_LIKE` naming `debian` or
/// `ubuntu`) nor Alpine: the message names it and says nothing was changed.
pub fn package_manager(os_release: &str) -> Result<(PackageManager, String), String> {
    let field = |key: &str| {
        os_release.lines().find_map(|l| {
            let (k, v) = l.trim().split_once('=')?;
            (k == key).then(|| v.trim().trim_matches(['"', '\'']).to_string())
        })
    };
    let id = field("ID").unwrap_or_default().to_ascii_lowercase();
    let like = field("ID_LIKE").unwrap_or_default().to_ascii_lowercase();
    let name = field("PRETTY_NAME").filter(|p| !p.is_empty()).unwrap_or_else(|| {
        let v = field("VERSION_ID").unwrap_or_default();
        let n = if id.is_empty() { "an unknown distribution".to_string() } else { id.clone() };
        if v.is_empty() { n } else { format!("{n} {v}") }
    });
    let family = std::iter::once(id.as_str()).chain(like.split_whitespace()).collect::<Vec<_>>();
    if family.iter().any(|f| *f == "debian" || *f == "ubuntu") {
        Ok((PackageManager::Apt, name))
    } else if id == "alpine" {
        Ok((PackageManager::Apk, name))
    } else {
        Err(format!(
            "{name} has no package manager this tool upgrades (Debian/Ubuntu with apt-get, Alpine with apk); \
             nothing was changed"
        ))
    }
}

/// The commands of a full non-interactive upgrade, run in order (each must exit 0):
///
/// * apt — `apt-get update`, then `apt-get -y dist-upgrade` keeping changed configuration files
///   (`--force-confdef`, `--force-confold`), both with `DEBIAN_FRONTEND=noninteractive`, `-q`,
///   and `DPkg::Lock::Timeout=120` (wait for a running `unattended-upgrades` instead of
///   failing at once);
/// * apk — `apk update`, then `apk upgrade --available`.
pub fn upgrade_commands(pm: PackageManager) -> Vec<Vec<&'static str>> {
    const APT: [&str; 6] = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "-o", "DPkg::Lock::Timeout=120"];
    match pm {
        PackageManager::Apt => vec![
            [&APT[..], &["update"]].concat(),
            [
                &APT[..],
                &[
                    "-y",
                    "-o",
                    "Dpkg::Options::=--force-confdef",
                    "-o",
                    "Dpkg::Options::=--force-confold",
                    "dist-upgrade",
                ],
            ]
            .concat(),
        ],
        PackageManager::Apk => vec![vec!["apk", "update"], vec!["apk", "upgrade", "--available"]],
    }
}

/// The stamp of a snapshot `update` took, `None` for every other name.
pub fn parse_name(name: &str) -> Option<Stamp> {
    name.strip_prefix(PREFIX).and_then(Stamp::parse)
}

/// The name of the snapshot taken at `now`: `pgo-update-YYYYMMDD-HHMMSS` (UTC), with `-2`, `-3`
/// … when `existing` has that name already (26–29 characters: a valid PVE `snapname`).
pub fn snapshot_name(now: OffsetDateTime, existing: &[CtSnapshotInfo]) -> String {
    let mut stamp = Stamp::at(now);
    while existing.iter().any(|s| s.name == format!("{PREFIX}{stamp}")) {
        stamp = stamp.next();
    }
    format!("{PREFIX}{stamp}")
}

/// The update snapshots to delete after a successful update to `kept`: every other snapshot
/// named by `update` ([`parse_name`]), oldest first. Snapshots with other names are never
/// listed.
pub fn to_prune(existing: &[CtSnapshotInfo], kept: &str) -> Vec<String> {
    let mut ours: Vec<(Stamp, String)> = existing
        .iter()
        .filter(|s| s.name != kept)
        .filter_map(|s| parse_name(&s.name).map(|st| (st, s.name.clone())))
        .collect();
    ours.sort();
    ours.into_iter().map(|(_, n)| n).collect()
}

/// Why `spec` is not updated when the run itself is inside it (its hostname is `this_host`, the
/// machine's own): a snapshot of an LXC container stops it, a reboot or rollback restarts it —
/// any of them would end the run half-way (the usual case: the runner lives in the control plane
/// container). `None` otherwise.
pub fn runs_inside(spec: &crate::inventory::ContainerSpec, this_host: Option<&str>) -> Option<String> {
    let host = this_host?.trim();
    (!host.is_empty() && host.eq_ignore_ascii_case(&spec.hostname)).then(|| {
        format!(
            "this run is inside it (this machine's hostname is `{host}`): its snapshot, reboot or rollback would end \
             the run; update it from another machine"
        )
    })
}

/// Whether a container is updated, from its health before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Healthy: update it.
    Update,
    /// Not deployed: nothing to do (reported, not a failure).
    NotDeployed,
    /// Stopped: not started for an update (reported, not a failure).
    Skip(String),
    /// Anything else: not updated, a failure; the reason.
    Refuse(String),
}

/// Decides from the health check before the update: only a healthy container is updated — the
/// automatic rollback needs a health check that passed before, or every failure after the
/// upgrade would look like the upgrade's fault (and a container that is already down would be
/// rolled back for nothing).
pub fn start(before: &ContainerHealth) -> Start {
    let detail = before.detail.clone().unwrap_or_default();
    match before.state {
        HealthState::Healthy => Start::Update,
        HealthState::NotDeployed => Start::NotDeployed,
        HealthState::Stopped => Start::Skip(format!("{detail}: not updated (start it to have it updated)")),
        HealthState::Foreign => Start::Refuse(format!("not updated: {detail}")),
        state => Start::Refuse(format!(
            "not updated: it is {state} before the update ({detail}); the automatic rollback needs a healthy \
             container to start from — fix it first (`proxmox-gitops health --container {}`)",
            before.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn info(name: &str) -> CtSnapshotInfo {
        CtSnapshotInfo { name: name.into(), description: String::new(), snaptime: None }
    }

    #[test]
    fn package_managers_from_os_release() {
        let debian =
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n";
        assert_eq!(package_manager(debian).unwrap(), (PackageManager::Apt, "Debian GNU/Linux 12 (bookworm)".into()));
        let ubuntu = "NAME=\"Ubuntu\"\nID=ubuntu\nID_LIKE=debian\nPRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\n";
        assert_eq!(package_manager(ubuntu).unwrap().0, PackageManager::Apt);
        let mint = "ID=linuxmint\nID_LIKE=\"ubuntu debian\"\nVERSION_ID=22\n";
        assert_eq!(package_manager(mint).unwrap(), (PackageManager::Apt, "linuxmint 22".into()));
        let alpine = "NAME=\"Alpine Linux\"\nID=alpine\nVERSION_ID=3.20.3\nPRETTY_NAME=\"Alpine Linux v3.20\"\n";
        assert_eq!(package_manager(alpine).unwrap(), (PackageManager::Apk, "Alpine Linux v3.20".into()));
        let fedora = "NAME=\"Fedora Linux\"\nID=fedora\nVERSION_ID=40\nPRETTY_NAME=\"Fedora Linux 40\"\n";
        assert_eq!(
            package_manager(fedora).unwrap_err(),
            "Fedora Linux 40 has no package manager this tool upgrades (Debian/Ubuntu with apt-get, Alpine with apk); \
             nothing was changed"
        );
        assert!(package_manager("").unwrap_err().starts_with("an unknown distribution has no package manager"));
    }

    #[test]
    fn upgrade_commands_are_noninteractive_and_keep_config() {
        let apt = upgrade_commands(PackageManager::Apt);
        assert_eq!(apt.len(), 2);
        assert_eq!(
            apt[0],
            ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "-o", "DPkg::Lock::Timeout=120", "update"]
        );
        assert_eq!(
            apt[1].join(" "),
            "env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=120 -y -o \
             Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold dist-upgrade"
        );
        assert_eq!(
            upgrade_commands(PackageManager::Apk),
            vec![vec!["apk", "update"], vec!["apk", "upgrade", "--available"]]
        );
    }

    #[test]
    fn names_and_pruning() {
        let now = datetime!(2026-12-01 17:00:05 UTC);
        assert_eq!(snapshot_name(now, &[]), "pgo-update-20261201-170005");
        assert_eq!(snapshot_name(now, &[info("pgo-update-20261201-170005")]), "pgo-update-20261201-170005-2");
        assert!(snapshot_name(now, &[]).len() <= 40);
        let existing = [
            info("pgo-update-20261201-170005"),
            info("pgo-20250101-000000"),
            info("pgo-update-20261124-170000"),
            info("before-upgrade"),
            info("pgo-update-20261117-170000-2"),
            info("pgo-update-manual"),
            info("pgo-update-20261117-170000"),
        ];
        assert_eq!(
            to_prune(&existing, "pgo-update-20261201-170005"),
            vec!["pgo-update-20261117-170000", "pgo-update-20261117-170000-2", "pgo-update-20261124-170000"]
        );
        assert_eq!(parse_name("pgo-20250101-000000"), None);
        // The snapshot step's retention never takes ours either.
        assert_eq!(crate::snapshot::ct::parse_name("pgo-update-20261201-170005"), None);
    }

    #[test]
    fn the_container_the_run_is_in_is_skipped() {
        let spec = crate::inventory::ContainerSpec::new("config", 100, crate::inventory::IpConfig::Dhcp);
        assert_eq!(runs_inside(&spec, None), None);
        assert_eq!(runs_inside(&spec, Some("runner-host")), None);
        assert_eq!(runs_inside(&spec, Some("")), None);
        assert!(runs_inside(&spec, Some("config\n")).unwrap().starts_with("this run is inside it"));
    }

    #[test]
    fn only_healthy_containers_are_updated() {
        let h = |state, detail: Option<&str>| ContainerHealth {
            name: "broker".into(),
            hostname: "broker".into(),
            vmid: 120,
            state,
            system: None,
            services: vec![],
            failed_units: None,
            detail: detail.map(str::to_string),
            duration_ms: 0,
        };
        assert_eq!(start(&h(HealthState::Healthy, None)), Start::Update);
        assert_eq!(start(&h(HealthState::NotDeployed, None)), Start::NotDeployed);
        assert_eq!(
            start(&h(HealthState::Stopped, Some("container is stopped"))),
            Start::Skip("container is stopped: not updated (start it to have it updated)".into())
        );
        assert_eq!(
            start(&h(HealthState::Down, Some("mosquitto inactive"))),
            Start::Refuse(
                "not updated: it is down before the update (mosquitto inactive); the automatic rollback needs a \
                 healthy container to start from — fix it first (`proxmox-gitops health --container broker`)"
                    .into()
            )
        );
        assert_eq!(
            start(&h(HealthState::Foreign, Some("CT 120 holds hostname `x`"))),
            Start::Refuse("not updated: CT 120 holds hostname `x`".into())
        );
    }
}
