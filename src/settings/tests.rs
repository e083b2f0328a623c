//! Tests of loading settings: precedence, unknown keys with lines, secrets never echoed.

use super::*;
use std::collections::BTreeMap;

#[test]
fn precedence_env_over_local_over_base() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("local")).unwrap();
    std::fs::write(
        dir.path().join("local/config.json"),
        r#"{"proxmox":{"host":"base","user":"root@pam","bridge":"vmbr1","mask":"24"},"login":"admin"}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("local/config.local.json"),
        r#"{"proxmox":{"host":"local","password":"pw","mask":16}}"#,
    )
    .unwrap();
    let env: BTreeMap<String, String> =
        [("PROXMOX_HOST".to_string(), "fromenv".to_string()), ("PROXMOX_NODE".into(), "".into())].into();
    let s = Settings::load(dir.path(), &env).unwrap();
    assert_eq!(s.pve.host.as_deref(), Some("fromenv"));
    assert_eq!(s.pve.bridge, "vmbr1");
    assert_eq!(s.pve.mask, Some(16));
    assert_eq!(s.pve.node, None);
    assert_eq!(s.pve.auth_kind(), PveAuthKind::Password);
    assert_eq!(s.gitea.login.as_deref(), Some("admin"));
    assert_eq!(s.secret_values(), vec!["pw".to_string()]);
}

#[test]
fn unknown_key_is_an_error_with_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("local")).unwrap();
    std::fs::write(dir.path().join("local/config.json"), "{\n \"proxmox\": {\n  \"hots\": \"x\"\n }\n}\n").unwrap();
    let e = Settings::load(dir.path(), &BTreeMap::new()).unwrap_err();
    assert_eq!(e.0[0].location.file, Path::new("local/config.json"));
    assert_eq!(e.0[0].location.line, Some(3));
    assert!(e.0[0].message.contains("hots"), "{}", e.0[0].message);
}

#[test]
fn every_bad_key_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("local")).unwrap();
    std::fs::write(
        dir.path().join("local/config.json"),
        "{\n \"proxmox\": {\n  \"hots\": \"x\",\n  \"port\": \"http\",\n  \"user\": 5\n },\n \"logn\": \"a\"\n}\n",
    )
    .unwrap();
    let e = Settings::load(dir.path(), &BTreeMap::new()).unwrap_err();
    let got: Vec<(Option<usize>, Option<&str>)> =
        e.iter().map(|p| (p.location.line, p.location.key.as_deref())).collect();
    assert_eq!(
        got,
        vec![
            (Some(3), Some("proxmox.hots")),
            (Some(4), Some("proxmox.port")),
            (Some(5), Some("proxmox.user")),
            (Some(7), Some("logn")),
        ]
    );
}

#[test]
fn a_mistyped_secret_is_not_echoed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("local")).unwrap();
    std::fs::write(
        dir.path().join("local/config.local.json"),
        r#"{"proxmox": {"password": 31415926}, "token": {"t": "zz-secret-zz"}}"#,
    )
    .unwrap();
    let e = Settings::load(dir.path(), &BTreeMap::new()).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("(proxmox.password): expected a string, found a number"), "{text}");
    assert!(text.contains("(token): expected a string, found an object"), "{text}");
    assert!(!text.contains("31415926") && !text.contains("zz-secret-zz"), "{text}");
}

