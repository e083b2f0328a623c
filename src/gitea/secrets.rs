//! Gitea Actions secrets: list their names, create or update one. Gitea never hands a secret's
//! value back (the list has names and `created_at` only), so there is no `get`: whoever wants to
//! know whether a secret holds a value must remember what it wrote (see
//! `steps::publish::record`).
//!
//! The value goes only into the request body (`CreateOrUpdateSecretOption`, `{"data": …}`),
//! never into a URL, a log line or an error message: Gitea's error answers for this operation
//! (`400`, `404`) carry Gitea's own message, which never echoes the body.

use reqwest::Method;
use secrecy::{ExposeSecret, SecretString};

use super::{Client, GiteaError, Secret, VariableScope};

/// What [`Client::put_secret`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretWritten {
    /// 201: there was no such secret.
    Created,
    /// 204: an existing secret got the value.
    Updated,
}

impl Client {
    /// `GET …/actions/secrets?page=…&limit=…` (`orgListActionsSecrets` /
    /// `repoListActionsSecrets`, 200): every secret of `scope` (names and `created_at`, never
    /// values), all pages (at most [`MAX_PAGES`](super::MAX_PAGES) of [`PAGE_LIMIT`](super::PAGE_LIMIT)).
    ///
    /// # Errors
    /// [`GiteaError::Status`] for any other answer (404: no such organization or repository).
    pub async fn list_secrets(&self, scope: &VariableScope) -> Result<Vec<Secret>, GiteaError> {
        let seg = scope.actions_segments("secrets");
        self.get_pages(&seg, &[]).await
    }

    /// `PUT …/actions/secrets/{secretname}` with `CreateOrUpdateSecretOption` `{"data": value}`
    /// (`updateOrgSecret` / `updateRepoSecret`): 201 → [`SecretWritten::Created`], 204 →
    /// [`SecretWritten::Updated`].
    ///
    /// # Errors
    /// [`GiteaError::Status`] for any other answer (400: a name Gitea refuses or an empty value;
    /// 404: no such organization or repository).
    pub async fn put_secret(
        &self,
        scope: &VariableScope,
        name: &str,
        value: &SecretString,
    ) -> Result<SecretWritten, GiteaError> {
        let mut seg = scope.actions_segments("secrets");
        seg.push(name);
        let body = serde_json::json!({ "data": value.expose_secret() });
        let (a, path) = self.send(Method::PUT, &seg, &[], Self::json(&body)).await?;
        match a.status.as_u16() {
            201 => Ok(SecretWritten::Created),
            204 => Ok(SecretWritten::Updated),
            _ => Err(Self::status_error(Method::PUT, path, &a)),
        }
    }
}
