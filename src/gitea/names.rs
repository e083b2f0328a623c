//! Gitea repository names (pure, no I/O): the name a submodule URL or a directory maps to under
//! Gitea's naming rule, and a repository's URL on the control plane.

/// Why no Gitea repository name can be made of a name or URL ([`sanitize_repo_name`],
/// [`repo_name_from_url`]). The message is one sentence for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepoNameError {
    /// After sanitizing nothing usable is left: empty, `.`, `..` or `-`.
    #[error("`{raw}` gives no usable Gitea repository name")]
    Unusable {
        /// The name as given.
        raw: String,
    },
    /// The sanitized name is longer than [`MAX_REPO_NAME`] characters.
    #[error("repository name `{name}` is longer than Gitea's {MAX_REPO_NAME} characters")]
    TooLong {
        /// The sanitized name.
        name: String,
    },
    /// The URL is empty (or only whitespace).
    #[error("the URL is empty")]
    EmptyUrl,
    /// The URL's path has no last component to name the repository after (`https://host/`, `../`).
    #[error("`{url}` has no repository name in its path")]
    NoNameInPath {
        /// The URL as given, credentials redacted ([`crate::remote_url::redact`]).
        url: String,
    },
}

/// Gitea's longest repository name (`CreateRepoOption.name`: `MaxSize(100)`).
pub const MAX_REPO_NAME: usize = 100;

/// Sanitizes `raw` to a repository name Gitea accepts.
///
/// Gitea's rule (`CreateRepoOption.name` binding `AlphaDashDot;MaxSize(100)` and
/// `IsUsableRepoName`): characters `[A-Za-z0-9_.-]`, at most 100, not `.`, `..` or `-`, not
/// ending in `.git`, `.wiki`, `.rss` or `.atom`. Other characters become `-`; a forbidden
/// suffix's dot becomes `-`.
///
/// # Errors
/// [`RepoNameError::Unusable`] for a name that is empty, `.`/`..`/`-` after sanitizing, [`RepoNameError::TooLong`]
/// when it is longer than 100 characters.
pub fn sanitize_repo_name(raw: &str) -> Result<String, RepoNameError> {
    let mut s: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '-' }).collect();
    for suffix in [".git", ".wiki", ".rss", ".atom"] {
        if s.len() >= suffix.len() && s.to_ascii_lowercase().ends_with(suffix) {
            let at = s.len() - suffix.len();
            s.replace_range(at..at + 1, "-");
        }
    }
    if s.is_empty() || s == "." || s == ".." || s == "-" {
        return Err(RepoNameError::Unusable { raw: raw.to_string() });
    }
    if s.len() > MAX_REPO_NAME {
        return Err(RepoNameError::TooLong { name: s });
    }
    Ok(s)
}

/// The repository name a submodule URL points at, in any form git accepts:
///
/// * `http(s)://[user@]host[:port]/org/name(.git)`, `ssh://…`, `git://…`, `file:///…`;
/// * scp-like `[user@]host:org/name.git`;
/// * relative `../name.git`, `./name`, and local paths `/srv/git/name.git`;
///
/// with any number of trailing slashes. The name is the last path component without `.git`,
/// sanitized with [`sanitize_repo_name`].
///
/// # Errors
/// [`RepoNameError::EmptyUrl`], [`RepoNameError::NoNameInPath`] for a URL without a path component
/// (`https://host/`, `../`), or the errors of [`sanitize_repo_name`] for a name Gitea cannot take.
pub fn repo_name_from_url(url: &str) -> Result<String, RepoNameError> {
    let trimmed = url.trim();
    if trimmed.is_empty() {
        return Err(RepoNameError::EmptyUrl);
    }
    let path: String = if let Some(idx) = trimmed.find("://") {
        // scheme://[userinfo@]host[:port]/path — take everything after the authority.
        let rest = &trimmed[idx + 3..];
        match rest.find('/') {
            Some(p) => rest[p..].to_string(),
            None => String::new(),
        }
    } else if is_scp_like(trimmed) {
        let colon = trimmed.find(':').expect("scp-like has a colon");
        trimmed[colon + 1..].to_string()
    } else {
        trimmed.to_string()
    };
    // Drop query/fragment in URL forms (rare, but then they are not part of the name).
    let path = path.split(['?', '#']).next().unwrap_or("");
    let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    let last = last.strip_suffix(".git").unwrap_or(last);
    if last.is_empty() || last == "." || last == ".." {
        return Err(RepoNameError::NoNameInPath { url: crate::remote_url::redact(url).into_owned() });
    }
    sanitize_repo_name(last)
}

