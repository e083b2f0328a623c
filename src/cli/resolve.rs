//! `proxmox-gitops resolve`: the monorepo → `inventory.json`.

use clap::Args;

use super::{Ctx, table_of};
use crate::artifact;
use crate::error::{Error, Result};
use crate::inventory::{IpConfig, Mount};
use crate::steps::resolve::{ResolveOptions, resolve};

/// Arguments of `resolve` (the global `--repo`, `--stage`, `--artifacts` apply).
#[derive(Debug, Args)]
pub struct ResolveArgs {}

pub fn run(ctx: &Ctx, _args: ResolveArgs) -> Result<()> {
    let inv =
        resolve(&ResolveOptions { repo: ctx.repo.clone(), stage: ctx.stage.clone() }, &crate::settings::ProcessEnv)?;
    let path = ctx.artifacts.inventory();
    artifact::write(&path, &inv).map_err(|e| Error::Failed(e.into()))?;
    let names: Vec<&str> = inv.containers.iter().map(|c| c.name.as_str()).collect();
    super::run::outputs(&[
        ("artifact", path.display().to_string()),
        ("inventory", path.display().to_string()),
        ("stage", inv.stage.clone()),
        ("containers", names.join(",")),
        // For `strategy.matrix` (`fromJSON(needs.resolve.outputs.containers_json)`).
        ("containers_json", serde_json::to_string(&names).expect("strings serialize")),
    ])?;
    ctx.emit(&inv, || {
        let mut s = table_of(
            &["NAME", "HOSTNAME", "VMID", "IP", "CORES", "MEMORY", "ROOTFS", "MOUNTS", "ENGINE", "SOURCE"],
            &inv.containers,
            |c| {
                vec![
                    c.name.clone(),
                    c.hostname.clone(),
                    c.vmid.to_string(),
                    match c.ip {
                        IpConfig::Dhcp => "dhcp".into(),
                        IpConfig::Static { address, prefix: Some(p) } => format!("{address}/{p}"),
                        IpConfig::Static { address, prefix: None } => address.to_string(),
                    },
                    c.cores.to_string(),
                    format!("{} MiB", c.memory_mib),
                    format!("{}:{} GiB", c.rootfs.storage, c.rootfs.size_gib),
                    c.mounts
                        .iter()
                        .map(|m| match m {
                            Mount::Share { name } => name.clone(),
                            Mount::Bind { container_path, .. } => format!("bind:{container_path}"),
                            Mount::Volume { container_path, .. } => format!("vol:{container_path}"),
                            Mount::Device { path } => path.clone(),
                        })
                        .collect::<Vec<_>>()
                        .join(","),
                    format!("{:?}", c.engine).to_lowercase(),
                    if c.submodule.is_some() { "submodule".into() } else { "dir".into() },
                ]
            },
        );
        if !inv.configs.is_empty() {
            // Configuration that is no container: listed so that it is never silently ignored.
            s.push('\n');
            s.push_str(&table_of(&["CONFIGURATION", "DIR", "ENGINE", "SOURCE", "APPLIED"], &inv.configs, |c| {
                vec![
                    c.name.clone(),
                    c.dir.display().to_string(),
                    format!("{:?}", c.engine).to_lowercase(),
                    if c.submodule.is_some() { "submodule".into() } else { "dir".into() },
                    match c.depends.as_slice() {
                        [] => "no (provisioned nowhere)".into(),
                        d => format!("no (provisioned nowhere; the original applies it to {})", d.join(", ")),
                    },
                ]
            }));
        }
        if !inv.tasks.is_empty() {
            // The tasks and when they run (a task without a cron line runs on dispatch and on a
            // push to its repository's `main`).
            s.push('\n');
            s.push_str(&table_of(&["TASK", "SCRIPT", "SCHEDULE"], &inv.tasks, |t| {
                vec![
                    t.name.clone(),
                    t.script.display().to_string(),
                    t.cron.clone().unwrap_or_else(|| "none (dispatch, push to main)".into()),
                ]
            }));
        }
        let configs = match inv.configs.len() {
            0 => String::new(),
            n => format!(", {n} configuration(s) not applied"),
        };
        s.push_str(&format!(
            "\n{} container(s){configs}, {} task(s), stage {}; wrote {}\n",
            inv.containers.len(),
            inv.tasks.len(),
            inv.stage,
            path.display()
        ));
        s
    });
    Ok(())
}
