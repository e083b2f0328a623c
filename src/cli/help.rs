//! How `--help` (and so the man pages, which render the same command) is laid out: options
//! grouped under headings, and examples per subcommand. Applied to the whole command tree in one
//! place, [`super::command`], by argument id, so every subcommand that takes an option shows it
//! under the same heading.

/// The heading of an option by its argument id (the field name); `None`: clap's `Options`.
///
/// * `Selection` — which containers (and which saved plan or inventory artifact) a run covers;
/// * `Recreate policy` — when a container may be destroyed, and the snapshot rule before it;
/// * `SSH` — waiting for and connecting over SSH;
/// * `PVE connection` — how the PVE API's certificate is trusted, and how long one API
///   request may take (`--timeout-read`, `--timeout-write`);
/// * `PVE task timeouts` — how long PVE tasks may take (seconds);
/// * `Global options` — the options every subcommand takes (`--repo`, `--stage`, `--json` …).
pub(crate) fn heading(id: &str) -> Option<&'static str> {
    Some(match id {
        "containers" | "all" | "inventory" | "saved_plan" => "Selection",
        "allow_recreate" | "recreate" | "no_snapshot" => "Recreate policy",
        "no_wait_ssh" | "ssh_port" | "ssh_timeout" | "connect_budget" | "connect_timeout" => "SSH",
        "pve_ca" | "pve_fingerprint" | "insecure" | "timeout_read" | "timeout_write" => "PVE connection",
        id if id.starts_with("timeout_") => "PVE task timeouts",
        "repo" | "artifacts" | "stage" | "json" | "verbose" | "quiet" => "Global options",
        _ => return None,
    })
}

/// Examples shown after the options of each main subcommand (`-h` and `--help`), by subcommand
/// path (`env set` for a nested one).
pub(crate) const EXAMPLES: &[(&str, &str)] = &[
    (
        "plan",
        "proxmox-gitops plan --ref refs/heads/release                 # every container, against PVE (PROXMOX_HOST)\n\
         proxmox-gitops plan -c broker,proxy --detailed-exitcode      # exit 2 when changes are pending\n\
         proxmox-gitops plan --backend lxc --json                     # against the local LXC containers, as JSON",
    ),
    (
        "provision",
        "proxmox-gitops provision --all --dry-run                     # print the plan, change nothing\n\
         proxmox-gitops provision -c broker --allow-recreate          # recreate when a change needs it\n\
         proxmox-gitops provision --plan .proxmox-gitops/plan.json    # apply a saved plan exactly",
    ),
    (
        "deploy",
        "proxmox-gitops deploy --ref refs/heads/release --all         # provision + configure, resumable\n\
         proxmox-gitops deploy --ref refs/heads/main -c broker --force # configure again, even if done\n\
         proxmox-gitops plan --ref refs/heads/release && proxmox-gitops deploy --plan .proxmox-gitops/plan.json",
    ),
    (
        "configure",
        "proxmox-gitops configure --all\n\
         proxmox-gitops configure --check --all                       # only check each lib's REQUIRES",
    ),
    (
        "snapshot",
        "proxmox-gitops snapshot --all --keep 7                       # verified data snapshots, keep 7 per lib\n\
         proxmox-gitops snapshot --list -c broker\n\
         proxmox-gitops snapshot --restore -c broker                  # the newest snapshot back",
    ),
    ("destroy", "proxmox-gitops destroy -c broker                             # a verified data snapshot first"),
    (
        "drift",
        "proxmox-gitops drift --all                                   # differences key by key, exit 0\n\
         proxmox-gitops drift --all --detailed-exitcode               # exit 2 when something drifted",
    ),
    (
        "health",
        "proxmox-gitops health                                        # every container of the stage\n\
         proxmox-gitops health -c broker --json",
    ),
    (
        "update",
        "proxmox-gitops update --all                                  # snapshot, upgrade, reboot, health; rollback on failure",
    ),
    (
        "publish",
        "proxmox-gitops publish                                       # HOST, LOGIN and PASSWORD/GITEA_TOKEN from the settings\n\
         proxmox-gitops publish --no-workflows",
    ),
    (
        "release-pr",
        "proxmox-gitops release-pr --monorepo main/config           # open or update it with the plan of main\n\
         proxmox-gitops release-pr --backend lxc --json",
    ),
    (
        "env",
        "proxmox-gitops env set SHARE /srv/share                      # organization variable of main\n\
         proxmox-gitops env get SHARE --remote --json\n\
         proxmox-gitops env list --gitea-repo main/nginx",
    ),
    ("resolve", "proxmox-gitops resolve --stage dev                           # inventory.json for stage dev"),
];

