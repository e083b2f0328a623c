//! Gitea Actions variables: their scope (organization or repository), the calls that read and
//! write them, and the name rule this tool enforces before anything is sent.

use reqwest::Method;
use serde::Serialize;

use super::{ActionVariable, Client, CreateVariableOption, Created, GiteaError, UpdateVariableOption};

/// Scope of an Actions variable.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(tag = "scope", rename_all = "lowercase")]
pub enum VariableScope {
    /// Organization variables: `/orgs/{org}/actions/variables`.
    Org {
        /// The organization.
        org: String,
    },
    /// Repository variables: `/repos/{owner}/{repo}/actions/variables`.
    Repo {
        /// The owner.
        owner: String,
        /// The repository.
        repo: String,
    },
}

impl VariableScope {
    fn segments(&self) -> Vec<&str> {
        self.actions_segments("variables")
    }

    /// The path of the scope's Actions `what` (`variables` or `secrets`), as segments.
    pub(super) fn actions_segments<'a>(&'a self, what: &'a str) -> Vec<&'a str> {
        match self {
            VariableScope::Org { org } => vec!["orgs", org, "actions", what],
            VariableScope::Repo { owner, repo } => vec!["repos", owner, repo, "actions", what],
        }
    }
}

impl std::fmt::Display for VariableScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VariableScope::Org { org } => write!(f, "org {org}"),
            VariableScope::Repo { owner, repo } => write!(f, "repo {owner}/{repo}"),
        }
    }
}

impl Client {
    /// `GET …/actions/variables?page=…&limit=…` (`getOrgVariablesList` / `getRepoVariablesList`,
    /// 200): every variable of `scope`, all pages (at most [`MAX_PAGES`](super::MAX_PAGES) of [`PAGE_LIMIT`](super::PAGE_LIMIT)), in
    /// Gitea's order.
    ///
    /// # Errors
    /// [`GiteaError::Status`] for any other answer (404: no such organization or repository).
    pub async fn list_variables(&self, scope: &VariableScope) -> Result<Vec<ActionVariable>, GiteaError> {
        let seg = scope.segments();
        self.get_pages(&seg, &[]).await
    }

    /// `DELETE …/actions/variables/{variablename}` (`deleteOrgVariable` / `deleteRepoVariable`):
    /// `true` when deleted (200/201/204), `false` when there was no such variable (404).
    pub async fn delete_variable(&self, scope: &VariableScope, name: &str) -> Result<bool, GiteaError> {
        let mut seg = scope.segments();
        seg.push(name);
        let (a, path) = self.send(Method::DELETE, &seg, &[], None).await?;
        match a.status.as_u16() {
            200 | 201 | 204 => Ok(true),
            404 => Ok(false),
            _ => Err(Self::status_error(Method::DELETE, path, &a)),
        }
    }

    /// `GET …/actions/variables/{variablename}` (`getOrgVariable` / `getRepoVariable`,
    /// 200/404).
    pub async fn get_variable(&self, scope: &VariableScope, name: &str) -> Result<Option<ActionVariable>, GiteaError> {
        let mut seg = scope.segments();
        seg.push(name);
        let (a, path) = self.send(Method::GET, &seg, &[], None).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::GET, path, &a).map(Some),
            404 => Ok(None),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `POST …/actions/variables/{variablename}` (`createOrgVariable` / `createRepoVariable`,
    /// 201 → [`Created::New`], 409 → [`Created::Exists`]).
    pub async fn create_variable(
        &self,
        scope: &VariableScope,
        name: &str,
        opt: &CreateVariableOption,
    ) -> Result<Created<()>, GiteaError> {
        let mut seg = scope.segments();
        seg.push(name);
        let (a, path) = self.send(Method::POST, &seg, &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 | 204 => Ok(Created::New(())),
            409 => Ok(Created::Exists),
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }

    /// `PUT …/actions/variables/{variablename}` (`updateOrgVariable` / `updateRepoVariable`,
    /// 201/204).
    pub async fn update_variable(
        &self,
        scope: &VariableScope,
        name: &str,
        opt: &UpdateVariableOption,
    ) -> Result<(), GiteaError> {
        let mut seg = scope.segments();
        seg.push(name);
        let (a, path) = self.send(Method::PUT, &seg, &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 | 204 => Ok(()),
            _ => Err(Self::status_error(Method::PUT, path, &a)),
        }
    }
}

/// Why a name cannot be an Actions variable of this tool ([`valid_variable_name`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariableNameError {
    /// Not `^[A-Z_][A-Z0-9_]*$`.
    #[error(
        "`{name}` is not a valid variable name: expected upper-case letters, digits and `_`, \
         not starting with a digit (^[A-Z_][A-Z0-9_]*$)"
    )]
    Malformed {
        /// The name as given.
        name: String,
    },
    /// Starts with `GITEA_` or `GITHUB_`, which Actions reserves.
    #[error("`{name}`: variable names must not start with GITEA_ or GITHUB_ (reserved by Actions)")]
    Reserved {
        /// The name as given.
        name: String,
    },
}

/// True when `name` is a valid Actions variable name for this tool: `^[A-Z_][A-Z0-9_]*$`, not
/// starting with `GITEA_` or `GITHUB_` (Gitea's Actions name rule; Gitea upper-cases names, we
/// demand them upper-case so the files and the UI agree).
///
/// # Errors
/// [`VariableNameError::Malformed`] or [`VariableNameError::Reserved`].
pub fn valid_variable_name(name: &str) -> Result<(), VariableNameError> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_');
    if !ok {
        return Err(VariableNameError::Malformed { name: name.to_string() });
    }
    if name.starts_with("GITEA_") || name.starts_with("GITHUB_") {
        return Err(VariableNameError::Reserved { name: name.to_string() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_errors_read_as_before() {
        assert_eq!(
            valid_variable_name("1A").unwrap_err().to_string(),
            "`1A` is not a valid variable name: expected upper-case letters, digits and `_`, not starting with a \
             digit (^[A-Z_][A-Z0-9_]*$)"
        );
        assert_eq!(
            valid_variable_name("GITEA_X").unwrap_err().to_string(),
            "`GITEA_X`: variable names must not start with GITEA_ or GITHUB_ (reserved by Actions)"
        );
    }

    #[test]
    fn variable_names() {
        for ok in ["A", "_X", "IP_1", "SHARE_PATH"] {
            assert!(valid_variable_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1A", "a", "Foo", "A-B", "GITEA_X", "GITHUB_TOKEN", "A B", "É"] {
            assert!(valid_variable_name(bad).is_err(), "{bad}");
        }
    }
}
