//! Cross-checks within one stage: a vmid, a static IP address or a hostname used by two
//! containers is a problem naming both files (and lines, when the layered env is at hand).
//!
//! Separate from [`super::spec`] (one container's validation) because it needs every container
//! of the stage; `resolve` runs it after building each spec.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use super::ContainerSpec;
use super::dotenv::Entry;
use super::spec::{hostname, loc, parse_ip, pve_bounds};
use crate::error::{Location, Problems};

/// Cross-checks within one stage: duplicate vmid, static address or hostname → a problem naming
/// both files.
///
/// Problems point at each container's first env file (its `sources`); when the layered env is
/// at hand, [`cross_check_identities`] names the exact file and line the value came from.
pub fn cross_check(specs: &[ContainerSpec], problems: &mut Problems) {
    let main_file =
        |s: &ContainerSpec| -> PathBuf { s.sources.first().cloned().unwrap_or_else(|| s.dir.join("container.env")) };
    let located: Vec<(&str, Option<Located>, Option<Located>, Located)> = specs
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                Some((s.vmid.to_string(), Location::file(main_file(s)).with_key("ID"))),
                s.ip.address().map(|a| (a.to_string(), Location::file(main_file(s)).with_key("IP"))),
                (s.hostname.to_ascii_lowercase(), Location::file(&s.dir).with_key("hostname")),
            )
        })
        .collect();
    check_duplicates(&located, problems);
}

/// What identifies a container within a stage, read leniently from its layered env so that
/// duplicates are found even when other keys of the same container are invalid.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Lib name (or `config`).
    pub name: String,
    /// The lib directory relative to the root (`.` for the control plane).
    pub dir: PathBuf,
    /// The hostname for the stage.
    pub hostname: String,
    /// The vmid when `ID` is valid, with where it was set.
    pub vmid: Option<(u32, Location)>,
    /// The static address when `IP` is a valid static address, with where it was set.
    pub ip: Option<(Ipv4Addr, Location)>,
}

impl Identity {
    /// Reads the identity of container `name` on `stage` from its layered env.
    pub fn from_env(name: &str, stage: &str, dir: PathBuf, env: &BTreeMap<String, Entry>) -> Identity {
        let vmid = env.get("ID").and_then(|e| {
            let v = e.value.trim();
            (v.bytes().all(|b| b.is_ascii_digit()))
                .then(|| v.parse::<u32>().ok())
                .flatten()
                .filter(|v| (pve_bounds::VMID.0..=pve_bounds::VMID.1).contains(&(*v as u64)))
                .map(|v| (v, loc(e)))
        });
        let ip = env.get("IP").and_then(|e| parse_ip(&e.value).ok()?.address().map(|a| (a, loc(e))));
        Identity { name: name.to_string(), dir, hostname: hostname(name, stage), vmid, ip }
    }
}

/// Cross-checks identities (see [`Identity`]): a duplicate vmid, static address or hostname is a
/// problem at the later container's value naming the earlier one's file and line, e.g.
/// `libs/b/container.stage.env:2 (IP): duplicate IP address 10.0.0.5: also used by `a`
/// (libs/a/container.env:1)`.
pub fn cross_check_identities(ids: &[Identity], problems: &mut Problems) {
    let located: Vec<(&str, Option<Located>, Option<Located>, Located)> = ids
        .iter()
        .map(|i| {
            (
                i.name.as_str(),
                i.vmid.as_ref().map(|(v, l)| (v.to_string(), l.clone())),
                i.ip.as_ref().map(|(a, l)| (a.to_string(), l.clone())),
                (i.hostname.to_ascii_lowercase(), Location::file(&i.dir).with_key("hostname")),
            )
        })
        .collect();
    check_duplicates(&located, problems);
}

type Located = (String, Location);

fn check_duplicates(items: &[(&str, Option<Located>, Option<Located>, Located)], problems: &mut Problems) {
    fn place(l: &Location) -> String {
        match l.line {
            Some(line) => format!("{}:{line}", l.file.display()),
            None => l.file.display().to_string(),
        }
    }
    for (what, field) in [("vmid", 0), ("IP address", 1), ("hostname", 2)] {
        let pick = |i: usize| -> Option<&Located> {
            let item = &items[i];
            match field {
                0 => item.1.as_ref(),
                1 => item.2.as_ref(),
                _ => Some(&item.3),
            }
        };
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for i in 0..items.len() {
            let Some((v, at)) = pick(i) else { continue };
            if let Some(&first) = seen.get(v.as_str()) {
                let first_at = &pick(first).expect("seen").1;
                problems.add(
                    at.clone(),
                    format!("duplicate {what} {v}: also used by `{}` ({})", items[first].0, place(first_at)),
                );
            } else {
                seen.insert(v, i);
            }
        }
    }
}