/// Applies [`heading`] to every argument of `cmd` (not its subcommands).
pub(crate) fn with_headings(cmd: clap::Command) -> clap::Command {
    let ids: Vec<(String, &'static str)> =
        cmd.get_arguments().filter_map(|a| heading(a.get_id().as_str()).map(|h| (a.get_id().to_string(), h))).collect();
    ids.into_iter().fold(cmd, |cmd, (id, h)| cmd.mut_arg(id, |a| a.help_heading(h)))
}

/// Appends the examples of the subcommand at `path` ([`EXAMPLES`]) to its `after_help`, keeping
/// what it had (e.g. `plan`'s exit codes).
pub(crate) fn with_examples(cmd: clap::Command, path: &str) -> clap::Command {
    let Some((_, examples)) = EXAMPLES.iter().find(|(p, _)| *p == path) else { return cmd };
    let indented: Vec<String> = examples.lines().map(|l| format!("  {}", l.trim_start())).collect();
    let text = format!("Examples:\n{}", indented.join("\n"));
    let text = match cmd.get_after_help() {
        Some(before) => format!("{before}\n\n{text}"),
        None => text,
    };
    cmd.after_help(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every example parses with the real command definition: the examples cannot drift from the
    /// options.
    #[test]
    fn every_example_parses() {
        for (path, examples) in EXAMPLES {
            assert!(
                super::super::command().find_subcommand(path.split(' ').next().unwrap()).is_some(),
                "unknown subcommand {path}"
            );
            for line in examples.lines() {
                let code = line.split(" # ").next().unwrap();
                for invocation in code.split("&&") {
                    let argv: Vec<&str> = invocation.split_whitespace().collect();
                    assert_eq!(argv[0], "proxmox-gitops", "{line}");
                    if let Err(e) = super::super::command().try_get_matches_from(&argv) {
                        panic!("example of {path} does not parse: {invocation}\n{e}");
                    }
                }
            }
        }
    }

    #[test]
    fn shared_options_have_the_same_heading_everywhere() {
        let cmd = super::super::command();
        for name in ["plan", "provision", "deploy", "destroy", "snapshot"] {
            let sub = cmd.find_subcommand(name).unwrap();
            for (id, want) in [("containers", "Selection"), ("pve_ca", "PVE connection")] {
                let arg = sub.get_arguments().find(|a| a.get_id() == id).unwrap_or_else(|| panic!("{name} {id}"));
                assert_eq!(arg.get_help_heading(), Some(want), "{name} {id}");
            }
        }
        let deploy = cmd.find_subcommand("deploy").unwrap();
        let heading_of = |id: &str| deploy.get_arguments().find(|a| a.get_id() == id).unwrap().get_help_heading();
        assert_eq!(heading_of("timeout_create"), Some("PVE task timeouts"));
        assert_eq!(heading_of("timeout_read"), Some("PVE connection"));
        assert_eq!(heading_of("timeout_write"), Some("PVE connection"));
        assert_eq!(heading_of("recreate"), Some("Recreate policy"));
        assert_eq!(heading_of("ssh_timeout"), Some("SSH"));
        assert_eq!(heading_of("git_ref"), None);
        let help = deploy.clone().render_long_help().to_string();
        let order: Vec<usize> = [
            "Options:",
            "Selection:",
            "Recreate policy:",
            "SSH:",
            "PVE connection:",
            "PVE task timeouts:",
            "Examples:",
        ]
        .iter()
        .map(|h| help.find(h).unwrap_or_else(|| panic!("{h} missing:\n{help}")))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{help}");
    }
}