#[test]
fn a_pve_url_sets_host_and_port_and_a_contradicting_port_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let s = Settings::load(dir.path(), &env(&[("PROXMOX_HOST", "https://pve.example:8007/")])).unwrap();
    assert_eq!((s.pve.host.as_deref(), s.pve.port), (Some("pve.example"), 8007));
    let s =
        Settings::load(dir.path(), &env(&[("PROXMOX_HOST", "https://pve.example"), ("PROXMOX_PORT", "8443")])).unwrap();
    assert_eq!((s.pve.host.as_deref(), s.pve.port), (Some("pve.example"), 8443));
    let s = Settings::load(dir.path(), &env(&[("PROXMOX_HOST", "https://pve.example:8006"), ("PROXMOX_PORT", "8006")]))
        .unwrap();
    assert_eq!((s.pve.host.as_deref(), s.pve.port), (Some("pve.example"), 8006));
    let e = Settings::load(dir.path(), &env(&[("PROXMOX_HOST", "https://pve.example:8006"), ("PROXMOX_PORT", "8443")]))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "1 problem in the input:\n  environment (PROXMOX_HOST): the URL's port 8006 differs from the port 8443 set by \
         PROXMOX_PORT or proxmox.port; set one of them\n"
    );
    // From a config file: the file and key are named.
    std::fs::create_dir(dir.path().join("local")).unwrap();
    std::fs::write(dir.path().join("local/config.json"), r#"{"proxmox": {"host": "http://pve.example"}}"#).unwrap();
    let e = Settings::load(dir.path(), &BTreeMap::new()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "1 problem in the input:\n  local/config.json (proxmox.host): `http://pve.example` is not a PVE host: the \
             scheme `http` is not supported: the PVE API is served over https only; expected {}\n",
            host::FORMS
        )
    );
}

#[test]
fn checkout_action_from_env_or_config_and_a_bad_value_names_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("local")).unwrap();
    let none: BTreeMap<String, String> = BTreeMap::new();
    assert_eq!(load_checkout(dir.path(), &none).unwrap().as_str(), "git");
    std::fs::write(dir.path().join("local/config.json"), "{\"checkout\": \"tasks/checkout@main\"}").unwrap();
    assert_eq!(load_checkout(dir.path(), &none).unwrap().as_str(), "tasks/checkout@main");
    let env: BTreeMap<String, String> =
        [("PROXMOX_GITOPS_CHECKOUT".to_string(), "http://10.0.3.2:8080/tasks/checkout@v4".to_string())].into();
    assert_eq!(load_checkout(dir.path(), &env).unwrap().as_str(), "http://10.0.3.2:8080/tasks/checkout@v4");

    let bad: BTreeMap<String, String> = [("PROXMOX_GITOPS_CHECKOUT".to_string(), "checkout".to_string())].into();
    let e = Settings::load(dir.path(), &bad).unwrap_err();
    assert_eq!(e.0, load_checkout(dir.path(), &bad).unwrap_err().0, "load checks it, load_checkout reads it");
    assert_eq!(
        e.0.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        vec![
            "environment (PROXMOX_GITOPS_CHECKOUT): expected `git` (the default: check out with git, no action) or \
             the checkout action as OWNER/REPO@REF (e.g. actions/checkout@v4), ./PATH, or \
             https://HOST/OWNER/REPO@REF, found `checkout`"
        ]
    );
    std::fs::write(dir.path().join("local/config.local.json"), "{\"checkout\": \"a b@v1\"}").unwrap();
    let e = load_checkout(dir.path(), &none).unwrap_err();
    assert_eq!(e.0[0].location, Location::file("local/config.local.json").with_key("checkout"));
    std::fs::write(dir.path().join("local/config.local.json"), "{\"checkout\": 4}").unwrap();
    let e = Settings::load(dir.path(), &none).unwrap_err();
    assert_eq!(e.0[0].to_string(), "local/config.local.json:1 (checkout): expected a string, found 4");
}

