//! Human wording of plans: how the CLI (and deploy's log) says what will happen to a container.
//!
//! The plan itself ([`ContainerPlan`]) is plain data in [`crate::backend::model`]; the words a
//! person reads are the CLI's business, so they live here and not in a backend or a step.

use crate::backend::model::{Action, ContainerPlan, SettingChange};

/// Appends `markdown` to the job summary when `$GITHUB_STEP_SUMMARY` is set (see
/// [`crate::actions::summary`]) and logs that `what`'s summary was written; a write failure is a
/// warning, never a failed command.
pub fn job_summary(what: &str, markdown: &str) {
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) else { return };
    match crate::actions::summary(markdown) {
        Ok(()) => tracing::info!(
            "job summary: {what} ({} line(s)) appended to {}",
            markdown.lines().count(),
            std::path::Path::new(&path).display()
        ),
        Err(e) => tracing::warn!("cannot write the job summary {}: {e}", std::path::Path::new(&path).display()),
    }
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

/// The action in a word or two: `create`, `update in place`, `recreate`, `nothing`, `refused`.
pub fn action_word(action: &Action) -> &'static str {
    match action {
        Action::Create => "create",
        Action::Update { .. } => "update in place",
        Action::Recreate { .. } => "recreate",
        Action::Nothing => "nothing",
        Action::Refused { .. } => "refused",
    }
}

/// One line of a printed plan: what will happen to the container, e.g. `create`, `nothing`,
/// `update cores=2 resize rootfs 8→16 GiB (reboot needed)`, `RECREATE: <reasons>` or
/// `refused (needs --allow-recreate): <reasons>`. Long values and `description` print as `…`.
pub fn describe(plan: &ContainerPlan) -> String {
    match &plan.action {
        Action::Create => "create".into(),
        Action::Nothing => "nothing".into(),
        Action::Update { changes, resizes, reboot_needed } => {
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
            format!("update {}{}", parts.join(" "), if *reboot_needed { " (reboot needed)" } else { "" })
        }
        Action::Recreate { reasons } => format!("RECREATE: {}", reasons.join("; ")),
        Action::Refused { reasons } => format!("refused (needs --allow-recreate): {}", reasons.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::model::{Change, Resize};

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

    fn plan(action: Action) -> ContainerPlan {
        ContainerPlan { name: "app".into(), vmid: 101, hostname: "app".into(), action, start: true }
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
            describe(&plan(Action::Refused { reasons: vec!["shrink".into()] })),
            "refused (needs --allow-recreate): shrink"
        );
    }
}
