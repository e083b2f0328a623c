//! How every workflow proxmox-gitops renders or installs checks a repository out
//! (`PROXMOX_GITOPS_CHECKOUT`, or `checkout` in `local/config.json`).
//!
//! The default, `git`, is no action at all: each checkout step becomes a `run:` step of git
//! commands (`workflows/checkout.sh`, see `crate::workflows::checkout`), which works on a control
//! plane without the public actions host (Gitea's `DEFAULT_ACTIONS_URL=self`) as well as with it.
//! Any other value is an action for the steps' `uses:`: the seed, for one, mirrors
//! `actions/checkout` into its own Gitea (as `tasks/checkout`) and points the workflows there.
//! The value is pasted into workflow files, so it is checked to be `git` or one of the forms a
//! `uses:` key takes (GitHub's workflow syntax, "jobs.<job_id>.steps[*].uses", and act_runner's
//! full-URL form) and nothing else:
//!
//! * `OWNER/REPO@REF` or `OWNER/REPO/PATH@REF` — an action on the instance's default actions
//!   host (Gitea's `DEFAULT_ACTIONS_URL`), e.g. `actions/checkout@v4`, `tasks/checkout@main`;
//! * `./PATH` — an action inside the checked-out repository;
//! * `https://HOST[:PORT]/OWNER/REPO@REF` (or `http://`) — an action on another Gitea, fetched by
//!   act_runner from that URL. Credentials in the URL are refused (they would end up in every
//!   workflow file).
//!
//! Names are Gitea's characters (`[A-Za-z0-9_.-]`); a ref may also hold `/`. No spaces, quotes,
//! `$`, `#` or control characters: the value never needs quoting and Actions never evaluates it.

use std::fmt;

/// The default: check out with git in a `run:` step, no action.
pub const DEFAULT_CHECKOUT: &str = "git";
/// The action the shipped workflows and templates name in their checkout steps (what any other
/// setting replaces).
pub const ACTIONS_CHECKOUT: &str = "actions/checkout@v4";

/// A validated `uses:` value for the checkout step (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutAction(String);

impl Default for CheckoutAction {
    fn default() -> Self {
        CheckoutAction(DEFAULT_CHECKOUT.to_string())
    }
}

impl fmt::Display for CheckoutAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One path segment of a name: Gitea's characters, not `.` or `..`.
fn segment_ok(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// A git ref as written after `@`: name characters and `/`, no `..`, not starting with `-`.
fn ref_ok(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && !s.contains("..")
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        && s.split('/').all(|p| !p.is_empty())
}

/// `OWNER/REPO[/PATH…]@REF`.
fn repo_ref_ok(s: &str) -> bool {
    let Some((path, r)) = s.rsplit_once('@') else {
        return false;
    };
    let parts: Vec<&str> = path.split('/').collect();
    parts.len() >= 2 && parts.iter().all(|p| segment_ok(p)) && ref_ok(r)
}

impl CheckoutAction {
    /// Parses and checks `value` (surrounding whitespace ignored).
    ///
    /// # Errors
    /// What was expected, and the value itself unless it holds credentials.
    pub fn parse(value: &str) -> Result<CheckoutAction, String> {
        let v = value.trim();
        let expected = "expected `git` (the default: check out with git, no action) or the checkout action as \
                        OWNER/REPO@REF (e.g. actions/checkout@v4), ./PATH, or https://HOST/OWNER/REPO@REF";
        let ok = if v == DEFAULT_CHECKOUT {
            true
        } else if let Some(rest) = v.strip_prefix("./") {
            !rest.is_empty() && rest.trim_end_matches('/').split('/').all(segment_ok)
        } else if let Some(rest) = v.strip_prefix("https://").or_else(|| v.strip_prefix("http://")) {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            if authority.contains('@') {
                crate::remote_url::mask_userinfo(v);
                return Err(format!(
                    "{expected}: the URL holds credentials, which would be written into every workflow; \
                     make the action's repository public on that Gitea instead"
                ));
            }
            let (host, port) = authority.split_once(':').unwrap_or((authority, ""));
            let host_ok = !host.is_empty()
                && host.split('.').all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
            let port_ok = port.is_empty() || port.parse::<u16>().is_ok_and(|p| p > 0);
            host_ok && port_ok && repo_ref_ok(path)
        } else {
            !v.contains("://") && repo_ref_ok(v)
        };
        if ok { Ok(CheckoutAction(v.to_string())) } else { Err(format!("{expected}, found `{v}`")) }
    }

    /// The setting's value (`git` or an action).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for the default, `git`: checkout steps become `run:` steps (no action).
    pub fn is_git(&self) -> bool {
        self.0 == DEFAULT_CHECKOUT
    }

    /// What the checkout steps' `uses:` is rendered with: the action, or for `git` the shipped
    /// [`ACTIONS_CHECKOUT`] that the git step then replaces.
    pub fn uses(&self) -> &str {
        if self.is_git() { ACTIONS_CHECKOUT } else { &self.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        for v in [
            "actions/checkout@v4",
            "tasks/checkout@main",
            "my.org/check_out-x@v4.1.7",
            "actions/checkout@refs/heads/main",
            "owner/repo/sub/dir@v1",
            "./.github/actions/checkout",
            "./checkout/",
            "https://gitea.lan/tasks/checkout@main",
            "http://10.0.3.2:8080/tasks/checkout@v4",
            "https://github.com/actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683",
        ] {
            assert_eq!(CheckoutAction::parse(v).map(|c| c.to_string()), Ok(v.to_string()), "{v}");
        }
        assert_eq!(CheckoutAction::parse("  actions/checkout@v4\n").unwrap().as_str(), "actions/checkout@v4");
        assert!(CheckoutAction::default().is_git());
        assert_eq!(CheckoutAction::default().uses(), ACTIONS_CHECKOUT);
        assert_eq!(CheckoutAction::parse("git").unwrap(), CheckoutAction::default());
        assert!(!CheckoutAction::parse("actions/checkout@v4").unwrap().is_git());
    }

    #[test]
    fn refused_forms() {
        for v in [
            "",
            "actions/checkout",
            "checkout@v4",
            "actions/checkout@",
            "actions/checkout@v4 # pinned",
            "actions/checkout@${{ vars.REF }}",
            "actions/check\"out@v4",
            "actions/checkout@-v4",
            "actions/checkout@../x",
            "../checkout",
            "./",
            "./../x",
            "/abs/checkout",
            "ftp://host/o/r@v1",
            "https://host/o@v1",
            "https://ho st/o/r@v1",
            "https://host:0/o/r@v1",
            "docker://alpine:3",
            "a/b@v1\nrun: x",
        ] {
            let e = CheckoutAction::parse(v).unwrap_err();
            assert!(e.starts_with("expected `git` (the default"), "{v}: {e}");
        }
        let e = CheckoutAction::parse("https://alice:s3cret-9f@gitea.lan/tasks/checkout@v4").unwrap_err();
        assert!(!e.contains("s3cret-9f"), "{e}");
        assert!(e.contains("holds credentials"), "{e}");
    }
}
