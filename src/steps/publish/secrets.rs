//! Setting the Actions secrets publish plans ([`super::from_settings`]): per scope one listing of
//! the secrets' names, then for each wanted secret a write only when [`needs_write`] says so, its
//! keyed digest recorded ([`SecretRecord`]) once Gitea took it.

use std::collections::BTreeSet;

use super::from_settings::WantedSecret;
use super::record::SecretRecord;
use super::report::{ItemAction, SecretReport};
use crate::gitea::{Client, SecretWritten, VariableScope};

/// Whether a secret must be written: when Gitea does not list it, when there is no record of
/// what was written, or when the recorded digest differs from the wanted value's.
pub fn needs_write(listed: bool, recorded: Option<&str>, digest: &str) -> bool {
    !listed || recorded != Some(digest)
}

/// Sets `wanted` on the Gitea of `client` (its URL `gitea`, as in the record), updating and
/// saving `record` after every write.
///
/// # Errors
/// The failing Gitea call (naming the secret and scope, never the value), or the record that
/// cannot be saved.
pub async fn ensure_secrets(
    client: &Client,
    gitea: &str,
    wanted: &[WantedSecret],
    record: &mut SecretRecord,
) -> anyhow::Result<Vec<SecretReport>> {
    let mut listed: Option<(VariableScope, BTreeSet<String>)> = None;
    let mut out = Vec::new();
    for w in wanted {
        let names = match &listed {
            Some((scope, names)) if scope == &w.scope => names,
            _ => {
                let names = client
                    .list_secrets(&w.scope)
                    .await
                    .map_err(|e| anyhow::Error::new(e).context(format!("listing the secrets of {}", w.scope)))?
                    .into_iter()
                    .map(|s| s.name.to_ascii_uppercase())
                    .collect();
                &listed.insert((w.scope.clone(), names)).1
            }
        };
        let digest = record.digest(gitea, &w.scope, w.name, &w.value);
        let action = if needs_write(names.contains(w.name), record.recorded(gitea, &w.scope, w.name), &digest) {
            let written = client
                .put_secret(&w.scope, w.name, &w.value)
                .await
                .map_err(|e| anyhow::Error::new(e).context(format!("secret {} of {}", w.name, w.scope)))?;
            record.set(gitea, &w.scope, w.name, digest);
            record.save()?;
            match written {
                SecretWritten::Created => ItemAction::Created,
                SecretWritten::Updated => ItemAction::Updated,
            }
        } else {
            ItemAction::Unchanged
        };
        tracing::info!("secret {} ({}): {}", w.name, w.scope, super::label(action));
        out.push(SecretReport { scope: w.scope.clone(), name: w.name.to_string(), action });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_written_unless_listed_and_recorded_with_the_same_digest() {
        assert!(!needs_write(true, Some("d1"), "d1"), "listed, same value: unchanged");
        assert!(needs_write(true, Some("d0"), "d1"), "another value");
        assert!(needs_write(true, None, "d1"), "no record (a new installation, or set by hand)");
        assert!(needs_write(false, Some("d1"), "d1"), "deleted on Gitea since");
        assert!(needs_write(false, None, "d1"), "new");
    }
}
