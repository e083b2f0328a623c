use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;

fn bins(static_root: Option<&str>) -> Binaries {
    Binaries {
        gitea: PathBuf::from("/cache/gitea"),
        gitea_static: static_root.map(PathBuf::from),
        runner: PathBuf::from("/cache/gitea-runner"),
        tool: PathBuf::from("/usr/bin/proxmox-gitops"),
    }
}

fn inputs<'a>(b: &'a Binaries, address: &'a str) -> Inputs<'a> {
    Inputs {
        address,
        port: 8080,
        hostname: "config",
        runner_enabled: true,
        binaries: b,
        static_tar: None,
        share_keys: None,
    }
}

#[test]
fn app_ini_points_gitea_at_the_container_and_keeps_secrets_in_files() {
    let b = bins(None);
    let v = render(&inputs(&b, "10.0.3.17")).unwrap();
    assert_eq!(v.root_url, "http://10.0.3.17:8080/");
    for line in [
        "ROOT_URL = http://10.0.3.17:8080/",
        "HTTP_PORT = 8080",
        "DB_TYPE = sqlite3",
        "PATH = /srv/config/gitea/data/gitea.db",
        "ROOT = /srv/config/gitea/repositories",
        "INSTALL_LOCK = true",
        "INTERNAL_TOKEN_URI = file:/srv/config/gitea/secrets/INTERNAL_TOKEN",
        "DEFAULT_ACTIONS_URL = self",
        "RUN_USER = gitea",
    ] {
        assert!(v.app_ini.lines().any(|l| l == line), "{line} missing in:\n{}", v.app_ini);
    }
    assert!(!v.app_ini.contains("STATIC_ROOT_PATH"), "{}", v.app_ini);
    let b = bins(Some("/cache/static"));
    let v = render(&inputs(&b, "fd00::5")).unwrap();
    assert!(v.app_ini.contains("STATIC_ROOT_PATH = /usr/local/share/gitea\n"), "{}", v.app_ini);
    assert_eq!(v.root_url, "http://[fd00::5]:8080/");
    assert_eq!(v.gitea_static_tar, "");
}

#[test]
fn the_static_tar_is_the_same_bytes_for_the_same_files() {
    let dir = tempfile::tempdir().unwrap();
    for (p, body) in [("templates/base/head.tmpl", "<head>"), ("options/locale/en.ini", "a=b"), ("README", "x")] {
        let f = dir.path().join("static").join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, body).unwrap();
    }
    let (a, b) = (dir.path().join("a.tar"), dir.path().join("b.tar"));
    pack_static(&dir.path().join("static"), &a).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    pack_static(&dir.path().join("static"), &b).unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let mut names: Vec<String> = tar::Archive::new(std::fs::File::open(&a).unwrap())
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["options/locale/en.ini", "templates/base/head.tmpl"]);
}

#[test]
fn runner_config_is_yaml_with_the_label_and_the_programs_for_jobs() {
    let b = bins(Some("/cache/static"));
    let v = render(&inputs(&b, "10.0.3.17")).unwrap();
    let docs = yaml_rust2::YamlLoader::load_from_str(&v.runner_config).unwrap();
    let r = &docs[0]["runner"];
    assert_eq!(r["file"].as_str(), Some("/srv/config/runner/.runner"));
    assert_eq!(r["labels"][0].as_str(), Some("shell:host"));
    assert_eq!(r["envs"]["PGO_GITEA_BINARY"].as_str(), Some("/usr/local/bin/gitea"));
    assert_eq!(r["envs"]["PGO_GITEA_STATIC"].as_str(), Some("/usr/local/share/gitea"));
    assert_eq!(docs[0]["host"]["workdir_parent"].as_str(), Some("/var/lib/gitea-runner/work"));
}

#[test]
fn the_share_keys_are_handed_over_only_to_a_control_plane_that_deploys() {
    let b = bins(None);
    let keys = std::path::Path::new("/srv/share/.keys");
    let deploys = Inputs { share_keys: Some(keys), ..inputs(&b, "10.0.3.17") };
    assert_eq!(render(&deploys).unwrap().share_keys, "/srv/share/.keys");
    // An idle control plane (no PVE settings) runs no deploys: it needs no key.
    let idle = Inputs { runner_enabled: false, ..deploys };
    assert_eq!(render(&idle).unwrap().share_keys, "");
}

#[test]
fn paths_that_would_break_app_ini_are_refused_naming_the_setting() {
    let b = bins(Some("/x\nINSTALL_LOCK = false"));
    let e = render(&inputs(&b, "10.0.3.17")).unwrap_err().to_string();
    assert!(e.contains("PGO_GITEA_STATIC or control_plane.gitea_static in local/config.json"), "{e}");
    let b = bins(None);
    let e = render(&inputs(&b, "10.0.3.17\n[x]")).unwrap_err().to_string();
    assert!(e.contains("is not an IP address or host name"), "{e}");
}

