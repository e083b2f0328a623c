//! The `remotes.json` artifact: where each repository of a monorepo lives on Gitea.
//!
//! Written by the `rewrite` step (which builds the working copy whose submodule URLs point at
//! Gitea, with the workflows installed) and read by `publish` (which pushes each repository in [`Remotes::publish_order`]).
//! It lives here, beside the other artifact plumbing, because two steps share it and a step
//! never imports another step.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::artifact::Artifact;

/// The artifact `remotes.json` (kind `remotes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remotes {
    /// The Gitea base URL (no trailing slash, no credentials).
    pub gitea: String,
    /// The organization.
    pub org: String,
    /// The user's checkout the working copy was made from.
    pub source: PathBuf,
    /// The working copy.
    pub workdir: PathBuf,
    /// The monorepo itself.
    pub monorepo: MonorepoRemote,
    /// Every submodule, recursively, parents before children.
    pub modules: Vec<ModuleRemote>,
}

impl Artifact for Remotes {
    const KIND: &'static str = "remotes";
    /// 1.1: `workflows` of the monorepo and of each module.
    const SCHEMA_VERSION: (u32, u32) = (1, 2);
}

/// The monorepo's entry in [`Remotes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonorepoRemote {
    /// Repository name on Gitea.
    pub repo: String,
    /// `<gitea>/<org>/<repo>.git`.
    pub new_url: String,
    /// The checkout's `HEAD`.
    pub source_commit: String,
    /// The working copy's `main` (equal to `source_commit` when nothing was rewritten).
    pub commit: String,
    /// The workflow files `rewrite` installed (relative to the repository: `.gitea/workflows/
    /// pipeline.yml` and `.gitea/workflows/snapshot.yml`), present in `commit`; empty when
    /// rewrite ran with `--no-workflows` (or the artifact predates 1.1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workflows: Vec<PathBuf>,
}

/// One submodule in [`Remotes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleRemote {
    /// Path relative to the monorepo root.
    pub path: PathBuf,
    /// The submodule's name in its parent's `.gitmodules`.
    pub name: String,
    /// Repository name on Gitea.
    pub repo: String,
    /// The URL as written before (`None` for a directory converted to a submodule), recorded
    /// with its credentials redacted.
    pub old_url: Option<crate::remote_url::RemoteUrl>,
    /// `<gitea>/<org>/<repo>.git`.
    pub new_url: String,
    /// The commit the parent recorded before (`None` for a converted directory).
    pub source_commit: Option<String>,
    /// The commit the working copy records now (what is published).
    pub commit: String,
    /// True when the lib was a plain directory and became a submodule.
    pub converted: bool,
    /// The parent submodule's path, `None` for the monorepo.
    pub parent: Option<PathBuf>,
    /// The organization the repository lives in when it is not [`Remotes::org`]: the
    /// monorepo's tasks (`tasks/<name>`) live in [`TASKS_ORG`], as in the seed. `None` for
    /// every other repository (and in artifacts before 1.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The workflow files `rewrite` installed in this repository (relative to it): a lib's
    /// `.gitea/workflows/pipeline.yml`, a task's `.gitea/workflows/task.yml`; empty for other
    /// repositories.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workflows: Vec<PathBuf>,
}

/// The organization of the monorepo's task repositories (the seed's `tasks`).
pub const TASKS_ORG: &str = "tasks";

impl ModuleRemote {
    /// The organization holding this repository: [`ModuleRemote::owner`], else `org` (the
    /// monorepo's).
    pub fn owner_or<'a>(&'a self, org: &'a str) -> &'a str {
        self.owner.as_deref().unwrap_or(org)
    }
}

impl Remotes {
    /// Every repository to publish, once each: modules deepest first, the monorepo last, as
    /// `(organization, repo name, working directory, commit, module path or None for the
    /// monorepo)`.
    ///
    /// One repository at several paths (same name, same content: `rewrite` refuses anything
    /// else) is published from its deepest path, unless another path of it had workflows
    /// installed: that one's commit builds on the others', so it is the one pushed.
    pub fn publish_order(&self) -> Vec<(String, String, PathBuf, String, Option<PathBuf>)> {
        let mut mods: Vec<&ModuleRemote> = self.modules.iter().collect();
        mods.sort_by_key(|m| std::cmp::Reverse(m.path.components().count()));
        let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        let mut out = Vec::new();
        for m in mods {
            let owner = m.owner_or(&self.org).to_string();
            let key = format!("{}/{}", owner.to_lowercase(), m.repo.to_lowercase());
            let entry = (owner, m.repo.clone(), self.workdir.join(&m.path), m.commit.clone(), Some(m.path.clone()));
            match seen.get(&key) {
                None => {
                    seen.insert(key, out.len());
                    out.push(entry);
                }
                Some(&i) if !m.workflows.is_empty() => out[i] = entry,
                Some(_) => {}
            }
        }
        out.push((
            self.org.clone(),
            self.monorepo.repo.clone(),
            self.workdir.clone(),
            self.monorepo.commit.clone(),
            None,
        ));
        out
    }
}
