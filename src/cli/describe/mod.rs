//! Human wording of plans: how the CLI (and deploy's log) says what will happen to a container.
//!
//! The plan itself ([`ContainerPlan`]) is plain data in [`crate::model`]; the words a
//! person reads are the CLI's business, so they live here and not in a backend or a step.

pub mod plan;

use crate::model::{Action, ContainerPlan, SettingChange};

/// Appends `markdown` to the job summary when `$GITHUB_STEP_SUMMARY` is set (see
/// [`crate::actions::summary`]) and logs that `what`'s summary was written; a write failure is a
/// warning, never a failed command.
pub fn job_summary(what: &str, markdown: &str) {
    match crate::actions::summary(markdown) {
        Ok(Some(path)) => {
            tracing::info!("job summary: {what} ({} line(s)) appended to {}", markdown.lines().count(), path.display())
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("cannot write the job summary ($GITHUB_STEP_SUMMARY): {e}"),
    }
}

/// One container's line in a job summary table (see [`results_markdown`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultRow {
    /// Container (lib) name.
    pub name: String,
    /// vmid.
    pub vmid: u32,
    /// PVE node (`None`: the lxc backend, or not known).
    pub node: Option<String>,
    /// What was done, in words (e.g. `provision: create, start`, `snapshot pgo-…`).
    pub action: String,
    /// False when the container failed.
    pub ok: bool,
    /// Wall time in milliseconds, when measured.
    pub duration_ms: Option<u64>,
    /// The error, for a failed container (shown on its first 300 characters).
    pub error: Option<String>,
}

/// The PVE node of container `name` for a summary row: the node its provision artifact records
/// (where it really is), else the `NODE` its lib declares (`spec_node`); `None` for the lxc
/// backend or when neither is known.
pub fn node_of(artifacts: &crate::artifact::ArtifactDir, name: &str, spec_node: Option<&str>) -> Option<String> {
    crate::artifact::read::<crate::model::Provision>(&artifacts.provision(name))
        .ok()
        .and_then(|p| p.node)
        .or_else(|| spec_node.map(str::to_string))
}

/// A job summary block for `what` (e.g. `deploy refs/heads/main (stage main)`): a heading with
/// the count of failed containers and a Markdown table, one row per container — columns
/// container, vmid, node, action, result, duration (seconds, one decimal), error — failed
/// containers first, otherwise in the given order. Every cell goes through
/// [`crate::actions::markdown_cell`], so no user or tool text can break the table.
pub fn results_markdown(what: &str, rows: &[ResultRow]) -> String {
    use crate::actions::markdown_cell as cell;
    let failed = rows.iter().filter(|r| !r.ok).count();
    let mut md = format!(
        "### {}: {}\n\n",
        cell(what),
        match failed {
            0 => format!("{} container(s), all succeeded", rows.len()),
            n => format!("{n} of {} container(s) failed", rows.len()),
        }
    );
    if rows.is_empty() {
        return md;
    }
    md.push_str("| container | vmid | node | action | result | duration | error |\n");
    md.push_str("|---|---|---|---|---|---|---|\n");
    let ordered = rows.iter().filter(|r| !r.ok).chain(rows.iter().filter(|r| r.ok));
    for r in ordered {
        let error = r.error.as_deref().map(|e| {
            let e = e.trim();
            if e.chars().count() > 300 {
                format!("{}…", e.chars().take(299).collect::<String>())
            } else {
                e.to_string()
            }
        });
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            cell(&r.name),
            r.vmid,
            cell(r.node.as_deref().unwrap_or("-")),
            cell(&r.action),
            if r.ok { "ok" } else { "**failed**" },
            r.duration_ms.map(|ms| format!("{:.1}s", ms as f64 / 1000.0)).unwrap_or_else(|| "-".into()),
            cell(error.as_deref().unwrap_or("")),
        ));
    }
    md
}

/// A value of a setting as printed: `(unset)` for none, long values cut to 60 characters with `…`.
fn value(v: Option<&str>) -> String {
    match v {
        None => "(unset)".into(),
        Some(v) if v.chars().count() > 60 => format!("{}…", v.chars().take(59).collect::<String>()),
        Some(v) => v.to_string(),
    }
}

/// One changed setting in the user's terms: `MEMORY 2048 → 1024`, `DISK local-lvm:8 →
/// local-lvm:16 (resize)`, `MOUNT +share` / `MOUNT -/data` (an entry added or removed),
/// `FEATURES nesting → keyctl,nesting (reboot)`, `description (rewritten)`.
pub fn setting_line(c: &SettingChange) -> String {
    let how = c.how.as_deref().map(|h| format!(" ({h})")).unwrap_or_default();
    match (&c.from, &c.to) {
        (None, None) => format!("{} (rewritten){how}", c.setting),
        (None, Some(to)) if c.setting == "MOUNT" => format!("MOUNT +{to}{how}"),
        (Some(from), None) if c.setting == "MOUNT" => format!("MOUNT -{from}{how}"),
        (from, to) => format!("{} {} → {}{how}", c.setting, value(from.as_deref()), value(to.as_deref())),
    }
}

