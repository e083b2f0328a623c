//! URLs the user gives us (submodule URLs in `.gitmodules`, the Gitea and PVE hosts of the
//! settings) with their credentials kept out of everything we record or print.
//!
//! People paste URLs from their forge, and those often carry credentials:
//! `https://user:password@host/x.git`, or a token as the user part, `https://TOKEN@host/x.git`.
//! Git never needs a submodule's original URL from us (`rewrite` takes the content from the
//! checkout and replaces the URL by the Gitea one), so the raw text is kept only inside a
//! [`RemoteUrl`] and handed out only through [`RemoteUrl::expose`].
//!
//! # The redacted form
//!
//! The whole userinfo is replaced by `***`: `https://user:pw@host/x.git` and
//! `https://TOKEN@host/x.git` both become `https://***@host/x.git`. One exception keeps the
//! output of ordinary URLs unchanged: a bare user name (no `:password`) of an SSH URL
//! (`ssh://git@host/x.git`, `git+ssh://…`, and git's scp-like `git@host:x.git`) is the login
//! account, not a secret, and is shown as written. A URL without userinfo (and a relative or
//! local path) is returned unchanged, byte for byte.
//!
//! The userinfo ends at the last `@` of the authority (the text after `scheme://` up to the
//! first `/`, `?` or `#`), as git and RFC 3986 read it.
//!
//! # Masking
//!
//! Building a [`RemoteUrl`] (or calling [`mask_userinfo`]) registers each redacted part (the user
//! and the password, as written and percent-decoded) with [`crate::actions::mask`], so the
//! runner hides them in the job log and [`crate::actions::redact`] scrubs them from tool output
//! and error text. Parts shorter than [`MIN_MASKED`] characters are not registered: masking
//! `me` would blank every `me` in the log, and such a part is not a token.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What replaces a URL's userinfo in the redacted form.
pub const REDACTED: &str = "***";

/// Userinfo parts shorter than this are redacted but not registered with
/// [`crate::actions::mask`] (see the module docs).
pub const MIN_MASKED: usize = 4;

/// A URL as the user wrote it, whose credentials never leave it by accident.
///
/// [`Display`](fmt::Display), [`Debug`] and [`Serialize`] give the redacted form (see the module
/// docs); [`expose`](Self::expose) gives the raw text, for the one place that must hand it to
/// git. Deserializing takes the text as it is (an artifact holds the redacted form already).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RemoteUrl(String);

impl RemoteUrl {
    /// Wraps `raw` and registers its credentials with [`crate::actions::mask`].
    pub fn new(raw: impl Into<String>) -> Self {
        let raw = raw.into();
        mask_userinfo(&raw);
        RemoteUrl(raw)
    }

    /// The URL exactly as written, credentials included. Only for handing it to git; never
    /// print or record the result.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The redacted form (see the module docs).
    pub fn redacted(&self) -> Cow<'_, str> {
        redact(&self.0)
    }

    /// True when the URL carries userinfo that is redacted.
    pub fn has_credentials(&self) -> bool {
        secret_userinfo(&self.0).is_some()
    }
}

impl fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RemoteUrl({:?})", self.redacted())
    }
}

impl Serialize for RemoteUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for RemoteUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(RemoteUrl::new)
    }
}

/// The byte range of the userinfo of `url` (without the `@`), and whether the URL is an SSH one
/// (scheme `ssh`, `git+ssh`, `ssh+git`, or git's scp-like `user@host:path`).
fn userinfo(url: &str) -> Option<(std::ops::Range<usize>, bool)> {
    if let Some(sep) = url.find("://") {
        let scheme = &url[..sep];
        let start = sep + 3;
        let rest = &url[start..];
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let at = rest[..end].rfind('@')?;
        let ssh = matches!(scheme.to_ascii_lowercase().as_str(), "ssh" | "git+ssh" | "ssh+git");
        return Some((start..start + at, ssh));
    }
    // git's scp-like syntax: `[user@]host:path`, recognised (as git does) by a `:` before the
    // first `/`.
    let first_slash = url.find('/').unwrap_or(url.len());
    let colon = url[..first_slash].rfind(':')?;
    let at = url[..colon].rfind('@')?;
    Some((0..at, true))
}

