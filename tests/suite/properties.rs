//! Property tests (proptest) of the parsers that read user input, kept in `cargo test`: the env
//! files (`container.env`), `.gitmodules`, the settings and globals JSON, and PVE property strings.
//!
//! Each parser must return (a value or problems) for any input, without a panic and without a
//! hang: inputs are bounded (a few hundred characters, drawn mostly from the characters the
//! grammar cares about, so that the cases reach its corners), and every property runs under
//! proptest's per-case timeout. Where we also write the format (PVE property strings), or can
//! write an input the grammar accepts (env files, globals), the value read back is the value
//! written.
//!
//! Case counts are small (the file runs in a few seconds); raise them with `PROPTEST_CASES` for a
//! longer run, e.g. `PROPTEST_CASES=5000 cargo test --test suite properties::`.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use proxmox_gitops::backend::pve::desired::{features_string, props_string};
use proxmox_gitops::backend::pve::planner::{parse_size, split_props};
use proxmox_gitops::error::Problems;
use proxmox_gitops::inventory::dotenv;
use proxmox_gitops::settings::Settings;
use proxmox_gitops::steps::resolve::read_globals;

/// Cases per property, unless `PROPTEST_CASES` says otherwise; a case that runs longer than
/// 5 s fails (a hang).
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(cases);
    ProptestConfig { cases, timeout: 5_000, failure_persistence: None, ..ProptestConfig::default() }
}

/// Text of up to `max` characters, mostly from `alphabet`, sometimes any character at all.
fn text_from(alphabet: &'static str, max: usize) -> impl Strategy<Value = String> + Clone {
    let chars: Vec<char> = alphabet.chars().collect();
    let ch = prop_oneof![8 => proptest::sample::select(chars), 1 => any::<char>()];
    proptest::collection::vec(ch, 0..=max).prop_map(|v| v.into_iter().collect())
}

// ------------------------------------------------------------------------------------------------
// container.env
// ------------------------------------------------------------------------------------------------

/// The characters of the dotenv grammar: keys, `=`, quotes, escapes, substitutions, comments,
/// whitespace, line ends, a BOM.
const DOTENV_CHARS: &str = "AZaz_09=\"'\\$`#(){} \t\r\n\u{feff}export.-/:%";

fn key() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_]{0,12}"
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn dotenv_never_panics(text in text_from(DOTENV_CHARS, 300)) {
        match dotenv::parse(Path::new("libs/x/container.env"), &text) {
            Ok(entries) => {
                let lines = text.lines().count();
                for e in &entries {
                    prop_assert!(e.line >= 1 && e.line <= lines, "{e:?} in {lines} lines");
                }
            }
            Err(problems) => {
                // Every problem names the file and a line of it.
                for p in problems.iter() {
                    prop_assert_eq!(p.location.file.as_path(), Path::new("libs/x/container.env"));
                    prop_assert!(p.location.line.is_some_and(|l| l >= 1), "{p:?}");
                }
            }
        }
    }

    #[test]
    fn dotenv_reads_back_single_quoted_values(
        pairs in proptest::collection::vec((key(), "(?:[^'\\p{Cc}]|\t){0,20}"), 0..8)
    ) {
        let text: String = pairs.iter().map(|(k, v)| format!("{k}='{v}'\n")).collect();
        let entries = dotenv::parse(Path::new("container.env"), &text).map_err(|p| TestCaseError::fail(p.to_string()))?;
        let got: Vec<(String, String, usize)> = entries.into_iter().map(|e| (e.key, e.value, e.line)).collect();
        let want: Vec<(String, String, usize)> =
            pairs.into_iter().enumerate().map(|(i, (k, v))| (k, v, i + 1)).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn dotenv_reads_back_double_quoted_values(
        pairs in proptest::collection::vec((key(), "(?:[^\\p{Cc}]|\t){0,20}"), 0..8)
    ) {
        // Written as bash would need it: `\`, `"`, `$` and backtick escaped.
        let quote = |v: &str| {
            v.chars().fold(String::new(), |mut s, c| {
                if matches!(c, '\\' | '"' | '$' | '`') {
                    s.push('\\');
                }
                s.push(c);
                s
            })
        };
        let text: String = pairs.iter().map(|(k, v)| format!("export {k}=\"{}\"  # note\n", quote(v))).collect();
        let entries = dotenv::parse(Path::new("container.env"), &text).map_err(|p| TestCaseError::fail(p.to_string()))?;
        let got: Vec<(String, String)> = entries.into_iter().map(|e| (e.key, e.value)).collect();
        prop_assert_eq!(got, pairs);
    }

    /// Values hold no control character but the tab (issue 12): one anywhere in a value, quoted
    /// or not, is refused at its line, and the message never carries the character itself.
    #[test]
    fn dotenv_refuses_control_characters_at_their_line(
        before in "[a-z]{0,5}",
        control in prop_oneof![0x00u32..0x09, 0x0bu32..0x0d, 0x0eu32..0x20, 0x7fu32..0xa0],
        after in "[a-z]{0,5}",
        quote in prop_oneof![Just(""), Just("'"), Just("\"")],
        line in 1usize..5,
    ) {
        let c = char::from_u32(control).expect("a control character");
        let text = format!("{}A={quote}{before}{c}{after}{quote}\nB=1\n", "X=1\n".repeat(line - 1));
        let problems = dotenv::parse(Path::new("container.env"), &text).expect_err("refused");
        prop_assert_eq!(problems.len(), 1);
        let p = &problems.0[0];
        prop_assert_eq!(p.location.line, Some(line));
        prop_assert!(p.message.starts_with(&format!("control character U+{control:04X}")), "{}", p.message);
        prop_assert!(!p.message.contains(c), "{:?}", p.message);
    }
}