/// The changed settings joined with `, ` (empty when none).
pub fn setting_lines(changes: &[SettingChange]) -> String {
    changes.iter().map(setting_line).collect::<Vec<_>>().join(", ")
}

/// The action in a word or two: `create`, `update in place`, `recreate`, `nothing`, `refused`,
/// `adopt`, `foreign`.
pub fn action_word(action: &Action) -> &'static str {
    match action {
        Action::Create => "create",
        Action::Update { .. } => "update in place",
        Action::Recreate { .. } => "recreate",
        Action::Nothing => "nothing",
        Action::Refused { .. } => "refused",
        Action::Adopt { .. } => "adopt",
        Action::Foreign { .. } => "foreign",
    }
}

/// The action of a whole plan in a few words: [`action_word`], with `migrate` in front when the
/// container moves to another node first (`migrate`, `migrate + update in place`); a recreate
/// on another node stays `recreate`.
pub fn plan_word(plan: &ContainerPlan) -> String {
    match (&plan.migrate, &plan.action) {
        (Some(_), Action::Nothing) => "migrate".into(),
        (Some(_), Action::Update { .. }) => format!("migrate + {}", action_word(&plan.action)),
        _ => action_word(&plan.action).into(),
    }
}

/// One line of a printed plan: what will happen to the container, e.g. `create`, `nothing`,
/// `update cores=2 resize rootfs 8→16 GiB (reboot needed)`, `RECREATE: <reasons>` or
/// `refused (needs --allow-recreate): <reasons>` (or `refused: <reasons>` when no recreate would
/// help, e.g. a volume shrink), prefixed by `migrate pve1 → pve2 (restart), then ` when the
/// container moves first, and followed by ` on NODE (placed: …)` for a placed new container.
/// Long values and `description` print as `…`.
pub fn describe(plan: &ContainerPlan) -> String {
    let what = describe_action(plan);
    let what = match (&plan.migrate, &plan.action) {
        (Some(m), Action::Nothing) => {
            format!("migrate {} → {}{}", m.from, m.to, if m.restart { " (restart)" } else { "" })
        }
        (Some(m), Action::Update { .. }) => {
            format!("migrate {} → {}{}, then {what}", m.from, m.to, if m.restart { " (restart)" } else { "" })
        }
        (Some(m), Action::Recreate { .. }) => format!("{what} (destroyed on {}, created on {})", m.from, m.to),
        _ => what,
    };
    match (&plan.placement, &plan.node) {
        (Some(why), Some(node)) => format!("{what} on {node} ({why})"),
        _ => what,
    }
}

fn describe_action(plan: &ContainerPlan) -> String {
    match &plan.action {
        Action::Create => "create".into(),
        Action::Nothing => "nothing".into(),
        Action::Update { changes, resizes, reboot_needed } | Action::Adopt { changes, resizes, reboot_needed } => {
            let mut parts: Vec<String> = changes
                .iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c.key,
                        match &c.to {
                            Some(v) if c.key == "description" || v.len() > 40 => "…".to_string(),
                            Some(v) => v.clone(),
                            None => "(delete)".into(),
                        }
                    )
                })
                .collect();
            parts.extend(resizes.iter().map(|r| format!("resize {} {}→{} GiB", r.disk, r.from_gib, r.to_gib)));
            let word = if matches!(plan.action, Action::Adopt { .. }) { "adopt, then update" } else { "update" };
            format!("{word} {}{}", parts.join(" "), if *reboot_needed { " (reboot needed)" } else { "" })
        }
        Action::Foreign { reason } => format!("foreign (not touched; --adopt takes it over): {reason}"),
        Action::Recreate { reasons } => format!("RECREATE: {}", reasons.join("; ")),
        Action::Refused { reasons, needs_recreate: true } => {
            format!("refused (needs --allow-recreate): {}", reasons.join("; "))
        }
        Action::Refused { reasons, needs_recreate: false } => format!("refused: {}", reasons.join("; ")),
    }
}