/// The userinfo of `url` when it is redacted: everything except a bare SSH user name.
fn secret_userinfo(url: &str) -> Option<std::ops::Range<usize>> {
    let (range, ssh) = userinfo(url)?;
    let info = &url[range.clone()];
    (!ssh || info.contains(':')).then_some(range)
}

/// `url` with its userinfo replaced by [`REDACTED`] (see the module docs); unchanged (borrowed)
/// when it has none to redact. Works on any text git accepts as a URL, not only valid URLs.
pub fn redact(url: &str) -> Cow<'_, str> {
    match secret_userinfo(url) {
        Some(r) => Cow::Owned(format!("{}{REDACTED}{}", &url[..r.start], &url[r.end..])),
        None => Cow::Borrowed(url),
    }
}

/// Registers the redacted userinfo parts of `url` (user and password, each as written and
/// percent-decoded) with [`crate::actions::mask`]; parts shorter than [`MIN_MASKED`] and the
/// [`REDACTED`] placeholder itself are skipped.
pub fn mask_userinfo(url: &str) {
    let Some(r) = secret_userinfo(url) else { return };
    let info = &url[r];
    for part in info.split_once(':').map(|(u, p)| vec![u, p]).unwrap_or_else(|| vec![info]) {
        let decoded = percent_decode(part);
        for v in [part, decoded.as_str()] {
            if v.chars().count() >= MIN_MASKED && v != REDACTED {
                crate::actions::mask(v);
            }
        }
    }
}

/// Decodes `%XX` escapes (invalid ones and non-UTF-8 results are kept as written).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_redacted_whole() {
        let cases = [
            ("https://user:pw@host/x.git", "https://***@host/x.git"),
            ("https://ghp_T0KEN@host/x.git", "https://***@host/x.git"),
            ("https://a:b@c@host:8443/x.git?y#z", "https://***@host:8443/x.git?y#z"),
            ("http://user:p%40ss@host", "http://***@host"),
            ("ssh://git:pw@host/x.git", "ssh://***@host/x.git"),
            ("git:pw@host:x.git", "***@host:x.git"),
            ("HTTPS://tok@host/x", "HTTPS://***@host/x"),
        ];
        for (raw, want) in cases {
            assert_eq!(redact(raw), want, "{raw}");
            assert_eq!(RemoteUrl::new(raw).to_string(), want);
            assert!(RemoteUrl::new(raw).has_credentials());
        }
    }

    #[test]
    fn urls_without_secrets_are_unchanged() {
        for raw in [
            "https://host/x.git",
            "https://host/team/@scope/x.git",
            "ssh://git@host/x.git",
            "git+ssh://git@host:22/x.git",
            "git@github.com:org/x.git",
            "host:x.git",
            "../x.git",
            "./libs/a",
            "/srv/git/x.git",
            "file:///srv/git/x.git",
            "",
        ] {
            assert!(matches!(redact(raw), Cow::Borrowed(_)), "{raw}");
            let u = RemoteUrl::new(raw);
            assert!(!u.has_credentials(), "{raw}");
            assert_eq!(serde_json::to_string(&u).unwrap(), serde_json::to_string(raw).unwrap());
        }
    }

    #[test]
    fn serialized_debug_and_display_are_redacted_and_expose_is_raw() {
        let u = RemoteUrl::new("https://alice:s3cr3t-pw@host/x.git");
        assert_eq!(serde_json::to_string(&u).unwrap(), r#""https://***@host/x.git""#);
        assert!(!format!("{u:?}").contains("s3cr3t"));
        assert_eq!(u.expose(), "https://alice:s3cr3t-pw@host/x.git");
        let back: RemoteUrl = serde_json::from_str(&serde_json::to_string(&u).unwrap()).unwrap();
        assert_eq!(back.expose(), "https://***@host/x.git");
    }

    #[test]
    fn credentials_are_masked() {
        RemoteUrl::new("https://tok-9a8b7c6d@host/x.git");
        RemoteUrl::new("https://alice-m:pw%2Fwith-slash@host/x.git");
        RemoteUrl::new("https://me:abc@host/x.git");
        let text = "tok-9a8b7c6d alice-m pw%2Fwith-slash pw/with-slash me abc";
        assert_eq!(crate::actions::redact(text), "*** *** *** *** me abc");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%40b%2"), "a@b%2");
        assert_eq!(percent_decode("%zz%"), "%zz%");
        assert_eq!(percent_decode("%ff"), "%ff");
    }
}
