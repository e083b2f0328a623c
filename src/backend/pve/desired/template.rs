//! Where a missing container template comes from (pure): the node's appliance index.
//!
//! PVE keeps the index of the template channels it trusts (Proxmox's
//! `download.proxmox.com/images/aplinfo.dat`, TurnKey Linux's), verified against their signing
//! keys by `pveam update` (pve-manager `PVE/APLInfo.pm`), and serves it as
//! `GET /nodes/{node}/aplinfo`: one object per template with `template` (the file name, e.g.
//! `debian-13-standard_13.1-2_amd64.tar.zst`), `location` (its URL), `architecture`, `sha512sum`
//! (and `md5sum` in older records). The download then goes through
//! `POST /nodes/{node}/storage/{storage}/download-url` over https with the index's checksum in
//! `checksum`/`checksum-algorithm`, so PVE refuses a file that does not match the signed index.
//! No index entry means no download: an unverified file is never fetched.

use serde_json::Value;

/// A template download: the `download-url` parameters besides `content` and `filename`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSource {
    /// `https://…/FILE` (the index's `location`, `http://` upgraded to `https://`).
    pub url: String,
    /// The expected digest, lowercase hex.
    pub checksum: String,
    /// `sha512` (or `md5` for an index record that has no `sha512sum`), as `download-url`'s
    /// `checksum-algorithm` spells it.
    pub algorithm: &'static str,
}

/// Why no download can be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoSource {
    /// The index does not list `file` for `arch`; `others` are the architectures it lists the
    /// same template for (empty when it does not know the template at all).
    #[error("{}", no_template_message(.file, .arch, .node, .others))]
    Missing {
        /// `TEMPLATE_ARCH.tar.zst`.
        file: String,
        /// The node's architecture (`arm64` …).
        arch: String,
        /// The node.
        node: String,
        /// Architectures the index has this template for.
        others: Vec<String>,
    },
    /// The index lists the template without a checksum this tool can pass on.
    #[error(
        "the template index of node {node} (GET /nodes/{node}/aplinfo) lists {file} without a sha512sum or md5sum, \
         so its download cannot be verified; put the file on the template storage yourself (PVE UI: Storage → CT \
         Templates → Upload)"
    )]
    NoChecksum {
        /// `TEMPLATE_ARCH.tar.zst`.
        file: String,
        /// The node.
        node: String,
    },
}

fn no_template_message(file: &str, arch: &str, node: &str, others: &[String]) -> String {
    let template = file.strip_suffix(&format!("_{arch}.tar.zst")).unwrap_or(file);
    let listed = if others.is_empty() {
        format!(
            "its template index (GET /nodes/{node}/aplinfo) does not know `{template}` at all ({}, then \
             `pveam available --section system` to see the templates)",
            crate::error::Hint::on_node(["pveam", "update"], node)
        )
    } else {
        format!("its template index (GET /nodes/{node}/aplinfo) has `{template}` only for {}", others.join(", "))
    };
    format!(
        "no {arch} template {file} for node {node} ({arch}): it is not on the template storage and {listed}; \
         Proxmox publishes its templates for amd64 only. Put an {arch} build named {file} on the template storage \
         (PVE UI: Storage → CT Templates → Upload), or set PROXMOX_TEMPLATE to a template that exists for {arch}"
    )
}

/// `http://host/…` → `https://host/…`; other URLs as they are.
fn https(url: &str) -> String {
    match url.strip_prefix("http://") {
        Some(rest) => format!("https://{rest}"),
        None => url.to_string(),
    }
}

