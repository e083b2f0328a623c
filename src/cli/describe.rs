//! Human wording of plans: how the CLI (and deploy's log) says what will happen to a container.
//!
//! The plan itself ([`ContainerPlan`]) is plain data in [`crate::backend::model`]; the words a
//! person reads are the CLI's business, so they live here and not in a backend or a step.

use crate::backend::model::{Action, ContainerPlan};

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
