//! The plan in words: the table `plan` prints, and the job summary `plan` and `release-pr`
//! write (with the reason when only the desired side is known, `Offline`).

use crate::cli::table_of;
use crate::model::Action;
use crate::steps::plan::{Plan, PlannedContainer, Step};

/// The PROVISION cell of a container: the action in a word or two, `cannot plan: …`, `-` when
/// unknown, empty when the ref does not provision.
fn provision_cell(c: &PlannedContainer) -> String {
    match (&c.provision, &c.provision_error) {
        (Some(cp), _) => match &cp.action {
            Action::Update { .. } => super::plan_word(cp),
            Action::Nothing if cp.migrate.is_some() => super::plan_word(cp),
            Action::Adopt { .. } => super::action_word(&cp.action).to_string(),
            _ => super::describe(cp),
        },
        (None, Some(e)) => format!("cannot plan: {}", e.lines().next().unwrap_or("")),
        (None, None) if c.steps.contains(&Step::Provision) => "-".into(),
        (None, None) => String::new(),
    }
}

/// What deploy does for `c`, e.g. `provision + configure`, `skip (already succeeded)`,
/// `configure (provision skipped)`.
fn deploy_cell(c: &PlannedContainer) -> String {
    let run = c.steps_to_run();
    let joined = |s: &[Step]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" + ");
    match (run.is_empty(), c.skipped_steps.is_empty()) {
        (true, _) => "skip (already succeeded)".into(),
        (false, true) => joined(&run),
        (false, false) => format!("{} ({} skipped)", joined(&run), joined(&c.skipped_steps)),
    }
}

/// The human summary of `p`: a table (NAME, HOSTNAME, VMID, STEPS, PROVISION), then per
/// container with changed settings one line per setting in the user's terms (`  MEMORY 2048 →
/// 1024`), the containers deploy would skip, the count line and the container count. `offline`
/// is why no live state was read; the PROVISION column then shows `-` for provisioning
/// containers and the last lines explain it.
pub(crate) fn human(p: &Plan, offline: Option<&Offline>) -> String {
    let mut s = table_of(&["NAME", "HOSTNAME", "VMID", "STEPS", "PROVISION"], &p.containers, |c| {
        vec![
            c.name.clone(),
            c.hostname.clone(),
            c.vmid.to_string(),
            c.steps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" + "),
            provision_cell(c),
        ]
    });
    let changed: Vec<&PlannedContainer> = p.containers.iter().filter(|c| !c.settings.is_empty()).collect();
    if !changed.is_empty() {
        s.push('\n');
        for c in changed {
            let reboot =
                matches!(&c.provision, Some(cp) if matches!(cp.action, Action::Update { reboot_needed: true, .. }));
            let word = c.provision.as_ref().map_or_else(|| "update in place".to_string(), super::plan_word);
            s.push_str(&format!(
                "{} (vmid {}): {word}{}\n",
                c.name,
                c.vmid,
                if reboot { ", reboot needed" } else { "" }
            ));
            for line in c.settings.iter().map(super::setting_line) {
                s.push_str(&format!("  {line}\n"));
            }
        }
    }
    let skipping: Vec<String> = p
        .containers
        .iter()
        .filter(|c| !c.skipped_steps.is_empty())
        .map(|c| {
            format!("{} ({})", c.name, c.skipped_steps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))
        })
        .collect();
    s.push('\n');
    if !skipping.is_empty() {
        s.push_str(&format!(
            "deploy skips (already succeeded for the same inputs; --force runs them): {}\n",
            skipping.join(", ")
        ));
    }
    if let Some(line) = p.count_line() {
        s.push_str(&format!("{line}\n"));
    }
    s.push_str(&format!("{} container(s) for {} (stage {})\n", p.containers.len(), p.git_ref, p.stage));
    if let Some(o) = offline {
        s.push_str("only the desired side is known: no live state was read");
        if o.no_host {
            s.push_str(&format!(
                " (set {} for PVE, or pass --backend lxc)",
                crate::settings::setting_names("PROXMOX_HOST")
            ));
        }
        s.push('\n');
        s.push_str(&format!(
            "provision actions: not computed (offline plan: {}; run `{}` to compare with the live {})\n",
            o.why,
            o.dry_run_command(),
            if o.lxc { "containers, where they run" } else { "host" }
        ));
    }
    s
}

/// Why a plan has no live state, and what to run to get it.
#[derive(Debug, Clone)]
pub(crate) struct Offline {
    /// The reason, e.g. `--offline`, `no PVE host (…)`, `the lxc backend cannot be used here: …`.
    pub(crate) why: String,
    /// The reason is a missing PVE host: the hint says how to set one.
    pub(crate) no_host: bool,
    /// The plan was for the lxc backend.
    pub(crate) lxc: bool,
    /// The containers the user selected (`-c`), as given; empty: all.
    pub(crate) containers: Vec<String>,
}

