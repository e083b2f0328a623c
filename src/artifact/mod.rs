//! The JSON artifact contract between pipeline steps.
//!
//! Every artifact is one JSON object whose first two keys are `"kind"` (what it is, e.g.
//! `"inventory"`) and `"schema_version"` (`"MAJOR.MINOR"`). A reader refuses a different kind and
//! an unknown major version; a newer minor version only adds fields and is accepted (unknown
//! fields are ignored on read).
//!
//! Artifacts live under the artifacts directory (default `<repo>/.proxmox-gitops/`):
//!
//! | file | kind | written by |
//! |---|---|---|
//! | `inventory.json` | `inventory` | `resolve` |
//! | `plan.json` | `plan` | `plan` |
//! | `provision/<name>.json` | `provision` | `provision` |
//! | `configure/<name>.json` | `configure` | `configure` |
//! | `snapshot/<name>.json` | `snapshot` | `snapshot` |
//! | `remotes.json` | `remotes` | `rewrite` |
//! | `deploy.json` | `deploy` | `deploy` |
//! | `publish.json` | `publish` | `publish` |
//! | `destroy/<name>.json` | `destroy` | `destroy` |
//! | `health.json` | `health` | `health` |
//! | `update.json` | `update` | `update` |
//!
//! Besides the artifacts the directory holds two working files: `known_hosts/<name>` (the host
//! key recorded on the first SSH connection to a container) and `worktree/` (the default working
//! copy of `rewrite`). Every path in the directory comes from [`ArtifactDir`], so a file's name is
//! spelled in one place.
//!
//! Writes are atomic: the JSON goes to a temporary file in the same directory, is flushed to disk,
//! then renamed over the target, so a reader never sees half an artifact and a failed step never
//! destroys the previous one.
//!
//! Secrets are never part of an artifact: the structs hold no secret fields, and settings that
//! carry secrets ([`crate::settings`]) are not `Serialize`.

pub mod pack;
pub mod remotes;

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A typed artifact: its kind and schema version are constants of the type.
pub trait Artifact: Serialize + DeserializeOwned {
    /// The `"kind"` value, e.g. `"inventory"`.
    const KIND: &'static str;
    /// The schema version written, `(major, minor)`. Readers accept any minor of the same major.
    const SCHEMA_VERSION: (u32, u32);
}

/// Errors reading or writing an artifact.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The artifact's path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid JSON or does not match the artifact's schema.
    #[error("{path}: not a valid {kind} artifact: {source}")]
    Json {
        /// The artifact's path.
        path: PathBuf,
        /// The expected kind.
        kind: &'static str,
        /// The parse error (with line and column).
        #[source]
        source: serde_json::Error,
    },
    /// The artifact is of another kind.
    #[error("{path}: expected an artifact of kind \"{expected}\", found kind {found}")]
    WrongKind {
        /// The artifact's path.
        path: PathBuf,
        /// The kind the reader wanted.
        expected: &'static str,
        /// The kind found (JSON-rendered, `null` when missing).
        found: String,
    },
    /// The artifact's major schema version is not one this binary understands.
    #[error(
        "{path}: {kind} artifact has schema_version {found}, this proxmox-gitops reads {major}.x; \
         re-run the step that wrote it with this version"
    )]
    Version {
        /// The artifact's path.
        path: PathBuf,
        /// The kind.
        kind: &'static str,
        /// The version found.
        found: String,
        /// The major version supported.
        major: u32,
    },
}

/// Serializes `artifact` with its `kind` and `schema_version` to a JSON value (object).
pub fn to_value<A: Artifact>(artifact: &A) -> serde_json::Value {
    let body = serde_json::to_value(artifact).expect("artifact structs serialize to JSON");
    let mut map = serde_json::Map::new();
    map.insert("kind".into(), A::KIND.into());
    let (major, minor) = A::SCHEMA_VERSION;
    map.insert("schema_version".into(), format!("{major}.{minor}").into());
    match body {
        serde_json::Value::Object(fields) => {
            for (k, v) in fields {
                if k != "kind" && k != "schema_version" {
                    map.insert(k, v);
                }
            }
        }
        other => {
            map.insert("data".into(), other);
        }
    }
    serde_json::Value::Object(map)
}

/// Renders `artifact` as pretty JSON (what is written to disk and to stdout with `--json`).
pub fn to_string<A: Artifact>(artifact: &A) -> String {
    let mut s = serde_json::to_string_pretty(&to_value(artifact)).expect("JSON values render");
    s.push('\n');
    s
}

/// Writes `artifact` to `path` atomically (temp file in the same directory, fsync, rename),
/// creating parent directories.
///
/// # Errors
/// [`ArtifactError::Io`] when the directory cannot be created or the file written; the previous
/// file at `path`, if any, is then left untouched.
pub fn write<A: Artifact>(path: &Path, artifact: &A) -> Result<(), ArtifactError> {
    write_bytes(path, to_string(artifact).as_bytes())
}

/// Writes `bytes` to `path` atomically (see [`write()`]).
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), ArtifactError> {
    let io = |source| ArtifactError::Io { path: path.to_path_buf(), source };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").suffix(".json").tempfile_in(dir).map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

/// Reads an artifact of type `A` from `path`, checking kind and major schema version.
///
/// # Errors
/// [`ArtifactError::Io`] when unreadable, [`ArtifactError::Json`] when not JSON or not matching
/// the schema, [`ArtifactError::WrongKind`], [`ArtifactError::Version`].
pub fn read<A: Artifact>(path: &Path) -> Result<A, ArtifactError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ArtifactError::Io { path: path.to_path_buf(), source })?;
    from_str(path, &text)
}

