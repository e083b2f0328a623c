//! PVE API token credentials in the forms people already have, resolved into one user, token id
//! and secret.
//!
//! PVE names a token `USER@REALM!TOKENID` and authenticates it with the header
//! `Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET` (PVE API docs, "API Tokens"; the id
//! format is pve-access-control's `pve-tokenid`, `[A-Za-z][A-Za-z0-9.\-_]+`). Accepted:
//!
//! * the token setting (`PROXMOX_TOKEN`, or `PROXMOX_TOKEN_ID` as other PVE tools name it, or
//!   `proxmox.token`): `TOKENID` (the user from `PROXMOX_USER`), `USER@REALM!TOKENID`, or the
//!   whole `USER@REALM!TOKENID=SECRET` (then no separate secret is needed; the part after `=` is
//!   masked at once, but a variable is no place for a secret: prefer the secret setting);
//! * the secret setting (`PROXMOX_SECRET`, or `PROXMOX_TOKEN_SECRET`, or `proxmox.secret`): the
//!   secret alone (a UUID), or the whole `USER@REALM!TOKENID=SECRET` (then the token setting may
//!   be left empty).
//!
//! Refused, each naming the settings involved (and never echoing a secret): a user given twice
//! with different values — the user setting at the same or a higher precedence than the token
//! that names another user (a user from a lower layer, such as the committed `local/config.json`'s
//! `root@pam`, gives way to the token's); two different token ids or two different secrets; the
//! two names of one setting (`PROXMOX_TOKEN` and `PROXMOX_TOKEN_ID`) set to different values;
//! a malformed id or user.

use secrecy::SecretString;

use crate::error::{Location, Problems};

/// One configured value: the value, where it was set, and its precedence layer (0: environment,
/// 1: `local/config.local.json`, 2: `local/config.json`; lower wins).
#[derive(Debug, Clone)]
pub(super) struct Given {
    pub(super) value: String,
    pub(super) at: Location,
    pub(super) layer: u8,
}

impl Given {
    /// The setting's name for messages: the variable, or the file and key.
    fn name(&self) -> String {
        match &self.at.key {
            Some(k) if self.layer == 0 => k.clone(),
            _ => self.at.to_string(),
        }
    }
}

/// The parts one value carries.
#[derive(Debug, Default, PartialEq, Eq)]
struct Parts {
    user: Option<String>,
    id: Option<String>,
    secret: Option<String>,
}

/// The resolved token credentials: user (`USER@REALM`), token id (after `!`), secret.
#[derive(Debug, Default)]
pub(super) struct Resolved {
    pub(super) user: Option<String>,
    pub(super) token: Option<String>,
    pub(super) secret: Option<SecretString>,
}

const FORMS: &str = "TOKENID, USER@REALM!TOKENID or USER@REALM!TOKENID=SECRET";

