//! Restoring a lib's data from its newest snapshot when its `SNAPSHOT` paths are empty (the seed's
//! behaviour), between the base role and the lib's configuration.

use anyhow::Context;

use super::{ConfigureOptions, Log, Partial};
use crate::artifact;
use crate::exec::{SSH_EXEC_TIMEOUT, SshExec};
use crate::inventory::{ContainerSpec, Inventory};
use crate::model::Outcome;
use crate::snapshot::record::SnapshotOptions;
use crate::ssh::Connection;

/// The seed's behaviour, after the base role and before the lib's configuration: when the lib
/// declares `SNAPSHOT` paths, all of them are missing or empty on the container, and a snapshot
/// exists in `<share>/snapshots/<lib>/`, the newest (by time) is verified and restored as root
/// over this connection ([`crate::snapshot::record::restore_if_empty`]). The restore's
/// `snapshot/<name>.json` artifact is written and embedded in the configure artifact. A failed
/// restore fails the container: its lib is not configured on top of empty data.
pub(super) async fn restore_data(
    inv: &Inventory,
    spec: &ContainerSpec,
    opts: &ConfigureOptions,
    conn: &Connection,
    log: &mut Log,
    part: &mut Partial,
) -> anyhow::Result<()> {
    if spec.snapshot_paths.is_empty() {
        return Ok(());
    }
    let exec = SshExec::new(conn, opts.run_timeout.max(SSH_EXEC_TIMEOUT));
    let sopts = SnapshotOptions { share: inv.settings.share.clone(), keep: None, now: time::OffsetDateTime::now_utc() };
    let Some(r) = crate::snapshot::record::restore_if_empty(spec, &exec, &sopts).await else {
        log.push(&spec.name, "data: paths not empty or no snapshot; nothing restored");
        return Ok(());
    };
    let path = opts.artifacts.snapshot(&spec.name);
    artifact::write(&path, &r).with_context(|| format!("cannot write {}", path.display()))?;
    let failure = match &r.outcome {
        Outcome::Ok => {
            let msg = format!(
                "data: {} were empty; restored snapshot {} ({} entries, verified) from {}",
                r.paths.join(", "),
                r.snapshot_id.as_deref().unwrap_or("?"),
                r.entry_count,
                r.archive.as_ref().map(|a| a.display().to_string()).unwrap_or_default()
            );
            tracing::info!("{}: {msg}", spec.name);
            log.push(&spec.name, &msg);
            for w in &r.warnings {
                tracing::warn!("{}: {w}", spec.name);
                log.push(&spec.name, &format!("data: warning: {w}"));
            }
            None
        }
        Outcome::Failed { error } => Some(error.clone()),
    };
    part.restore = Some(r);
    if let Some(error) = failure {
        anyhow::bail!(
            "the data paths are empty and a snapshot exists, but restoring it failed: {error}; \
             the lib's configuration was not run (see {})",
            path.display()
        );
    }
    Ok(())
}
