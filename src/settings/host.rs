//! Reading `PROXMOX_HOST` (or `proxmox.host`): a host name or address, or the URL a user copies
//! from the browser's address bar (`https://pve.example:8006`).
//!
//! The URL form is accepted with scheme `https` only (the PVE API is served over TLS), an
//! optional port, and no path other than `/`, query, fragment or credentials. Anything else is
//! refused with the forms we accept, instead of being read as an IPv6 address later and failing
//! with "invalid IPv6 address".

use std::net::{Ipv4Addr, Ipv6Addr};

/// The forms accepted, for messages.
pub(super) const FORMS: &str = "a host name, an IPv4 address, an IPv6 address (in brackets) or an https URL, e.g. \
                                `pve.example`, `10.0.0.2`, `[fd00::2]`, `https://pve.example:8006`";

/// A host as given in the settings: the host to connect to (a name, an IPv4 address, or an IPv6
/// address with or without brackets) and the port when the value is a URL with one.
///
/// # Errors
/// Why `raw` is not one of the [`FORMS`], as a sentence that quotes `raw` only when it is plain
/// printable ASCII without `@` (a pasted URL may carry credentials).
pub(super) fn parse(raw: &str) -> Result<(String, Option<u16>), String> {
    parse_inner(raw).map_err(|why| {
        let shown = if raw.bytes().all(|b| b.is_ascii_graphic() && b != b'@') {
            format!("`{raw}` is not a PVE host")
        } else {
            "the value is not a PVE host".to_string()
        };
        format!("{shown}: {why}; expected {FORMS}")
    })
}

fn parse_inner(raw: &str) -> Result<(String, Option<u16>), String> {
    let Some((scheme, rest)) = raw.split_once("://") else {
        // Without a scheme: a bare IPv6 address is taken as it always was.
        if raw.parse::<Ipv6Addr>().is_ok() {
            return Ok((raw.to_string(), None));
        }
        let (host, port) = host_port(raw)?;
        if port.is_some() {
            return Err("a port needs the URL form (`https://HOST:PORT`) or PROXMOX_PORT (proxmox.port)".into());
        }
        return Ok((host, None));
    };
    if !scheme.eq_ignore_ascii_case("https") {
        return Err(if scheme.bytes().all(|b| b.is_ascii_alphanumeric()) {
            format!("the scheme `{scheme}` is not supported: the PVE API is served over https only")
        } else {
            "only the scheme `https` is supported".into()
        });
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if !(tail.is_empty() || tail == "/") {
        return Err("a URL path, query or fragment is not supported (give `https://HOST[:PORT]`)".into());
    }
    if authority.contains('@') {
        return Err(
            "credentials in the URL are not supported (set PROXMOX_USER or proxmox.user, and a password or token)"
                .into(),
        );
    }
    host_port(authority)
}

/// Splits `HOST[:PORT]` (`[IPv6][:PORT]` for IPv6) and checks both parts.
fn host_port(s: &str) -> Result<(String, Option<u16>), String> {
    let (host, port) = if let Some(inner) = s.strip_prefix('[') {
        let (addr, after) = inner.split_once(']').ok_or("an IPv6 address in brackets needs its `]`")?;
        addr.parse::<Ipv6Addr>().map_err(|_| "the address in brackets is not an IPv6 address".to_string())?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("only `:PORT` may follow `]`")?),
        };
        (format!("[{addr}]"), port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (s.to_string(), None),
        }
    };
    if !host.is_empty() && host.bytes().all(|b| b.is_ascii_digit() || b == b'.') && host.parse::<Ipv4Addr>().is_err() {
        // `192.168.178.`, as the original project's local/config.json ships it.
        return Err(
            "it looks like a placeholder to complete: an IPv4 address has four numbers (e.g. `192.168.178.10`)".into(),
        );
    }
    if !host.starts_with('[') && host.parse::<Ipv4Addr>().is_err() && !is_host_name(&host) {
        return Err("the host is not a host name or an address".into());
    }
    let port = match port {
        None => None,
        Some(p) => Some(
            Some(p)
                .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u16>().ok())
                .filter(|p| *p > 0)
                .ok_or("the port must be a number 1–65535")?,
        ),
    };
    Ok((host, port))
}

/// A DNS host name: dot-separated labels of letters, digits, `-` (and `_`, which resolvers
/// accept in practice), none empty, none starting or ending with `-`, at most 253 characters.
fn is_host_name(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        let ok = |s: &str| parse(s).unwrap();
        assert_eq!(ok("pve.example"), ("pve.example".into(), None));
        assert_eq!(ok("10.0.0.2"), ("10.0.0.2".into(), None));
        assert_eq!(ok("[fd00::2]"), ("[fd00::2]".into(), None));
        assert_eq!(ok("fd00::2"), ("fd00::2".into(), None));
        assert_eq!(ok("https://pve.example:8006"), ("pve.example".into(), Some(8006)));
        assert_eq!(ok("https://pve.example:8006/"), ("pve.example".into(), Some(8006)));
        assert_eq!(ok("HTTPS://10.0.0.2"), ("10.0.0.2".into(), None));
        assert_eq!(ok("https://[fd00::2]:443"), ("[fd00::2]".into(), Some(443)));
    }

    #[test]
    fn refused_forms() {
        let err = |s: &str| parse(s).unwrap_err();
        let tail = format!("; expected {FORMS}");
        for placeholder in ["192.168.178.", "192.168.178", "10..0.1", "https://192.168.178.:8006"] {
            assert_eq!(
                err(placeholder),
                format!(
                    "`{placeholder}` is not a PVE host: it looks like a placeholder to complete: an IPv4 address has \
                     four numbers (e.g. `192.168.178.10`){tail}"
                )
            );
        }
        assert_eq!(
            err("http://pve.example:8006"),
            format!(
                "`http://pve.example:8006` is not a PVE host: the scheme `http` is not supported: the PVE API is \
                 served over https only{tail}"
            )
        );
        assert_eq!(
            err("https://pve.example:8006/#v1:0:18:4:::::::"),
            format!(
                "`https://pve.example:8006/#v1:0:18:4:::::::` is not a PVE host: a URL path, query or fragment is not \
                 supported (give `https://HOST[:PORT]`){tail}"
            )
        );
        assert_eq!(
            err("https://root:hunter2@pve.example"),
            format!(
                "the value is not a PVE host: credentials in the URL are not supported (set PROXMOX_USER or \
                 proxmox.user, and a password or token){tail}"
            )
        );
        assert_eq!(
            err("pve.example:8006"),
            format!(
                "`pve.example:8006` is not a PVE host: a port needs the URL form (`https://HOST:PORT`) or \
                 PROXMOX_PORT (proxmox.port){tail}"
            )
        );
        assert_eq!(
            err("https://pve.example:0"),
            format!("`https://pve.example:0` is not a PVE host: the port must be a number 1–65535{tail}")
        );
        assert_eq!(
            err("https://pve.example:+80"),
            format!("`https://pve.example:+80` is not a PVE host: the port must be a number 1–65535{tail}")
        );
        assert_eq!(
            err("pve example"),
            format!("the value is not a PVE host: the host is not a host name or an address{tail}")
        );
        assert_eq!(
            err("https://[fd00::2"),
            format!("`https://[fd00::2` is not a PVE host: an IPv6 address in brackets needs its `]`{tail}")
        );
        assert_eq!(err("-pve"), format!("`-pve` is not a PVE host: the host is not a host name or an address{tail}"));
    }
}