/// Checks a token id (`pve-tokenid`).
fn check_id(id: &str) -> bool {
    let mut chars = id.chars();
    id.len() >= 2
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// Checks `USER@REALM`.
fn check_user(user: &str) -> bool {
    matches!(user.rsplit_once('@'), Some((name, realm)) if !name.is_empty() && !realm.is_empty())
        && !user.chars().any(|c| c.is_whitespace() || matches!(c, '!' | '=' | ':'))
}

/// Splits `[USER@REALM!]TOKENID` (no secret), explaining what is wrong with it. Only `shown`
/// (the value without any secret) is echoed.
fn split_id(idpart: &str) -> Result<(Option<String>, String), String> {
    let (user, id) = match idpart.split_once('!') {
        Some((u, id)) => (Some(u.to_string()), id.to_string()),
        None => (None, idpart.to_string()),
    };
    if let Some(u) = &user
        && !check_user(u)
    {
        return Err(format!("expected {FORMS}: `{u}` before `!` is not USER@REALM (e.g. root@pam)"));
    }
    if user.is_none() && idpart.contains('@') {
        return Err(format!(
            "expected {FORMS}, found `{idpart}`: that is a user, not a token id (the user goes in PROXMOX_USER or proxmox.user, or before `!`)"
        ));
    }
    if !check_id(&id) {
        return Err(format!(
            "expected {FORMS}: the token id `{id}` must start with a letter and hold only letters, digits, `.`, `-` and `_`"
        ));
    }
    Ok((user, id))
}

/// Parses the token setting: `TOKENID`, `USER@REALM!TOKENID`, or `USER@REALM!TOKENID=SECRET`.
fn parse_token(value: &str) -> Result<Parts, String> {
    let (idpart, secret) = match value.split_once('=') {
        Some((i, s)) => (i, Some(s.trim().to_string())),
        None => (value, None),
    };
    if secret.as_deref() == Some("") {
        return Err(format!("expected {FORMS}: nothing after `=`"));
    }
    let (user, id) = split_id(idpart.trim())?;
    Ok(Parts { user, id: Some(id), secret })
}

/// Parses the secret setting: the secret alone, or `USER@REALM!TOKENID=SECRET`.
fn parse_secret(value: &str) -> Result<Parts, String> {
    match value.split_once('=') {
        Some((idpart, secret)) if idpart.contains('!') => {
            let secret = secret.trim();
            if secret.is_empty() {
                return Err("expected the token secret or USER@REALM!TOKENID=SECRET: nothing after `=`".into());
            }
            let (user, id) = split_id(idpart.trim())
                .map_err(|e| e.replace(&format!("expected {FORMS}"), "expected USER@REALM!TOKENID=SECRET"))?;
            Ok(Parts { user, id: Some(id), secret: Some(secret.to_string()) })
        }
        _ => Ok(Parts { user: None, id: None, secret: Some(value.to_string()) }),
    }
}

/// Masks the secret a token value may carry after `=` (the whole value is not a secret).
pub(super) fn mask_token_value(value: &str) {
    if let Some((_, secret)) = value.split_once('=') {
        crate::actions::mask(secret.trim());
    }
}

/// Of the two names of one setting in the environment (`PROXMOX_TOKEN` and `PROXMOX_TOKEN_ID`),
/// the one set; both set to different values is a problem naming both (the values are not
/// echoed: one of them may hold a secret).
pub(super) fn one_of(a: Option<Given>, b: Option<Given>, problems: &mut Problems) -> Option<Given> {
    match (a, b) {
        (Some(a), Some(b)) if a.value != b.value => {
            problems.add(
                b.at.clone(),
                format!("{} and {} are both set, to different values; set only one of them", a.name(), b.name()),
            );
            Some(a)
        }
        (a, b) => a.or(b),
    }
}

/// Resolves the user setting, the token setting and the secret setting into one user, token id
/// and secret (see the module documentation for the rules); every conflict is added to
/// `problems`.
pub(super) fn resolve(
    user: Option<Given>,
    token: Option<Given>,
    secret: Option<Given>,
    problems: &mut Problems,
) -> Resolved {
    let parse = |g: &Option<Given>, f: fn(&str) -> Result<Parts, String>, problems: &mut Problems| match g {
        Some(g) => f(&g.value).unwrap_or_else(|why| {
            problems.add(g.at.clone(), why);
            Parts::default()
        }),
        None => Parts::default(),
    };
    let t = parse(&token, parse_token, problems);
    let s = parse(&secret, parse_secret, problems);
    let (tname, sname) =
        (token.as_ref().map(Given::name).unwrap_or_default(), secret.as_ref().map(Given::name).unwrap_or_default());

    // One token id, one secret, and at most one user named by the token forms.
    if let (Some(a), Some(b)) = (&t.id, &s.id)
        && a != b
    {
        problems.add(
            secret.as_ref().unwrap().at.clone(),
            format!("{sname} names the token `{b}`, but {tname} names `{a}`; set the token once"),
        );
    }
    if let (Some(a), Some(b)) = (&t.secret, &s.secret)
        && a != b
    {
        problems.add(
            token.as_ref().unwrap().at.clone(),
            format!("{tname} carries a secret (after `=`) and {sname} holds a different one; give the secret once"),
        );
    }
    // The token's user, with the setting it came from.
    let token_user = match (&t.user, &s.user) {
        (Some(a), Some(b)) if a != b => {
            problems.add(
                secret.as_ref().unwrap().at.clone(),
                format!("{sname} names the user `{b}`, but {tname} names `{a}`; a token belongs to one user"),
            );
            None
        }
        (Some(a), _) => Some((a.clone(), token.as_ref().unwrap())),
        (None, Some(b)) => Some((b.clone(), secret.as_ref().unwrap())),
        (None, None) => None,
    };
    let user = match (user, token_user) {
        (Some(u), Some((tu, from))) if u.value != tu => {
            if u.layer <= from.layer {
                problems.add(
                    u.at.clone(),
                    format!(
                        "the user is given twice: {} is `{}`, but {} names the token of `{tu}`; \
                         a token belongs to one user: set {} to `{tu}` or leave it empty",
                        u.name(),
                        u.value,
                        from.name(),
                        u.name()
                    ),
                );
            }
            // A user from a lower layer (the committed template's root@pam) gives way.
            Some(tu)
        }
        (_, Some((tu, _))) => Some(tu),
        (u, None) => u.map(|u| u.value),
    };
    Resolved {
        user,
        token: t.id.or(s.id),
        secret: t.secret.or(s.secret).map(|v| {
            crate::actions::mask(&v);
            SecretString::from(v)
        }),
    }
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    fn env(var: &str, value: &str) -> Option<Given> {
        Some(Given { value: value.into(), at: Location::environment(var), layer: 0 })
    }

    fn file(key: &str, value: &str) -> Option<Given> {
        Some(Given { value: value.into(), at: Location::file("local/config.json").with_key(key), layer: 2 })
    }

    fn ok(
        user: Option<Given>,
        token: Option<Given>,
        secret: Option<Given>,
    ) -> (Option<String>, Option<String>, String) {
        let mut p = Problems::new();
        let r = resolve(user, token, secret, &mut p);
        assert!(p.is_empty(), "{p}");
        (r.user, r.token, r.secret.map(|s| s.expose_secret().to_string()).unwrap_or_default())
    }

    fn refused(user: Option<Given>, token: Option<Given>, secret: Option<Given>) -> String {
        let mut p = Problems::new();
        resolve(user, token, secret, &mut p);
        assert!(!p.is_empty(), "accepted");
        p.to_string()
    }

    const UUID: &str = "0b8e5a72-5e0c-4d4b-9a3a-2f4f1d8c9e11";

    #[test]
    fn every_form_resolves_to_the_same_credentials() {
        let want = (Some("ci@pve".to_string()), Some("deploy".to_string()), UUID.to_string());
        // Today's form: the id after `!`, the user apart.
        assert_eq!(
            ok(env("PROXMOX_USER", "ci@pve"), env("PROXMOX_TOKEN", "deploy"), env("PROXMOX_SECRET", UUID)),
            want
        );
        // The token's full name.
        assert_eq!(ok(None, env("PROXMOX_TOKEN", "ci@pve!deploy"), env("PROXMOX_SECRET", UUID)), want);
        // The same user given twice is no conflict.
        assert_eq!(
            ok(env("PROXMOX_USER", "ci@pve"), env("PROXMOX_TOKEN", "ci@pve!deploy"), env("PROXMOX_SECRET", UUID)),
            want
        );
        // Everything in one value, in the token or in the secret.
        let full = format!("ci@pve!deploy={UUID}");
        assert_eq!(ok(None, env("PROXMOX_TOKEN", &full), None), want);
        assert_eq!(ok(None, None, env("PROXMOX_SECRET", &full)), want);
        assert_eq!(ok(None, env("PROXMOX_TOKEN_ID", "ci@pve!deploy"), env("PROXMOX_TOKEN_SECRET", &full)), want);
        // The committed template's root@pam (a lower layer) gives way to the token's user.
        assert_eq!(
            ok(file("proxmox.user", "root@pam"), env("PROXMOX_TOKEN", "ci@pve!deploy"), env("PROXMOX_SECRET", UUID)),
            want
        );
    }

    #[test]
    fn a_user_given_twice_is_refused_naming_both_settings() {
        let msg = refused(
            env("PROXMOX_USER", "root@pam"),
            env("PROXMOX_TOKEN", "ci@pve!deploy"),
            env("PROXMOX_SECRET", UUID),
        );
        assert!(msg.contains("PROXMOX_USER") && msg.contains("PROXMOX_TOKEN"), "{msg}");
        assert!(msg.contains("root@pam") && msg.contains("ci@pve"), "{msg}");
        let full = format!("ci@pve!deploy={UUID}");
        let msg = refused(env("PROXMOX_USER", "root@pam"), None, env("PROXMOX_TOKEN_SECRET", &full));
        assert!(msg.contains("PROXMOX_USER") && msg.contains("PROXMOX_TOKEN_SECRET"), "{msg}");
        assert!(!msg.contains(UUID), "the secret is never echoed: {msg}");
        // The user in the same file as the token, too.
        let msg = refused(file("proxmox.user", "root@pam"), file("proxmox.token", "ci@pve!deploy"), None);
        assert!(msg.contains("proxmox.user") && msg.contains("proxmox.token"), "{msg}");
    }

    #[test]
    fn contradictions_and_malformed_values_are_refused_without_echoing_secrets() {
        let msg = refused(None, env("PROXMOX_TOKEN", "ci@pve!one=other-secret"), env("PROXMOX_SECRET", UUID));
        assert!(msg.contains("different one") && !msg.contains(UUID) && !msg.contains("other-secret"), "{msg}");
        let msg =
            refused(None, env("PROXMOX_TOKEN", "ci@pve!one"), env("PROXMOX_SECRET", &format!("ci@pve!two={UUID}")));
        assert!(msg.contains("`two`") && msg.contains("`one`") && !msg.contains(UUID), "{msg}");
        for bad in [
            "root@pam",
            "ci@pve!",
            "!deploy",
            "pve!deploy",
            "ci@pve!9x",
            "ci@pve!de ploy",
            "ci@pve!deploy=",
            "ci@pve!x",
        ] {
            let msg = refused(None, env("PROXMOX_TOKEN", bad), env("PROXMOX_SECRET", UUID));
            assert!(msg.contains("PROXMOX_TOKEN") && msg.contains("expected"), "{bad}: {msg}");
        }
        let msg = refused(None, env("PROXMOX_TOKEN", "pve!x=zz-secret-zz"), None);
        assert!(!msg.contains("zz-secret-zz"), "{msg}");
        // A secret that merely contains `=` (no `!`) is a secret.
        // (A value no other test uses: resolving masks it for the whole test process.)
        let secret = "token-test-secret=with-equals";
        assert_eq!(
            ok(env("PROXMOX_USER", "a@pve"), env("PROXMOX_TOKEN", "t1"), env("PROXMOX_SECRET", secret)).2,
            secret
        );
    }

    #[test]
    fn two_names_of_one_setting() {
        let mut p = Problems::new();
        let g = one_of(env("PROXMOX_TOKEN", "a"), env("PROXMOX_TOKEN_ID", "a"), &mut p);
        assert!(p.is_empty() && g.unwrap().value == "a");
        let g = one_of(env("PROXMOX_SECRET", "s1"), env("PROXMOX_TOKEN_SECRET", "s2"), &mut p);
        let msg = p.to_string();
        assert!(msg.contains("PROXMOX_SECRET and PROXMOX_TOKEN_SECRET are both set"), "{msg}");
        assert!(!msg.contains("s1") && !msg.contains("s2") && g.is_some(), "{msg}");
    }
}
