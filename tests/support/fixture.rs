//! Fixture monorepos for the `resolve` tests, built in temp dirs with the real `git` CLI.
//!
//! Git runs through [`super::git`] (isolated from global and system config, fixed identities and
//! dates, `protocol.file.allow=always` for local paths as submodule URLs). Nothing touches the network: every
//! URL is a local path, or an scp-form URL that is only written into `.gitmodules`, never fetched.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use super::git::git;

/// A repository being built: a working tree with `git init` done.
pub struct Repo {
    /// The working tree.
    pub dir: PathBuf,
}

impl Repo {
    /// `git init` at `dir` (created).
    pub fn init(dir: impl Into<PathBuf>) -> Repo {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).unwrap();
        git(&dir, &["init", "-q"]);
        Repo { dir }
    }

    /// Writes `text` to `rel` (parents created).
    pub fn write(&self, rel: &str, text: &str) -> &Self {
        write(&self.dir, rel, text);
        self
    }

    /// `git add -A && git commit`; returns the new `HEAD` id.
    pub fn commit(&self, msg: &str) -> String {
        git(&self.dir, &["add", "-A"]);
        git(&self.dir, &["commit", "-q", "--allow-empty", "-m", msg]);
        self.head()
    }

    /// The `HEAD` commit id.
    pub fn head(&self) -> String {
        git(&self.dir, &["rev-parse", "HEAD"])
    }

    /// `git submodule add <source> <path>` (clones `source`, a local repository; its own
    /// submodules are not initialized, see [`Repo::init_submodule`]).
    pub fn add_submodule(&self, source: &Path, path: &str) {
        git(&self.dir, &["submodule", "add", "-q", &source.to_string_lossy(), path]);
    }

    /// `git submodule update --init --recursive -- <path>` inside the working tree `within`
    /// (relative to this repo): checks out one nested submodule and everything below it.
    pub fn init_submodule(&self, within: &str, path: &str) {
        git(&self.dir.join(within), &["submodule", "update", "-q", "--init", "--recursive", "--", path]);
    }

    /// Registers a submodule at `path` recording `commit`, without cloning it (what a clone
    /// without `--recurse-submodules` leaves: an empty directory and the gitlink).
    pub fn add_gitlink(&self, name: &str, path: &str, url: &str, commit: &str) {
        git(&self.dir, &["config", "-f", ".gitmodules", &format!("submodule.{name}.path"), path]);
        git(&self.dir, &["config", "-f", ".gitmodules", &format!("submodule.{name}.url"), url]);
        git(&self.dir, &["update-index", "--add", "--cacheinfo", &format!("160000,{commit},{path}")]);
        std::fs::create_dir_all(self.dir.join(path)).unwrap();
    }

    /// Sets the URL of submodule `name` in `.gitmodules` (as a user would edit it).
    pub fn set_submodule_url(&self, name: &str, url: &str) {
        git(&self.dir, &["config", "-f", ".gitmodules", &format!("submodule.{name}.url"), url]);
    }
}

/// Writes `text` to `root/rel`, creating parent directories.
pub fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// The commit ids of the standard fixture, for the expected inventory.
#[derive(Debug, Clone)]
pub struct Ids {
    pub root: String,
    pub broker: String,
    pub web: String,
    pub theme: String,
    pub icons: String,
    pub extra: String,
    pub backup: String,
}

/// The standard fixture monorepo (see [`standard`]).
pub struct Fixture {
    /// Keeps the temp dir alive.
    pub tmp: tempfile::TempDir,
    /// The monorepo's working tree (canonical path).
    pub root: PathBuf,
    /// The directory holding the source repos the submodules were cloned from.
    pub sources: PathBuf,
    /// Commit ids.
    pub ids: Ids,
}