impl Offline {
    /// The `provision --dry-run` that compares the same selection with the live state:
    /// `proxmox-gitops provision --all --dry-run`, `… -c broker,dns --dry-run`, with
    /// `--backend lxc` for a plan of the lxc backend.
    fn dry_run_command(&self) -> String {
        let selection =
            if self.containers.is_empty() { "--all".to_string() } else { format!("-c {}", self.containers.join(",")) };
        let backend = if self.lxc { " --backend lxc" } else { "" };
        format!("proxmox-gitops provision {selection}{backend} --dry-run")
    }
}

/// The job summary of `p`: a heading, the count line, and a table with one row per container
/// (containers that cannot be planned or are refused first, with the error): container, vmid,
/// node (`node_of(name)`, the spec's `NODE`), action, old → new, deploy. `offline` says only
/// the desired side is known.
pub(crate) fn markdown(p: &Plan, node_of: &dyn Fn(&str) -> String, offline: Option<&Offline>) -> String {
    use crate::actions::markdown_cell as cell;
    let mut s = format!("### Plan: `{}` (stage {})\n\n", cell(&p.git_ref), cell(&p.stage));
    if let Some(line) = p.count_line() {
        s.push_str(&format!("{line}\n\n"));
    }
    if let Some(o) = offline {
        s.push_str(&format!(
            "Only the desired side is known: no live state was read ({}); `{}` compares with the live state.\n\n",
            cell(&o.why),
            cell(&o.dry_run_command())
        ));
    }
    s.push_str("| Container | VMID | Node | Action | Old → new | Deploy |\n|---|---|---|---|---|---|\n");
    let failing = |c: &&PlannedContainer| {
        c.provision_error.is_some()
            || matches!(&c.provision, Some(cp) if matches!(cp.action, Action::Refused { .. } | Action::Foreign { .. }))
    };
    let (first, rest): (Vec<&PlannedContainer>, Vec<&PlannedContainer>) = p.containers.iter().partition(failing);
    for c in first.into_iter().chain(rest) {
        // The plan's node (where NODE=auto placed it, or where it was found), else the spec's.
        let node = c.provision.as_ref().and_then(|cp| cp.node.clone()).unwrap_or_else(|| node_of(&c.name));
        let (action, old_new) = match (&c.provision, &c.provision_error) {
            (Some(cp), _) => (
                super::plan_word(cp),
                match (&cp.action, &cp.placement) {
                    (Action::Recreate { reasons } | Action::Refused { reasons, .. }, _) => reasons.join("; "),
                    (Action::Create, Some(why)) => why.clone(),
                    (Action::Foreign { reason }, _) => reason.clone(),
                    _ => super::setting_lines(&c.settings),
                },
            ),
            (None, Some(e)) => ("**cannot plan**".to_string(), e.clone()),
            (None, None) if c.steps.contains(&Step::Provision) => ("unknown".into(), String::new()),
            (None, None) => (String::new(), String::new()),
        };
        let action = if action.starts_with("**") { action } else { cell(&action) };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            cell(&c.name),
            c.vmid,
            cell(&node),
            action,
            cell(&old_new),
            cell(&deploy_cell(c))
        ));
    }
    s
}