#[test]
fn gitea_port_comes_from_the_root_env() {
    let mut env = BTreeMap::new();
    assert_eq!(port(&env, Path::new("container.env")).unwrap(), 8080);
    env.insert("GITEA_PORT".to_string(), "3000".to_string());
    assert_eq!(port(&env, Path::new("container.env")).unwrap(), 3000);
    env.insert("GITEA_PORT".to_string(), "http".to_string());
    let e = port(&env, Path::new("container.env")).unwrap_err().to_string();
    assert!(e.contains("container.env (GITEA_PORT): expected Gitea's HTTP port 1–65535, found `http`"), "{e}");
}

#[test]
fn versions_come_from_the_monorepo_else_the_built_in_file() {
    let dir = tempfile::tempdir().unwrap();
    let built_in = Versions::read(dir.path()).unwrap();
    assert!(!built_in.gitea.is_empty() && !built_in.runner.is_empty());
    std::fs::write(dir.path().join("versions.env"), "# pinned\nGITEA_VERSION=1.26.0\n").unwrap();
    let v = Versions::read(dir.path()).unwrap();
    assert_eq!(v.gitea, "1.26.0");
    assert_eq!(v.runner, built_in.runner);
    std::fs::write(dir.path().join("versions.env"), "GITEA_RUNNER_VERSION=latest\n").unwrap();
    let e = Versions::read(dir.path()).unwrap_err().to_string();
    assert!(e.contains("versions.env (GITEA_RUNNER_VERSION): expected a version like 1.2.3, found `latest`"), "{e}");
}

#[test]
fn given_programs_must_be_executable_files() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("gitea");
    std::fs::write(&f, "").unwrap();
    let s = crate::settings::ControlPlaneSettings {
        gitea_binary: Some(f.clone()),
        runner_binary: Some(dir.path().join("missing")),
        gitea_static: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let e = check_given(&s).unwrap_err().to_string();
    assert!(e.contains("PGO_GITEA_BINARY or control_plane.gitea_binary in local/config.json"), "{e}");
    assert!(e.contains("is not an executable file"), "{e}");
    assert!(e.contains("PGO_RUNNER_BINARY"), "{e}");
    assert!(e.contains("is not a directory with Gitea's templates/ and options/"), "{e}");
}

/// A fake program answering `--version` with `line`.
fn fake_program(dir: &Path, name: &str, line: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\necho '{line}'\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[tokio::test]
async fn given_programs_must_say_they_are_gitea_and_its_runner() {
    let dir = tempfile::tempdir().unwrap();
    let versions = Versions { gitea: "1.27.3".into(), runner: "1.0.8".into() };
    let runner = fake_program(dir.path(), "runner", "gitea-runner version v1.0.8");
    let release_gitea =
        fake_program(dir.path(), "gitea", "Gitea version 1.27.3 built with GNU Make 4.4, go1.25.4 : bindata, sqlite");
    let settings = |gitea: &Path, static_dir: Option<PathBuf>| crate::settings::ControlPlaneSettings {
        gitea_binary: Some(gitea.to_path_buf()),
        gitea_static: static_dir,
        runner_binary: Some(runner.clone()),
        tool_binary: Some(runner.clone()),
        ..Default::default()
    };
    let b = binaries(&settings(&release_gitea, None), &versions).await.unwrap();
    assert_eq!((b.gitea, b.runner), (release_gitea.clone(), runner.clone()));

    // Something else that happens to be executable is refused before anything is installed.
    let other = fake_program(dir.path(), "hostname", "myhost");
    let e = binaries(&settings(&other, None), &versions).await.unwrap_err().to_string();
    assert!(e.contains("PGO_GITEA_BINARY or control_plane.gitea_binary in local/config.json"), "{e}");
    assert!(e.contains("is not the expected program: `--version` printed `myhost`"), "{e}");

    // A Gitea built without its templates needs PGO_GITEA_STATIC.
    let bare = fake_program(dir.path(), "gitea-bare", "gitea version 1.27.3 built with go1.27.3");
    let e = binaries(&settings(&bare, None), &versions).await.unwrap_err().to_string();
    assert!(e.contains("is built without its templates and options"), "{e}");
    assert!(e.contains("set PGO_GITEA_STATIC or control_plane.gitea_static in local/config.json"), "{e}");
    let static_dir = dir.path().join("static");
    std::fs::create_dir_all(static_dir.join("templates")).unwrap();
    std::fs::create_dir_all(static_dir.join("options")).unwrap();
    binaries(&settings(&bare, Some(static_dir)), &versions).await.unwrap();
}
