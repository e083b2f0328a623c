//! The CIFS client of the share on Proxmox VE: the files the base role writes into a container
//! whose `MOUNT` lists a share, when the global `SHARE_HOST` names the share server (usually the
//! shipped `libs/share`, a Samba server).
//!
//! For each share `NAME` in `MOUNT` a container gets:
//!
//! * `/etc/systemd/system/<unit>.mount` — `//SHARE_HOST/NAME` at `/NAME`, `Type=cifs`, with the
//!   options the mount needs (`credentials=`, `uid=config`, `gid=config`, `file_mode=0660`,
//!   `dir_mode=0770`, `vers=3.0`, `_netdev`); `<unit>` is the path escaped as systemd requires
//!   (`systemd-escape --path`: `/my-share` → `my\x2dshare.mount`), since systemd refuses a mount
//!   unit whose name does not match its `Where=` (systemd.mount(5));
//! * `proxmox-gitops-remount-NAME.service` (oneshot `systemctl start <unit>.mount`) and
//!   `proxmox-gitops-remount-NAME.timer` (30 s after boot, then every 60 s): the mount comes back
//!   when the server was down at boot or the connection dropped;
//! * one credentials file, [`CREDENTIALS_PATH`] (root, mode 0600), `username=LOGIN` and
//!   `password=PASSWORD` as mount.cifs(8) reads them: the password is never in a unit file, in
//!   the mount's options or on a command line.
//!
//! The texts are rendered from the handlebars templates in `src/share/templates/`, compiled into
//! the binary (strict mode: a missing value is an error). Every value is checked before it is
//! rendered (host name syntax, share name syntax, no line breaks in the credentials), so what is
//! written is correct by construction; `tests/suite/share.rs` runs `systemd-analyze verify` on the
//! result inside a real container.
//!
//! PVE side (not here, see `backend::pve::desired`): such a container is privileged and gets the
//! feature `mount=cifs`, which only root@pam may set. The lxc backend binds the host's
//! `<share>/NAME` at `/NAME` instead (one host, one filesystem), so it gets none of these files.

use std::net::IpAddr;

use serde::Serialize;

use crate::error::{Location, Problems};

/// Where the credentials file is written in the container (root, mode 0600).
pub const CREDENTIALS_PATH: &str = "/etc/proxmox-gitops-share.credentials";

/// The directory of the unit files.
pub const UNIT_DIR: &str = "/etc/systemd/system";

const MOUNT_TEMPLATE: &str = include_str!("templates/share.mount.hbs");
const SERVICE_TEMPLATE: &str = include_str!("templates/remount.service.hbs");
const TIMER_TEMPLATE: &str = include_str!("templates/remount.timer.hbs");
const CREDENTIALS_TEMPLATE: &str = include_str!("templates/credentials.hbs");

/// One file the base role writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientFile {
    /// Absolute path in the container.
    pub path: String,
    /// The whole text.
    pub content: String,
    /// Octal mode as Ansible takes it (`"0644"`, `"0600"`); owner and group are root.
    pub mode: String,
    /// True when the content holds the password (the base role hides it from its log).
    pub secret: bool,
}

/// Everything one container needs to mount its shares (handed to the base role as the extra
/// variable `pgo_share_client`). The default (all empty) mounts nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShareClient {
    /// The credentials file first, then per share its mount unit, service and timer.
    pub files: Vec<ClientFile>,
    /// The mount units, one per share (`share.mount`), enabled and started.
    pub mounts: Vec<String>,
    /// The remount timers, one per share, enabled and started.
    pub timers: Vec<String>,
    /// The mount points (`/NAME`), one per share.
    pub paths: Vec<String>,
    /// The CIFS server as given (`SHARE_HOST`).
    pub host: String,
}

/// The inputs of [`client`].
#[derive(Debug, Clone, Copy)]
pub struct ClientInput<'a> {
    /// Share names of the container's `MOUNT` (each mounted at `/NAME`), in `MOUNT` order.
    pub shares: &'a [String],
    /// The CIFS server: a host name or an IPv4 address (global `SHARE_HOST`).
    pub host: &'a str,
    /// The share's user (setting `LOGIN`).
    pub login: &'a str,
    /// The share's password (setting `PASSWORD`).
    pub password: &'a str,
    /// The lib's `container.env`, where `MOUNT` is (for error locations).
    pub env_file: &'a std::path::Path,
}