/// True for git's scp-like syntax `[user@]host:path`: a colon before any slash, and not a
/// local path (git: "if there is a slash before the first colon it is a local path").
fn is_scp_like(s: &str) -> bool {
    match (s.find(':'), s.find('/')) {
        (Some(c), Some(sl)) => c < sl && c > 0,
        (Some(c), None) => c > 0,
        _ => false,
    }
}

/// The new URL of repository `repo`: `<gitea>/<org>/<repo>.git`.
pub fn new_url(gitea: &url::Url, org: &str, repo: &str) -> String {
    format!("{}/{org}/{repo}.git", gitea.as_str().trim_end_matches('/'))
}

/// The Gitea repository `(owner, name)` that holds the lib `spec` of `inv`.
///
/// For a lib that is a submodule, both come from its URL in `.gitmodules` (after `publish` that
/// is `<gitea>/<org>/<name>.git`): the last path component is the name ([`repo_name_from_url`]),
/// the one before it the owner; a relative URL (`../name.git`) has no owner of its own and
/// takes `org`. A plain directory is published as `org/<directory name>` (sanitized, as
/// `rewrite` does). `None` for the control plane (the monorepo itself) and for a submodule
/// whose URL gives no usable name.
pub fn lib_repository(
    inv: &crate::inventory::Inventory,
    spec: &crate::inventory::ContainerSpec,
    org: &str,
) -> Option<(String, String)> {
    if spec.name == crate::inventory::CONTROL_PLANE {
        return None;
    }
    let Some(path) = &spec.submodule else {
        let dir = spec.dir.file_name()?.to_string_lossy().into_owned();
        return sanitize_repo_name(&dir).ok().map(|n| (org.to_string(), n));
    };
    let sub = crate::git::flatten(&inv.submodules).into_iter().find(|s| &s.path == path)?;
    let url = sub.url.as_ref()?.expose().to_string();
    let name = repo_name_from_url(&url).ok()?;
    Some((url_owner(&url).unwrap_or_else(|| org.to_string()), name))
}

/// The path component before the repository name in an absolute URL or scp-like address
/// (`https://host/org/name.git` → `org`); `None` for relative URLs and local paths.
fn url_owner(url: &str) -> Option<String> {
    let path = if let Some(idx) = url.find("://") {
        let rest = &url[idx + 3..];
        rest.find('/').map(|p| &rest[p..])?
    } else if is_scp_like(url) {
        &url[url.find(':')? + 1..]
    } else {
        return None;
    };
    let path = path.split(['?', '#']).next().unwrap_or("").trim_end_matches('/');
    let mut parts = path.rsplit('/').filter(|p| !p.is_empty());
    parts.next()?;
    let owner = parts.next()?;
    sanitize_repo_name(owner).ok().filter(|o| o == owner)
}

#[cfg(test)]
mod tests {
    #[test]
    fn owners_of_urls() {
        assert_eq!(url_owner("http://127.0.0.1:3000/main/broker.git").as_deref(), Some("main"));
        assert_eq!(url_owner("git@host:srv/proxy.git").as_deref(), Some("srv"));
        assert_eq!(url_owner("../broker.git"), None);
        assert_eq!(url_owner("https://host/broker.git"), None);
    }

    use super::*;