/// Why a plan is offline when no PVE host is configured, naming where it is set.
pub(crate) fn no_pve_host() -> String {
    format!("no PVE host ({})", crate::settings::setting_names("PROXMOX_HOST"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BackendKind;
    use crate::model::{ContainerPlan, SettingChange};

    fn container(name: &str, vmid: u32, steps: Vec<Step>) -> PlannedContainer {
        PlannedContainer {
            name: name.into(),
            hostname: name.into(),
            vmid,
            steps,
            provision: None,
            provision_error: None,
            settings: vec![],
            inputs_digest: None,
            skipped_steps: vec![],
            config_digest: None,
        }
    }

    fn plan(steps: Vec<Step>) -> Plan {
        Plan {
            git_ref: "refs/heads/release".into(),
            stage: "main".into(),
            containers: vec![container("broker", 101, steps)],
            backend: None,
            recreate: None,
        }
    }

    fn planned(name: &str, vmid: u32, action: Action) -> PlannedContainer {
        PlannedContainer {
            provision: Some(ContainerPlan::new(name, vmid, name, action, false)),
            ..container(name, vmid, vec![Step::Provision, Step::Configure])
        }
    }

    #[test]
    fn offline_plan_says_why_provision_is_empty() {
        assert_eq!(
            human(
                &plan(vec![Step::Provision, Step::Configure]),
                Some(&Offline { why: no_pve_host(), no_host: true, lxc: false, containers: vec![] })
            ),
            "NAME    HOSTNAME  VMID  STEPS                  PROVISION\n\
             broker  broker    101   provision + configure  -\n\
             \n\
             0 to create, 0 to update in place, 0 to recreate, 0 unchanged, 1 unknown (no live state); 1 to \
             configure\n\
             1 container(s) for refs/heads/release (stage main)\n\
             only the desired side is known: no live state was read (set PROXMOX_HOST or proxmox.host in \
             local/config.json for PVE, or pass --backend lxc)\n\
             provision actions: not computed (offline plan: no PVE host (PROXMOX_HOST or proxmox.host in local/config.json); run `proxmox-gitops provision \
             --all --dry-run` to compare with the live host)\n"
        );
        // The hint keeps the selection and the backend; the host hint only when the host is missing.
        let hint = |o: Offline| {
            human(&plan(vec![Step::Provision]), Some(&o)).lines().skip(5).map(String::from).collect::<Vec<_>>()
        };
        assert_eq!(
            hint(Offline { why: "--offline".into(), no_host: false, lxc: false, containers: vec!["broker".into()] }),
            vec![
                "only the desired side is known: no live state was read",
                "provision actions: not computed (offline plan: --offline; run `proxmox-gitops provision -c broker \
                 --dry-run` to compare with the live host)"
            ]
        );
        assert_eq!(
            hint(Offline {
                why: "the lxc backend cannot be used here: not root".into(),
                no_host: false,
                lxc: true,
                containers: vec!["broker".into(), "dns".into()]
            }),
            vec![
                "only the desired side is known: no live state was read",
                "provision actions: not computed (offline plan: the lxc backend cannot be used here: not root; run \
                 `proxmox-gitops provision -c broker,dns --backend lxc --dry-run` to compare with the live containers, \
                 where they run)"
            ]
        );
        // A ref without provision has nothing to explain.
        assert_eq!(
            human(&plan(vec![Step::Configure]), None),
            "NAME    HOSTNAME  VMID  STEPS      PROVISION\n\
             broker  broker    101   configure\n\
             \n\
             1 to configure\n\
             1 container(s) for refs/heads/release (stage main)\n"
        );
    }

    fn mixed() -> Plan {
        let mut update =
            planned("broker", 101, Action::Update { changes: vec![], resizes: vec![], reboot_needed: false });
        update.settings = vec![
            SettingChange::new("MEMORY", Some("2048".into()), Some("1024".into())),
            SettingChange::new("DISK", Some("local-lvm:8".into()), Some("local-lvm:16".into())).how("resize"),
        ];
        let mut done = planned("dns", 140, Action::Nothing);
        done.skipped_steps = vec![Step::Provision, Step::Configure];
        let mut failed = container("web", 130, vec![Step::Provision, Step::Configure]);
        failed.provision_error = Some("cannot read CT 130: 500 boom".into());
        Plan {
            git_ref: "refs/heads/release".into(),
            stage: "main".into(),
            containers: vec![
                update,
                planned("proxy", 110, Action::Create),
                done,
                planned("cache", 120, Action::Recreate { reasons: vec!["ostemplate changes from a to b".into()] }),
                failed,
            ],
            backend: Some(BackendKind::Pve),
            recreate: None,
        }
    }

    #[test]
    fn changed_settings_counts_and_skips() {
        assert_eq!(
            human(&mixed(), None),
            "NAME    HOSTNAME  VMID  STEPS                  PROVISION\n\
             broker  broker    101   provision + configure  update in place\n\
             proxy   proxy     110   provision + configure  create\n\
             dns     dns       140   provision + configure  nothing\n\
             cache   cache     120   provision + configure  RECREATE: ostemplate changes from a to b\n\
             web     web       130   provision + configure  cannot plan: cannot read CT 130: 500 boom\n\
             \n\
             broker (vmid 101): update in place\n\
             \x20 MEMORY 2048 → 1024\n\
             \x20 DISK local-lvm:8 → local-lvm:16 (resize)\n\
             \n\
             deploy skips (already succeeded for the same inputs; --force runs them): dns (provision, configure)\n\
             1 to create, 1 to update in place, 1 to recreate, 0 unchanged, 1 cannot be planned, 1 skipped (already \
             provisioned for the same inputs); 4 to configure\n\
             5 container(s) for refs/heads/release (stage main)\n"
        );
    }

    #[test]
    fn summary_table_failures_first() {
        assert_eq!(
            markdown(&mixed(), &|_| String::new(), None),
            "### Plan: `refs/heads/release` (stage main)\n\
             \n\
             1 to create, 1 to update in place, 1 to recreate, 0 unchanged, 1 cannot be planned, 1 skipped (already \
             provisioned for the same inputs); 4 to configure\n\
             \n\
             | Container | VMID | Node | Action | Old → new | Deploy |\n\
             |---|---|---|---|---|---|\n\
             | web | 130 |   | **cannot plan** | cannot read CT 130: 500 boom | provision + configure |\n\
             | broker | 101 |   | update in place | MEMORY 2048 → 1024, DISK local-lvm:8 → local-lvm:16 (resize) | \
             provision + configure |\n\
             | proxy | 110 |   | create |   | provision + configure |\n\
             | dns | 140 |   | nothing |   | skip (already succeeded) |\n\
             | cache | 120 |   | recreate | ostemplate changes from a to b | provision + configure |\n"
        );
    }

    /// Issue 28: after a provision, before configure, the plan is pending (exit 2 with
    /// `--detailed-exitcode`) and the count line and the summary say why.
    #[test]
    fn the_count_line_names_every_pending_step() {
        let mut provisioned = planned("broker", 101, Action::Nothing);
        let p = Plan { containers: vec![provisioned.clone()], ..plan(vec![]) };
        assert!(p.changes_pending());
        let line = "0 to create, 0 to update in place, 0 to recreate, 1 unchanged; 1 to configure";
        assert_eq!(p.count_line().as_deref(), Some(line));
        assert!(human(&p, None).contains(&format!("\n{line}\n")), "{}", human(&p, None));
        assert!(markdown(&p, &|_| String::new(), None).contains(&format!("\n{line}\n")));
        // A stopped container would be started; a snapshot step would run.
        provisioned.provision.as_mut().unwrap().start = true;
        provisioned.steps.push(Step::Snapshot);
        let p = Plan { containers: vec![provisioned.clone()], ..plan(vec![]) };
        assert_eq!(
            p.count_line().as_deref(),
            Some(
                "0 to create, 0 to update in place, 0 to recreate, 1 unchanged; 1 to start, 1 to configure, 1 to snapshot"
            )
        );
        // Nothing pending: the line says so by naming no step, and nothing is pending.
        provisioned.provision.as_mut().unwrap().start = false;
        provisioned.skipped_steps = vec![Step::Configure, Step::Snapshot];
        let p = Plan { containers: vec![provisioned], ..plan(vec![]) };
        assert!(!p.changes_pending());
        assert_eq!(p.count_line().as_deref(), Some("0 to create, 0 to update in place, 0 to recreate, 1 unchanged"));
    }

    #[test]
    fn pending_changes() {
        assert!(mixed().changes_pending());
        let mut done = planned("dns", 140, Action::Nothing);
        done.skipped_steps = vec![Step::Configure];
        let p = Plan { containers: vec![done.clone()], ..plan(vec![]) };
        assert!(!p.changes_pending(), "nothing to provision, configure already done");
        done.provision.as_mut().unwrap().start = true;
        let p = Plan { containers: vec![done.clone()], ..plan(vec![]) };
        assert!(p.changes_pending(), "a stopped container would be started");
        let p = Plan { containers: vec![container("x", 1, vec![Step::Provision])], ..plan(vec![]) };
        assert!(p.changes_pending(), "unknown live state counts as pending");
    }

    #[test]
    fn a_migration_and_a_placement_show_in_the_table_the_count_line_and_the_summary() {
        use crate::model::Migration;
        let mut moved = planned("broker", 101, Action::Nothing);
        let cp = moved.provision.as_mut().unwrap();
        cp.node = Some("pve2".into());
        cp.migrate = Some(Migration { from: "pve1".into(), to: "pve2".into(), restart: true });
        moved.settings =
            vec![SettingChange::new("NODE", Some("pve1".into()), Some("pve2".into())).how("migrate, restart")];
        let mut placed = planned("proxy", 110, Action::Create);
        let cp = placed.provision.as_mut().unwrap();
        cp.node = Some("pve1".into());
        cp.placement =
            Some("NODE=auto: most free memory (6.0 GiB) of the online nodes with storage local: pve1 6.0 GiB".into());
        let p = Plan {
            git_ref: "refs/heads/release".into(),
            stage: "main".into(),
            containers: vec![moved, placed],
            backend: Some(BackendKind::Pve),
            recreate: None,
        };
        assert_eq!(p.counts().line(), "1 to create, 0 to update in place, 0 to recreate, 1 to migrate, 0 unchanged");
        assert!(p.changes_pending());
        let h = human(&p, None);
        assert!(h.contains("broker  broker    101   provision + configure  migrate\n"), "{h}");
        assert!(h.contains("create on pve1 (NODE=auto: most free memory (6.0 GiB)"), "{h}");
        assert!(h.contains("broker (vmid 101): migrate\n  NODE pve1 → pve2 (migrate, restart)\n"), "{h}");
        let md = markdown(&p, &|_| String::new(), None);
        assert!(md.contains("| broker | 101 | pve2 | migrate | NODE pve1 → pve2 (migrate, restart) |"), "{md}");
        assert!(md.contains("| proxy | 110 | pve1 | create | NODE=auto: most free memory"), "{md}");
    }
}