#[test]
fn token_forms_resolve_and_a_second_user_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("local")).unwrap();
    // The committed template's user gives way to the user the token names.
    std::fs::write(dir.path().join("local/config.json"), r#"{"proxmox":{"user":"root@pam"}}"#).unwrap();
    let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let s =
        Settings::load(dir.path(), &env(&[("PROXMOX_TOKEN_ID", "ci@pve!deploy"), ("PROXMOX_TOKEN_SECRET", "s-3c4")]))
            .unwrap();
    assert_eq!((s.pve.user.as_deref(), s.pve.token.as_deref()), (Some("ci@pve"), Some("deploy")));
    assert_eq!(s.pve.auth_kind(), PveAuthKind::Token);
    assert_eq!(s.secret_values(), vec!["s-3c4".to_string()]);
    let public = serde_json::to_string(&s.public()).unwrap();
    assert!(public.contains("\"pve_token\":\"deploy\"") && !public.contains("s-3c4"), "{public}");

    let s = Settings::load(dir.path(), &env(&[("PROXMOX_TOKEN", "ci@pve!deploy=s-3c4")])).unwrap();
    assert_eq!((s.pve.user.as_deref(), s.pve.token.as_deref()), (Some("ci@pve"), Some("deploy")));
    assert_eq!(s.secret_values(), vec!["s-3c4".to_string()]);
    assert!(!serde_json::to_string(&s.public()).unwrap().contains("s-3c4"));

    let e = Settings::load(
        dir.path(),
        &env(&[("PROXMOX_USER", "root@pam"), ("PROXMOX_TOKEN", "ci@pve!deploy"), ("PROXMOX_SECRET", "s-3c4")]),
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("environment (PROXMOX_USER)") && text.contains("PROXMOX_TOKEN"), "{text}");
    assert!(!text.contains("s-3c4"), "{text}");
}

#[test]
fn environment_only_settings_are_read_here_trimmed_and_empty_means_unset() {
    let dir = tempfile::tempdir().unwrap();
    let env: BTreeMap<String, String> = [
        ("PROXMOX_GITOPS_MONOREPO", " infra/mono "),
        ("PGO_LXC_BASE", " my-base "),
        ("PGO_LXC_MIRROR", ""),
        ("PGO_LXC_SECURITY_MIRROR", "http://127.0.0.1:9/debian-security"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let s = Settings::load(dir.path(), &env).unwrap();
    assert_eq!(s.gitea.monorepo.as_deref(), Some("infra/mono"));
    assert_eq!(
        s.lxc,
        LxcSettings {
            base: Some("my-base".into()),
            mirror: None,
            security_mirror: Some("http://127.0.0.1:9/debian-security".into()),
        }
    );
    let none = Settings::load(dir.path(), &BTreeMap::new()).unwrap();
    assert_eq!((none.gitea.monorepo, none.lxc), (None, LxcSettings::default()));
}

#[test]
fn entry_point_from_the_environment() {
    use crate::error::EntryPoint;
    let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    assert_eq!(entry_point(&env(&[])), EntryPoint::Binary);
    assert_eq!(entry_point(&env(&[("PGO_ENTRY", "local-run")])), EntryPoint::LocalRun);
    assert_eq!(entry_point(&env(&[("PGO_ENTRY", "other")])), EntryPoint::Binary);
    assert_eq!(entry_point(&env(&[("GITHUB_ACTIONS", "true")])), EntryPoint::Actions);
    assert_eq!(entry_point(&env(&[("GITHUB_ACTIONS", "false")])), EntryPoint::Binary);
    // A runner started from ./local/run.sh may inherit PGO_ENTRY: Actions wins.
    assert_eq!(entry_point(&env(&[("GITEA_ACTIONS", "true"), ("PGO_ENTRY", "local-run")])), EntryPoint::Actions);
}

#[test]
fn configure_full_is_full_or_auto() {
    let env = |v: Option<&str>| -> BTreeMap<String, String> {
        v.map(|v| BTreeMap::from([(CONFIGURE_VAR.to_string(), v.to_string())])).unwrap_or_default()
    };
    assert!(!configure_full(&env(None)).unwrap());
    assert!(!configure_full(&env(Some(""))).unwrap());
    assert!(!configure_full(&env(Some("auto"))).unwrap());
    assert!(configure_full(&env(Some(" full "))).unwrap());
    let e = configure_full(&env(Some("yes"))).unwrap_err().to_string();
    assert!(e.contains("PROXMOX_GITOPS_CONFIGURE") && e.contains("found `yes`"), "{e}");
}