/// Picks the download of `file` (`TEMPLATE_ARCH.tar.zst`) for a node of architecture `arch`
/// from the node's appliance index `aplinfo` (the array `GET /nodes/{node}/aplinfo` answers).
///
/// # Errors
/// [`NoSource::Missing`] naming the architecture (and the ones the index has) when the index
/// does not list `file`; [`NoSource::NoChecksum`] when its record has no usable checksum.
pub fn template_source(aplinfo: &Value, file: &str, arch: &str, node: &str) -> Result<TemplateSource, NoSource> {
    let entries: Vec<&Value> = aplinfo.as_array().into_iter().flatten().collect();
    let name = |e: &Value| e.get("template").and_then(Value::as_str).map(str::to_string);
    let Some(entry) = entries.iter().find(|e| name(e).as_deref() == Some(file)) else {
        let template = file.strip_suffix(&format!("_{arch}.tar.zst")).unwrap_or(file);
        let mut others: Vec<String> = entries
            .iter()
            .filter_map(|e| name(e))
            .filter_map(|n| {
                n.strip_prefix(&format!("{template}_")).and_then(|r| r.split('.').next()).map(str::to_string)
            })
            .collect();
        others.sort();
        others.dedup();
        return Err(NoSource::Missing { file: file.into(), arch: arch.into(), node: node.into(), others });
    };
    let location = entry.get("location").and_then(Value::as_str).filter(|l| !l.is_empty());
    let url = https(location.unwrap_or(""));
    let hex = |k: &str| {
        entry
            .get(k)
            .and_then(Value::as_str)
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let (checksum, algorithm) = match (hex("sha512sum"), hex("md5sum")) {
        (Some(s), _) => (s, "sha512"),
        (None, Some(m)) => (m, "md5"),
        (None, None) => return Err(NoSource::NoChecksum { file: file.into(), node: node.into() }),
    };
    if location.is_none() {
        return Err(NoSource::Missing { file: file.into(), arch: arch.into(), node: node.into(), others: vec![] });
    }
    Ok(TemplateSource { url, checksum, algorithm })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FILE: &str = "debian-13-standard_13.1-2_amd64.tar.zst";

    fn index() -> Value {
        json!([
            {"template": FILE, "architecture": "amd64", "os": "debian-13", "package": "debian-13-standard",
             "location": format!("http://download.proxmox.com/images/system/{FILE}"),
             "sha512sum": "AB12cd", "md5sum": "ffff", "type": "lxc", "section": "system"},
            {"template": "alpine-3.22-default_20250617_amd64.tar.xz", "architecture": "amd64",
             "location": "http://download.proxmox.com/images/system/alpine-3.22-default_20250617_amd64.tar.xz",
             "md5sum": "0a1b"},
            {"template": "debian-12-turnkey-core_18.0-1_amd64.tar.gz",
             "location": "https://releases.turnkeylinux.org/pve/debian-12-turnkey-core_18.0-1_amd64.tar.gz"}
        ])
    }

    #[test]
    fn the_index_gives_an_https_url_and_its_sha512() {
        assert_eq!(
            template_source(&index(), FILE, "amd64", "pve1"),
            Ok(TemplateSource {
                url: format!("https://download.proxmox.com/images/system/{FILE}"),
                checksum: "ab12cd".into(),
                algorithm: "sha512",
            })
        );
        let alpine = template_source(&index(), "alpine-3.22-default_20250617_amd64.tar.xz", "amd64", "pve1");
        assert_eq!(alpine.map(|s| (s.checksum, s.algorithm)), Ok(("0a1b".to_string(), "md5")));
    }

    #[test]
    fn no_template_for_the_arch_names_it_and_what_exists() {
        let arm = "debian-13-standard_13.1-2_arm64.tar.zst";
        let e = template_source(&index(), arm, "arm64", "pi1").unwrap_err();
        assert_eq!(
            e,
            NoSource::Missing {
                file: arm.into(),
                arch: "arm64".into(),
                node: "pi1".into(),
                others: vec!["amd64".into()]
            }
        );
        assert_eq!(
            e.to_string(),
            "no arm64 template debian-13-standard_13.1-2_arm64.tar.zst for node pi1 (arm64): it is not on the template \
             storage and its template index (GET /nodes/pi1/aplinfo) has `debian-13-standard_13.1-2` only for amd64; \
             Proxmox publishes its templates for amd64 only. Put an arm64 build named \
             debian-13-standard_13.1-2_arm64.tar.zst on the template storage (PVE UI: Storage → CT Templates → \
             Upload), or set PROXMOX_TEMPLATE to a template that exists for arm64"
        );
        let e = template_source(&json!([]), FILE, "amd64", "pve1").unwrap_err();
        assert!(e.to_string().contains("does not know `debian-13-standard_13.1-2` at all (run `pveam update`"), "{e}");
    }

    #[test]
    fn a_record_without_checksum_is_not_downloaded() {
        let e = template_source(&index(), "debian-12-turnkey-core_18.0-1_amd64.tar.gz", "amd64", "pve1").unwrap_err();
        assert!(matches!(e, NoSource::NoChecksum { .. }), "{e:?}");
    }
}