// ------------------------------------------------------------------------------------------------
// .gitmodules (through git::read_tree, on one repository whose .gitmodules each case rewrites)
// ------------------------------------------------------------------------------------------------

const GITMODULES_CHARS: &str = "[]\"=\\;# \t\nsubmodulepathurlbranch.-_/:@ab";

/// A `.gitmodules` that looks like one: sections with path and url lines, with noise.
fn gitmodules() -> impl Strategy<Value = String> {
    let value = text_from("ab/._-:@ \\\"%;#", 16);
    let entry = (value.clone(), value.clone(), value, any::<bool>()).prop_map(|(name, path, url, quoted)| {
        if quoted {
            format!("[submodule \"{name}\"]\n\tpath = {path}\n\turl = \"{url}\"\n")
        } else {
            format!("[submodule {name}]\npath={path}\nurl={url}\n")
        }
    });
    prop_oneof![proptest::collection::vec(entry, 0..5).prop_map(|v| v.concat()), text_from(GITMODULES_CHARS, 300),]
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn gitmodules_never_panics(text in gitmodules()) {
        thread_local! {
            static REPO: tempfile::TempDir = {
                let dir = tempfile::tempdir().unwrap();
                support::git::git(dir.path(), &["init", "-q"]);
                dir
            };
        }
        REPO.with(|repo| {
            std::fs::write(repo.path().join(".gitmodules"), &text).unwrap();
            // Either submodules (none is checked out here) or problems naming the file.
            match proxmox_gitops::git::read_tree(repo.path()) {
                Ok(tree) => prop_assert!(tree.is_repo),
                Err(problems) => prop_assert!(problems.iter().count() > 0),
            }
            Ok(())
        })?;
    }
}

// ------------------------------------------------------------------------------------------------
// globals.json and local/config.json
// ------------------------------------------------------------------------------------------------