/// The file names of installed workflows, comma-separated (`-` for none), for the tables.
pub fn workflow_names(files: &[std::path::PathBuf]) -> String {
    if files.is_empty() {
        return "-".into();
    }
    files.iter().map(|f| f.file_name().unwrap_or(f.as_os_str()).to_string_lossy()).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Change, Resize};

    #[test]
    fn settings_in_the_users_terms() {
        let c = |s: &str, from: Option<&str>, to: Option<&str>| {
            SettingChange::new(s, from.map(Into::into), to.map(Into::into))
        };
        assert_eq!(setting_line(&c("MEMORY", Some("2048"), Some("1024"))), "MEMORY 2048 → 1024");
        assert_eq!(
            setting_line(&c("DISK", Some("local-lvm:8"), Some("local-lvm:16")).how("resize")),
            "DISK local-lvm:8 → local-lvm:16 (resize)"
        );
        assert_eq!(setting_line(&c("MOUNT", None, Some("share"))), "MOUNT +share");
        assert_eq!(setting_line(&c("MOUNT", Some("/data"), None).how("reboot")), "MOUNT -/data (reboot)");
        assert_eq!(setting_line(&c("CORES", Some("1"), Some("2"))), "CORES 1 → 2");
        assert_eq!(setting_line(&c("FEATURES", None, Some("nesting"))), "FEATURES (unset) → nesting");
        assert_eq!(setting_line(&c("description", None, None)), "description (rewritten)");
        let long = "x".repeat(80);
        assert_eq!(setting_line(&c("IP", Some(&long), Some("dhcp"))), format!("IP {}… → dhcp", "x".repeat(59)));
        assert_eq!(
            setting_lines(&[c("CORES", Some("1"), Some("2")), c("MEMORY", Some("512"), Some("1024"))]),
            "CORES 1 → 2, MEMORY 512 → 1024"
        );
    }

    #[test]
    fn result_table_puts_failures_first_and_escapes_cells() {
        let row = |name: &str, ok: bool, error: Option<&str>| ResultRow {
            name: name.into(),
            vmid: 101,
            node: Some("pve1".into()),
            action: "provision: create, start".into(),
            ok,
            duration_ms: Some(1300),
            error: error.map(Into::into),
        };
        let mut beta = row("beta", false, Some("exit 1: a|b\n<script>"));
        beta.vmid = 102;
        beta.node = None;
        beta.duration_ms = None;
        let md = results_markdown("deploy refs/heads/main (stage main)", &[row("alpha", true, None), beta]);
        assert_eq!(
            md,
            "### deploy refs/heads/main (stage main): 1 of 2 container(s) failed\n\n\
             | container | vmid | node | action | result | duration | error |\n\
             |---|---|---|---|---|---|---|\n\
             | beta | 102 | - | provision: create, start | **failed** | - | exit 1: a\\|b &lt;script&gt; |\n\
             | alpha | 101 | pve1 | provision: create, start | ok | 1.3s |   |\n"
        );
        let ok = results_markdown("configure", &[row("alpha", true, None)]);
        assert!(ok.starts_with("### configure: 1 container(s), all succeeded\n\n| container |"), "{ok}");
        assert_eq!(results_markdown("snapshot", &[]), "### snapshot: 0 container(s), all succeeded\n\n");
        let long = results_markdown("x", &[row("a", false, Some(&"e".repeat(400)))]);
        assert!(long.contains(&format!("| {}… |", "e".repeat(299))), "{long}");
    }

    fn plan(action: Action) -> ContainerPlan {
        ContainerPlan {
            name: "app".into(),
            vmid: 101,
            hostname: "app".into(),
            action,
            start: true,
            node: None,
            placement: None,
            migrate: None,
            policy: crate::model::RecreatePolicy::Never,
            reboot_for_pending: false,
        }
    }

    #[test]
    fn every_action_in_one_line() {
        assert_eq!(describe(&plan(Action::Create)), "create");
        assert_eq!(describe(&plan(Action::Nothing)), "nothing");
        let change = |key: &str, to: Option<&str>| Change { key: key.into(), from: None, to: to.map(Into::into) };
        let update = Action::Update {
            changes: vec![change("cores", Some("2")), change("description", Some("x")), change("mp0", None)],
            resizes: vec![Resize { disk: "rootfs".into(), from_gib: 8, to_gib: 16 }],
            reboot_needed: true,
        };
        assert_eq!(
            describe(&plan(update)),
            "update cores=2 description=… mp0=(delete) resize rootfs 8→16 GiB (reboot needed)"
        );
        assert_eq!(describe(&plan(Action::Recreate { reasons: vec!["a".into(), "b".into()] })), "RECREATE: a; b");
        assert_eq!(
            describe(&plan(Action::refused_recreate(vec!["template".into()]))),
            "refused (needs --allow-recreate): template"
        );
        assert_eq!(describe(&plan(Action::refused_blocked(vec!["shrink".into()]))), "refused: shrink");
    }

    #[test]
    fn a_migration_comes_first_and_a_placement_names_the_node() {
        use crate::model::Migration;
        let mut p = plan(Action::Nothing);
        p.migrate = Some(Migration { from: "pve1".into(), to: "pve2".into(), restart: true });
        assert_eq!(describe(&p), "migrate pve1 → pve2 (restart)");
        assert_eq!(plan_word(&p), "migrate");
        p.action = Action::Update {
            changes: vec![Change { key: "cores".into(), from: None, to: Some("2".into()) }],
            resizes: vec![],
            reboot_needed: false,
        };
        p.migrate.as_mut().unwrap().restart = false;
        assert_eq!(describe(&p), "migrate pve1 → pve2, then update cores=2");
        assert_eq!(plan_word(&p), "migrate + update in place");
        let mut c = plan(Action::Create);
        c.node = Some("pve2".into());
        c.placement = Some("NODE=auto: most free memory".into());
        assert_eq!(describe(&c), "create on pve2 (NODE=auto: most free memory)");
    }
}