/// Builds the standard monorepo:
///
/// * control plane `container.env` (+ `container.local.env`, `container.stage.env`);
/// * `libs/dns` — a plain directory (Cinc cookbook), with a `container.stage.env`;
/// * `libs/broker` — a submodule (shell engine) whose `.gitmodules` URL is in scp form
///   (`git@git.example.com:homelab/broker.git`), with `container.local.env` and
///   `container.stage.env`;
/// * `libs/web` — a submodule (Ansible) with submodule `vendor/theme`, which has submodule
///   `icons` (nested two levels below the lib), and `vendor/extra`, registered but not checked out;
/// * `tasks/backup` — a submodule task with a cron line; `base/`, `config/libraries/`;
/// * `globals.json` + `globals.local.json`, `local/config.json` + `local/config.local.json`.
pub fn standard() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let sources = base.join("src");

    let (icons, icons_id) = source(&sources, "icons", &[("icons.txt", "home\n")]);

    let (theme, _) = source(&sources, "theme", &[("theme.css", "body {}\n")]);
    theme.add_submodule(&icons.dir, "icons");
    let theme_id = theme.commit("icons submodule");

    let (_, extra_id) = source(&sources, "extra", &[("README", "never checked out\n")]);

    let (web, _) = source(
        &sources,
        "web",
        &[
            (
                "container.env",
                "# web server\nIP=\"10.0.3.30/24\"\nID=\"130\"\nCORES=\"2\"\nMEMORY=\"1024\"\nSWAP=\"0\"\nDISK=\"local-lvm:16\"\nMOUNT=\"share,/srv/web:/var/www,/dev/net/tun\"\nBOOT=\"no\"\nexport SITE_NAME='Home $ite' # literal dollar in single quotes\n",
            ),
            ("playbook.yml", "- hosts: all\n  tasks: []\n"),
        ],
    );
    web.add_submodule(&theme.dir, "vendor/theme");
    web.add_gitlink("vendor/extra", "vendor/extra", "https://git.example.com/homelab/extra.git", &extra_id);
    let web_id = web.commit("vendor submodules");

    let (broker, broker_id) = source(
        &sources,
        "broker",
        &[
            (
                "container.env",
                "IP=10.0.3.20/24\nID=120\nCORES=1\nMEMORY=256\nSWAP=256\nDISK=local-lvm:4\nMOUNT=\"local-lvm:2:/var/lib/mosquitto\"\nBOOT=yes\nSNAPSHOT=\"/var/lib/mosquitto/,/etc/mosquitto\"\nNODE=pve2\n",
            ),
            ("configure.sh", "#!/bin/bash\necho configure\n"),
        ],
    );

    let (backup, backup_id) = source(&sources, "backup", &[("default.rb", "# ! cron '0 3 * * *'\nputs 'backup'\n")]);

    let root = Repo::init(base.join("mono"));
    root.write(
        "container.env",
        "IP=\"10.0.3.10/24\"\nID=\"100\"\nCORES=\"4\"\nMEMORY=\"8192\"\nSWAP=\"1024\"\nDISK=\"local-lvm:32\"\nMOUNT=\"\"\nBOOT=\"yes\"\n",
    );
    root.write("container.local.env", "MEMORY=4096\n");
    root.write("container.stage.env", "IP=\"10.0.3.11/24\"\nID=\"200\"\n");
    root.write(
        "libs/dns/container.env",
        "export IP=10.0.3.40/24   # static\nID=140\nMEMORY=128\nSWAP=0\nDISK=local:2\nUPSTREAM=\"1.1.1.1 9.9.9.9\"\n\n# trailing comment\n",
    );
    root.write("libs/dns/container.stage.env", "IP=dhcp\nID=240\n");
    root.write("libs/dns/recipes/default.rb", "package 'unbound'\n");
    root.write("base/default.yml", "- hosts: all\n");
    root.write("config/libraries/common.rb", "module Common; end\n");
    root.write("globals.json", "{\n  \"DOMAIN\": \"home.arpa\",\n  \"TZ\": \"UTC\",\n  \"UNSET\": \"\"\n}\n");
    root.write("globals.local.json", "{\n  \"TZ\": \"Europe/Berlin\",\n  \"DOMAIN\": \"\"\n}\n");
    root.write(
        "local/config.json",
        "{\n  \"proxmox\": {\n    \"host\": \"127.0.0.1\",\n    \"port\": 8006,\n    \"user\": \"root@pam\",\n    \"password\": \"\",\n    \"node\": \"pve1\",\n    \"gateway\": \"10.0.3.1\",\n    \"mask\": \"24\",\n    \"bridge\": \"lxcbr0\"\n  },\n  \"login\": \"gitops\"\n}\n",
    );
    root.write(
        "local/config.local.json",
        "{\n  \"proxmox\": { \"password\": \"fixture-pve-password\", \"storage\": \"local\" },\n  \"host\": \"http://127.0.0.1:3000\",\n  \"password\": \"fixture-gitea-password\"\n}\n",
    );
    root.write(".gitignore", "*.local.*\n.proxmox-gitops/\n");
    root.commit("monorepo");
    root.add_submodule(&broker.dir, "libs/broker");
    root.add_submodule(&web.dir, "libs/web");
    root.init_submodule("libs/web", "vendor/theme");
    root.add_submodule(&backup.dir, "tasks/backup");
    root.set_submodule_url("libs/broker", "git@git.example.com:homelab/broker.git");
    // Machine-local overrides are git-ignored in real monorepos; inside a submodule they are
    // untracked files.
    write(&root.dir, "libs/broker/container.local.env", "MEMORY=512 # more for retained messages\n");
    write(&root.dir, "libs/broker/container.stage.env", "IP='10.0.3.21/24'\nID=220\n");
    let root_id = root.commit("libs");

    Fixture {
        root: root.dir.clone(),
        sources,
        ids: Ids {
            root: root_id,
            broker: broker_id,
            web: web_id,
            theme: theme_id,
            icons: icons_id,
            extra: extra_id,
            backup: backup_id,
        },
        tmp,
    }
}

/// A source repository `sources/<name>` holding `files` (path, content) in one commit named
/// `name`; returns it and the commit id.
fn source(sources: &Path, name: &str, files: &[(&str, &str)]) -> (Repo, String) {
    let repo = Repo::init(sources.join(name));
    for (rel, text) in files {
        repo.write(rel, text);
    }
    let id = repo.commit(name);
    (repo, id)
}

/// A minimal valid monorepo (plain directories, no git) for validation tests: a control plane
/// and one lib `app`, each of whose files the test may then overwrite.
pub fn minimal() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap().join("mono");
    write(&root, "container.env", "IP=10.0.3.10/24\nID=100\n");
    write(&root, "libs/app/container.env", "IP=10.0.3.20/24\nID=120\n");
    (tmp, root)
}

/// Replaces every occurrence of `from` in all strings of `value` by `to` (temp paths → `$TMP`).
pub fn replace_strings(value: &mut serde_json::Value, from: &str, to: &str) {
    match value {
        serde_json::Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        serde_json::Value::Array(a) => a.iter_mut().for_each(|v| replace_strings(v, from, to)),
        serde_json::Value::Object(m) => m.values_mut().for_each(|v| replace_strings(v, from, to)),
        _ => {}
    }
}