/// Renders the files of the share client of one container.
///
/// # Errors
/// One problem per bad value: `SHARE_HOST` that is neither a host name (RFC 1123 labels) nor an
/// IPv4 address (located at `globals.json`, key `SHARE_HOST`); a share name that is not
/// `[a-z][a-z0-9_-]*`; a `LOGIN` or `PASSWORD` that is empty or holds a line break or NUL (the
/// credentials file is line based; located at the setting).
pub fn client(input: &ClientInput<'_>) -> Result<ShareClient, Problems> {
    let mut problems = Problems::new();
    if let Err(why) = check_host(input.host) {
        problems.add(Location::file("globals.json").with_key("SHARE_HOST"), why);
    }
    for (key, value) in [("LOGIN", input.login), ("PASSWORD", input.password)] {
        if value.is_empty() {
            problems.add(
                Location::setting(crate::settings::setting_names(key)),
                "not set: the share's credentials need it",
            );
        } else if value.contains(['\n', '\r', '\0']) {
            problems.add(
                Location::setting(crate::settings::setting_names(key)),
                "holds a line break or NUL, which the share's credentials file (one `key=value` per line) cannot hold",
            );
        }
    }
    for name in input.shares {
        if !is_share_name(name) {
            problems.add(
                Location::file(input.env_file).with_key("MOUNT"),
                format!("share `{name}`: expected a name of a-z, 0-9, `-` and `_` starting with a letter"),
            );
        }
    }
    problems.into_result()?;

    let mut files = vec![ClientFile {
        path: CREDENTIALS_PATH.into(),
        content: render(
            CREDENTIALS_TEMPLATE,
            &serde_json::json!({ "login": input.login, "password": input.password }),
            false,
        ),
        mode: "0600".into(),
        secret: true,
    }];
    let (mut mounts, mut timers, mut paths) = (Vec::new(), Vec::new(), Vec::new());
    for name in input.shares {
        let where_ = format!("/{name}");
        let mount_unit = unit_name_from_path(&where_, "mount");
        let service_unit = format!("proxmox-gitops-remount-{name}.service");
        let timer_unit = format!("proxmox-gitops-remount-{name}.timer");
        let vars = serde_json::json!({
            "name": name,
            "what": format!("//{}/{name}", input.host),
            "where": where_,
            "options": mount_options(),
            // ExecStart= undoes C escapes (systemd.service(5) "Command lines"): `\x2d` must be
            // written `\\x2d` to reach systemctl as `\x2d`.
            "mount_unit_exec": mount_unit.replace('\\', "\\\\"),
            "service_unit": service_unit,
        });
        for (unit, template) in
            [(&mount_unit, MOUNT_TEMPLATE), (&service_unit, SERVICE_TEMPLATE), (&timer_unit, TIMER_TEMPLATE)]
        {
            files.push(ClientFile {
                path: format!("{UNIT_DIR}/{unit}"),
                content: render(template, &vars, true),
                mode: "0644".into(),
                secret: false,
            });
        }
        mounts.push(mount_unit);
        timers.push(timer_unit);
        paths.push(format!("/{name}"));
    }
    Ok(ShareClient { files, mounts, timers, paths, host: input.host.to_string() })
}

/// The mount options of every share (mount.cifs(8)): the credentials file, files owned by
/// `config:config` (the base role's user and group) with modes 0660/0770, SMB 3.0, and `_netdev`
/// (a network filesystem: ordered after the network).
pub fn mount_options() -> String {
    format!("credentials={CREDENTIALS_PATH},uid=config,gid=config,file_mode=0660,dir_mode=0770,vers=3.0,_netdev")
}

/// Renders one of the built-in templates. The values are checked by [`client`] and the templates
/// are part of the binary, so a failure is a bug in this module (covered by the unit tests).
fn render(template: &str, vars: &serde_json::Value, unit: bool) -> String {
    let mut hb = handlebars::Handlebars::new();
    hb.set_strict_mode(true);
    if unit {
        // Specifiers (systemd.unit(5)): a literal `%` is written `%%`.
        hb.register_escape_fn(|s| s.replace('%', "%%"));
    } else {
        hb.register_escape_fn(handlebars::no_escape);
    }
    hb.render_template(template, vars).expect("the built-in share templates render with checked values")
}