/// Any JSON value (bounded depth and size), with keys drawn from the ones we read.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        text_from("aZ0_ %\n\"\\:/.\u{0}é", 12).prop_map(Value::String),
    ];
    let keys = prop_oneof![
        proptest::sample::select(vec![
            "proxmox",
            "host",
            "port",
            "user",
            "password",
            "token",
            "secret",
            "node",
            "gateway",
            "mask",
            "interface",
            "bridge",
            "storage",
            "template",
            "share",
            "login",
            "GITHUB_X",
            "ci_x",
            "A",
            "a",
            "",
        ])
        .prop_map(str::to_string),
        text_from("aZ_0 .-", 8),
    ];
    leaf.prop_recursive(3, 24, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((keys.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Either a JSON document (valid) or JSON-ish text (mostly invalid).
fn json_text() -> impl Strategy<Value = String> {
    prop_oneof![
        json_value().prop_map(|v| v.to_string()),
        json_value().prop_map(|v| serde_json::to_string_pretty(&v).unwrap()),
        text_from("{}[]\":,0123456789.eE+-truefalsnl \n\\u", 200),
    ]
}

fn globals_name() -> impl Strategy<Value = String> {
    // Valid Gitea variable names, upper case (so no two differ only in case), none reserved.
    "[A-BD-FH-Z_][A-Z0-9_]{0,10}"
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn globals_never_panic(base in json_text(), local in proptest::option::of(json_text())) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("globals.json"), &base).unwrap();
        if let Some(local) = &local {
            std::fs::write(dir.path().join("globals.local.json"), local).unwrap();
        }
        let mut problems = Problems::new();
        let globals = read_globals(dir.path(), &mut problems);
        for p in problems.iter() {
            let file = p.location.file.to_string_lossy();
            prop_assert!(file == "globals.json" || file == "globals.local.json", "{p:?}");
        }
        for (k, v) in &globals {
            prop_assert!(proxmox_gitops::steps::resolve::global_name(k).is_ok(), "{k}");
            prop_assert!(!v.is_empty());
        }
    }

    #[test]
    fn globals_read_back_what_was_written(
        base in proptest::collection::btree_map(globals_name(), "\\PC{1,16}", 0..8),
        local in proptest::collection::btree_map(globals_name(), proptest::option::of("\\PC{1,16}"), 0..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("globals.json"), serde_json::to_string(&base).unwrap()).unwrap();
        std::fs::write(dir.path().join("globals.local.json"), serde_json::to_string(&local).unwrap()).unwrap();
        let mut problems = Problems::new();
        let got = read_globals(dir.path(), &mut problems);
        prop_assert!(problems.iter().count() == 0, "{problems}");
        // The local file overrides; `null` there removes a key.
        let mut want = base.clone();
        for (k, v) in local {
            match v {
                Some(v) => { want.insert(k, v); }
                None => { want.remove(&k); }
            }
        }
        prop_assert_eq!(got, want);
    }

    #[test]
    fn settings_never_panic(base in json_text(), local in proptest::option::of(json_text())) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("local")).unwrap();
        std::fs::write(dir.path().join("local/config.json"), &base).unwrap();
        if let Some(local) = &local {
            std::fs::write(dir.path().join("local/config.local.json"), local).unwrap();
        }
        let env: BTreeMap<String, String> = BTreeMap::new();
        if let Err(problems) = Settings::load(dir.path(), &env) {
            for p in problems.iter() {
                let file = p.location.file.to_string_lossy();
                prop_assert!(file.starts_with("local/config"), "{p:?}");
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// PVE property strings (`name=eth0,bridge=vmbr0,…`, `features`) and sizes
// ------------------------------------------------------------------------------------------------

fn prop_key() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_-]{0,8}"
}

/// A value as PVE writes one: no `,` or `=`, no surrounding whitespace.
fn prop_value() -> impl Strategy<Value = String> {
    "([A-Za-z0-9:/._@+-]([A-Za-z0-9:/._@+ -]{0,14}[A-Za-z0-9:/._@+-])?)?"
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn property_strings_never_panic(text in text_from(",= \tabc019:/.-\u{0}é", 200)) {
        let (first, props) = split_props(&text);
        if let Some(first) = first {
            prop_assert!(!first.contains(',') && !first.contains('='));
        }
        for k in props.keys() {
            prop_assert!(!k.contains(','), "{k}");
        }
    }

    #[test]
    fn features_round_trip(map in proptest::collection::btree_map(prop_key(), prop_value(), 0..8)) {
        let written = features_string(&map);
        prop_assert_eq!(split_props(&written), (None, map));
    }

    #[test]
    fn props_round_trip(
        first in proptest::option::of("[A-Za-z0-9:/._-]{1,16}"),
        map in proptest::collection::btree_map(prop_key(), prop_value(), 0..8),
    ) {
        let pairs: Vec<(String, String)> = map.clone().into_iter().collect();
        let written = match &first {
            Some(f) if pairs.is_empty() => f.clone(),
            Some(f) => format!("{f},{}", props_string(&pairs)),
            None => props_string(&pairs),
        };
        prop_assert_eq!(split_props(&written), (first, map));
    }

    #[test]
    fn sizes_never_panic(text in text_from("0123456789.eE+-KMGTBkmgtb NaNinf", 24)) {
        let _ = parse_size(&text);
    }

    #[test]
    fn sizes_read_back(
        n in 0u64..(1 << 20),
        (unit, mult) in proptest::sample::select(vec![("", 1u64), ("K", 1 << 10), ("m", 1 << 20), ("G", 1 << 30)]),
    ) {
        // Below 2^53 bytes the f64 on the way is exact.
        prop_assert_eq!(parse_size(&format!("{n}{unit}")), Some(n * mult));
    }
}