    #[test]
    fn names_from_every_url_form() {
        let cases = [
            ("http://192.0.2.1/main/nginx.git", "nginx"),
            ("https://git.example.org/main/nginx", "nginx"),
            ("https://git.example.org:8443/a/b/c/nginx.git/", "nginx"),
            ("http://10.0.0.1:3000/main/nginx.git//", "nginx"),
            ("https://user@git.example.org/main/nginx.git", "nginx"),
            ("https://user:pw@git.example.org/main/nginx.git", "nginx"),
            ("ssh://git@git.example.org/main/nginx.git", "nginx"),
            ("ssh://git@git.example.org:2222/main/nginx.git", "nginx"),
            ("ssh://git.example.org/~user/nginx.git", "nginx"),
            ("git://git.example.org/nginx.git", "nginx"),
            ("file:///srv/git/nginx.git", "nginx"),
            ("git@github.com:stevius10/nginx.git", "nginx"),
            ("github.com:stevius10/nginx", "nginx"),
            ("git@host:nginx.git", "nginx"),
            ("../nginx.git", "nginx"),
            ("../../org/nginx", "nginx"),
            ("./nginx/", "nginx"),
            ("/srv/git/nginx.git", "nginx"),
            ("  https://h/x/nginx.git  ", "nginx"),
            ("https://h/x/my.lib.git", "my.lib"),
            ("https://h/x/My_Lib-2", "My_Lib-2"),
            ("https://h/x/name with space.git", "name-with-space"),
            ("https://h/x/ümlaut.git", "-mlaut"),
            ("https://h/x/repo.wiki.git", "repo-wiki"),
            ("https://h/x/feed.rss", "feed-rss"),
            ("https://h/x/nginx.git?ref=x", "nginx"),
            ("https://h/x/nginx.git.git", "nginx-git"),
        ];
        for (url, want) in cases {
            assert_eq!(repo_name_from_url(url).as_deref(), Ok(want), "{url}");
        }
    }

    #[test]
    fn urls_without_names_are_refused() {
        for url in [
            "",
            "   ",
            "https://host/",
            "https://host",
            "../",
            "..",
            ".",
            "git@host:",
            "ssh://h/.git",
            "https://h/x/.git/",
            "https://h/-",
        ] {
            assert!(repo_name_from_url(url).is_err(), "{url:?} should be refused");
        }
    }

    #[test]
    fn name_errors_read_as_before() {
        let e = |r: Result<String, RepoNameError>| r.unwrap_err().to_string();
        assert_eq!(e(sanitize_repo_name("..")), "`..` gives no usable Gitea repository name");
        assert_eq!(
            e(sanitize_repo_name(&"x".repeat(101))),
            format!("repository name `{}` is longer than Gitea's 100 characters", "x".repeat(101))
        );
        assert_eq!(e(repo_name_from_url(" ")), "the URL is empty");
        assert_eq!(e(repo_name_from_url("https://host/")), "`https://host/` has no repository name in its path");
        assert_eq!(
            e(repo_name_from_url("https://u:pw@host/")),
            "`https://***@host/` has no repository name in its path"
        );
    }

    #[test]
    fn sanitizing() {
        assert_eq!(sanitize_repo_name("a.git").unwrap(), "a-git");
        assert_eq!(sanitize_repo_name("A.ATOM").unwrap(), "A-ATOM");
        assert_eq!(sanitize_repo_name(".git").unwrap(), "-git");
        assert_eq!(sanitize_repo_name("a/b").unwrap(), "a-b");
        assert!(sanitize_repo_name("..").is_err());
        assert!(sanitize_repo_name("-").is_err());
        assert!(sanitize_repo_name(&"x".repeat(101)).is_err());
        assert_eq!(sanitize_repo_name(&"x".repeat(100)).unwrap().len(), 100);
    }

    #[test]
    fn scp_detection() {
        assert!(is_scp_like("git@host:org/x.git"));
        assert!(is_scp_like("host:x"));
        assert!(!is_scp_like("./a:b"));
        assert!(!is_scp_like("/abs/path:x"));
        assert!(!is_scp_like("../x.git"));
        assert!(!is_scp_like(":x"));
    }

    #[test]
    fn new_urls() {
        let g = crate::gitea::base_url("http://127.0.0.1:3000/").unwrap();
        assert_eq!(new_url(&g, "main", "nginx"), "http://127.0.0.1:3000/main/nginx.git");
        let g = crate::gitea::base_url("https://h/gitea").unwrap();
        assert_eq!(new_url(&g, "main", "nginx"), "https://h/gitea/main/nginx.git");
    }
}