/// Parses an artifact of type `A` from `text` (`path` is only used in errors).
pub fn from_str<A: Artifact>(path: &Path, text: &str) -> Result<A, ArtifactError> {
    let json = |source| ArtifactError::Json { path: path.to_path_buf(), kind: A::KIND, source };
    let value: serde_json::Value = serde_json::from_str(text).map_err(json)?;
    let kind = value.get("kind");
    if kind.and_then(|k| k.as_str()) != Some(A::KIND) {
        return Err(ArtifactError::WrongKind {
            path: path.to_path_buf(),
            expected: A::KIND,
            found: kind.map(|k| k.to_string()).unwrap_or_else(|| "null".into()),
        });
    }
    let version = value.get("schema_version").and_then(|v| v.as_str()).unwrap_or("");
    let major = version.split('.').next().and_then(|m| m.parse::<u32>().ok());
    if major != Some(A::SCHEMA_VERSION.0) {
        return Err(ArtifactError::Version {
            path: path.to_path_buf(),
            kind: A::KIND,
            found: if version.is_empty() { "(missing)".into() } else { version.into() },
            major: A::SCHEMA_VERSION.0,
        });
    }
    serde_json::from_value(value).map_err(json)
}

/// The artifacts directory and the paths of the artifacts in it.
#[derive(Debug, Clone)]
pub struct ArtifactDir {
    root: PathBuf,
}

impl ArtifactDir {
    /// Wraps the directory `root` (not created until something is written).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `inventory.json`.
    pub fn inventory(&self) -> PathBuf {
        self.root.join("inventory.json")
    }

    /// `plan.json`.
    pub fn plan(&self) -> PathBuf {
        self.root.join("plan.json")
    }

    /// `remotes.json`.
    pub fn remotes(&self) -> PathBuf {
        self.root.join("remotes.json")
    }

    /// `deploy.json`.
    pub fn deploy(&self) -> PathBuf {
        self.root.join("deploy.json")
    }

    /// `publish.json`.
    pub fn publish(&self) -> PathBuf {
        self.root.join("publish.json")
    }

    /// `health.json`.
    pub fn health(&self) -> PathBuf {
        self.root.join("health.json")
    }

    /// `drift.json` (`proxmox-gitops drift`).
    pub fn drift(&self) -> PathBuf {
        self.root.join("drift.json")
    }

    /// `update.json`.
    pub fn update(&self) -> PathBuf {
        self.root.join("update.json")
    }

    /// `auto-merge.json`.
    pub fn auto_merge(&self) -> PathBuf {
        self.root.join("auto-merge.json")
    }

    /// `release-pr.json`.
    pub fn release_pr(&self) -> PathBuf {
        self.root.join("release-pr.json")
    }

    /// `provision/<name>.json`.
    pub fn provision(&self, name: &str) -> PathBuf {
        self.provision_dir().join(format!("{name}.json"))
    }

    /// `configure/<name>.json`.
    pub fn configure(&self, name: &str) -> PathBuf {
        self.configure_dir().join(format!("{name}.json"))
    }

    /// `snapshot/<name>.json`.
    pub fn snapshot(&self, name: &str) -> PathBuf {
        self.snapshot_dir().join(format!("{name}.json"))
    }

    /// `destroy/<name>.json`.
    pub fn destroy(&self, name: &str) -> PathBuf {
        self.destroy_dir().join(format!("{name}.json"))
    }

    /// `provision/`: the directory of the per-container `provision` artifacts.
    pub fn provision_dir(&self) -> PathBuf {
        self.root.join("provision")
    }

    /// `configure/`: the directory of the per-container `configure` artifacts.
    pub fn configure_dir(&self) -> PathBuf {
        self.root.join("configure")
    }

    /// `snapshot/`: the directory of the per-container `snapshot` artifacts.
    pub fn snapshot_dir(&self) -> PathBuf {
        self.root.join("snapshot")
    }

    /// `destroy/`: the directory of the per-container `destroy` artifacts.
    pub fn destroy_dir(&self) -> PathBuf {
        self.root.join("destroy")
    }

    /// `known_hosts/<name>`: the `known_hosts` file of container `name` (an OpenSSH file, not an
    /// artifact), written on the first connection and checked on every later one.
    pub fn known_hosts(&self, name: &str) -> PathBuf {
        self.root.join("known_hosts").join(name)
    }

    /// `worktree/`: the default working copy of `rewrite` (a git repository, not an artifact).
    pub fn worktree(&self) -> PathBuf {
        self.root.join("worktree")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Demo {
        a: u32,
    }
    impl Artifact for Demo {
        const KIND: &'static str = "demo";
        const SCHEMA_VERSION: (u32, u32) = (1, 0);
    }

    #[test]
    fn roundtrip_and_envelope() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/demo.json");
        write(&p, &Demo { a: 7 }).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text, "{\n  \"kind\": \"demo\",\n  \"schema_version\": \"1.0\",\n  \"a\": 7\n}\n");
        assert_eq!(read::<Demo>(&p).unwrap(), Demo { a: 7 });
        // no temp files left behind
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn refuses_wrong_kind_and_major() {
        let p = Path::new("x.json");
        let e = from_str::<Demo>(p, r#"{"kind":"other","schema_version":"1.0","a":1}"#).unwrap_err();
        assert_eq!(e.to_string(), "x.json: expected an artifact of kind \"demo\", found kind \"other\"");
        let e = from_str::<Demo>(p, r#"{"kind":"demo","schema_version":"2.0","a":1}"#).unwrap_err();
        assert!(matches!(e, ArtifactError::Version { .. }), "{e}");
        assert!(from_str::<Demo>(p, r#"{"kind":"demo","schema_version":"1.7","a":1,"new":true}"#).is_ok());
    }
}