/// True for a share name as `MOUNT` accepts it: `[a-z][a-z0-9_-]*`.
pub fn is_share_name(name: &str) -> bool {
    name.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Checks `SHARE_HOST`: a host name of RFC 1123 labels (1–63 characters of letters, digits and
/// `-`, not starting or ending with `-`; at most 253 characters) or an IPv4 address.
///
/// # Errors
/// A sentence saying what was expected.
pub fn check_host(host: &str) -> Result<(), String> {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => return Ok(()),
        Ok(IpAddr::V6(_)) => {
            return Err(format!(
                "`{host}` is an IPv6 address; the share's UNC path //HOST/NAME needs a host name or an IPv4 address"
            ));
        }
        Err(_) => {}
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if !host.is_empty() && host.len() <= 253 && host.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(format!(
            "`{host}` is not a host name or an IPv4 address (the share server, e.g. `share.lan` or `192.168.178.130`)"
        ))
    }
}

/// The unit name of `path` with `suffix`, as `systemd-escape --path --suffix=SUFFIX` makes it
/// (systemd.unit(5) "String Escaping for Inclusion in Unit Names"): slashes at the ends dropped
/// and repeated ones collapsed, the rest `-`; ASCII letters, digits, `:`, `_` and `.` (not
/// leading) kept; every other byte `\xNN`; the root directory `-`.
pub fn unit_name_from_path(path: &str, suffix: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return format!("-.{suffix}");
    }
    let joined = parts.join("/");
    let mut out = String::new();
    for (i, b) in joined.bytes().enumerate() {
        match b {
            b'/' => out.push('-'),
            b'.' if i == 0 => out.push_str("\\x2e"),
            b if b.is_ascii_alphanumeric() || b == b':' || b == b'_' || b == b'.' => out.push(b as char),
            b => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    format!("{out}.{suffix}")
}

#[cfg(test)]
mod tests {
    /// The share server's playbook refuses exactly the `SHARE_NAME`s no client `MOUNT` can
    /// name ([`is_share_name`]): an upper-case name would be exported but never mounted.
    #[test]
    fn the_server_accepts_the_share_names_clients_can_mount() {
        let playbook =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/libs/share/playbook.yml")).unwrap();
        let pattern = playbook
            .lines()
            .find_map(|l| l.trim().strip_prefix("- share_name is match('")?.strip_suffix("')"))
            .expect("the playbook checks share_name");
        let re = regex::Regex::new(pattern).unwrap();
        for name in ["share", "media-2", "a_b", "Share", "SHARE", "2share", "-x", "_x", "sh are", "sh.are", ""] {
            assert_eq!(re.is_match(name), is_share_name(name), "{name:?}");
        }
    }

    use super::*;

    fn input<'a>(shares: &'a [String], host: &'a str) -> ClientInput<'a> {
        ClientInput {
            shares,
            host,
            login: "pgo-admin",
            password: "p=w d,%x",
            env_file: std::path::Path::new("libs/app/container.env"),
        }
    }

    #[test]
    fn one_share_renders_all_files() {
        let shares = vec!["share".to_string()];
        let c = client(&input(&shares, "192.168.178.130")).unwrap();
        assert_eq!(c.mounts, vec!["share.mount"]);
        assert_eq!(c.timers, vec!["proxmox-gitops-remount-share.timer"]);
        assert_eq!(c.paths, vec!["/share"]);
        let paths: Vec<(&str, &str, bool)> =
            c.files.iter().map(|f| (f.path.as_str(), f.mode.as_str(), f.secret)).collect();
        assert_eq!(
            paths,
            vec![
                ("/etc/proxmox-gitops-share.credentials", "0600", true),
                ("/etc/systemd/system/share.mount", "0644", false),
                ("/etc/systemd/system/proxmox-gitops-remount-share.service", "0644", false),
                ("/etc/systemd/system/proxmox-gitops-remount-share.timer", "0644", false),
            ]
        );
        // The password verbatim (no escaping: `%` and `,` are not special in this file).
        assert_eq!(c.files[0].content, "username=pgo-admin\npassword=p=w d,%x\n");
        assert_eq!(
            c.files[1].content,
            "# Managed by proxmox-gitops (base role): the share `share` over CIFS.\n\
             [Unit]\n\
             Description=proxmox-gitops share //192.168.178.130/share at /share\n\
             Wants=network-online.target\n\
             After=network-online.target\n\
             \n\
             [Mount]\n\
             What=//192.168.178.130/share\n\
             Where=/share\n\
             Type=cifs\n\
             Options=credentials=/etc/proxmox-gitops-share.credentials,uid=config,gid=config,file_mode=0660,dir_mode=0770,vers=3.0,_netdev\n\
             TimeoutSec=30\n\
             \n\
             [Install]\n\
             WantedBy=remote-fs.target\n"
        );
        assert!(c.files[2].content.contains("\nType=oneshot\nExecStart=/usr/bin/systemctl start share.mount\n"));
        assert!(
            c.files[3]
                .content
                .contains("\n[Timer]\nOnBootSec=30s\nOnUnitActiveSec=60s\nUnit=proxmox-gitops-remount-share.service\n")
        );
        // The password appears in the credentials file only.
        for f in &c.files[1..] {
            assert!(!f.content.contains("p=w d"), "{}", f.path);
        }
    }

    #[test]
    fn a_name_with_a_dash_is_escaped_as_systemd_requires() {
        let shares = vec!["media-lib".to_string(), "share".to_string()];
        let c = client(&input(&shares, "share.lan")).unwrap();
        assert_eq!(c.mounts, vec!["media\\x2dlib.mount", "share.mount"]);
        assert_eq!(c.files.len(), 7);
        assert_eq!(c.files[1].path, "/etc/systemd/system/media\\x2dlib.mount");
        assert!(c.files[1].content.contains("\nWhat=//share.lan/media-lib\nWhere=/media-lib\n"));
        // In ExecStart= a backslash is doubled, so that systemctl receives `\x2d`.
        assert!(c.files[2].content.contains("ExecStart=/usr/bin/systemctl start media\\\\x2dlib.mount\n"));
    }

    #[test]
    fn unit_names_match_systemd_escape() {
        // Expected values from `systemd-escape --path --suffix=mount PATH` (systemd 252).
        assert_eq!(unit_name_from_path("/share", "mount"), "share.mount");
        assert_eq!(unit_name_from_path("/srv/my share/", "mount"), "srv-my\\x20share.mount");
        assert_eq!(unit_name_from_path("//a//b_c:d.e", "mount"), "a-b_c:d.e.mount");
        assert_eq!(unit_name_from_path("/.hidden", "mount"), "\\x2ehidden.mount");
        assert_eq!(unit_name_from_path("/", "mount"), "-.mount");
        assert_eq!(unit_name_from_path("/x-y", "mount"), "x\\x2dy.mount");
    }

    #[test]
    fn bad_values_are_refused_with_their_location() {
        let shares = vec!["Bad".to_string()];
        let e = client(&ClientInput {
            shares: &shares,
            host: "-x.lan",
            login: "",
            password: "a\nb",
            env_file: std::path::Path::new("libs/app/container.env"),
        })
        .unwrap_err();
        // Sorted by location.
        let msgs: Vec<String> = e.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            msgs,
            vec![
                "globals.json (SHARE_HOST): `-x.lan` is not a host name or an IPv4 address (the share server, e.g. `share.lan` or `192.168.178.130`)",
                "libs/app/container.env (MOUNT): share `Bad`: expected a name of a-z, 0-9, `-` and `_` starting with a letter",
                "settings (LOGIN or login in local/config.json): not set: the share's credentials need it",
                "settings (PASSWORD or password in local/config.json): holds a line break or NUL, which the share's credentials file (one `key=value` per line) cannot hold",
            ]
        );
        assert!(check_host("fe80::1").unwrap_err().contains("IPv6"));
        assert!(check_host("share").is_ok());
        assert!(check_host("10.0.3.5").is_ok());
        assert!(check_host("a_b.lan").is_err());
        assert!(check_host("//x/share").is_err());
        assert!(check_host(&"a".repeat(64)).is_err());
    }
}
