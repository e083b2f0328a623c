//! Test support for the snapshot area: data fixtures, an independent manifest walker (std only,
//! not the container scripts), a container spec, and transports that misbehave.
#![allow(dead_code)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use proxmox_gitops::exec::{BoxFuture, ExecStatus, LocalExec, RemoteExec};
use proxmox_gitops::inventory::ContainerSpec;
use proxmox_gitops::snapshot::data::TakeRequest;
use proxmox_gitops::snapshot::manifest::{Entry, Kind};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite};

/// Size of the big file, 50 MiB.
pub const BIG: usize = 50 * 1024 * 1024;

/// Fills `path` with `len` pseudo-random bytes (xorshift, seeded), so it does not compress away.
pub fn random_file(path: &Path, len: usize, seed: u64) {
    let mut x = seed | 1;
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf.extend_from_slice(&x.to_le_bytes());
    }
    buf.truncate(len);
    std::fs::write(path, buf).unwrap();
}

fn set_mtime(path: &Path, secs: u64) {
    let f = std::fs::File::open(path).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs)).unwrap();
}

/// Builds the data of lib "app" under `root`: `root/app` (nested dirs, a file 0600 owned by
/// 4242:4242, a hard link to it, a relative symlink, a dangling absolute symlink, an empty 0750
/// dir with an old mtime, a 50 MiB file) and `root/conf` (one file). Returns the two paths.
pub fn make_data(root: &Path, with_big: bool) -> Vec<String> {
    let app = root.join("app");
    std::fs::create_dir_all(app.join("a/b/c")).unwrap();
    std::fs::write(app.join("a/b/c/deep.txt"), "deep\n").unwrap();
    std::fs::write(app.join("top.txt"), "top\n").unwrap();
    std::os::unix::fs::symlink("a/b/c/deep.txt", app.join("link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/target", app.join("dangling")).unwrap();
    let secret = app.join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&secret, Some(4242), Some(4242)).unwrap();
    std::fs::hard_link(&secret, app.join("a/secret-hardlink")).unwrap();
    std::fs::create_dir(app.join("empty")).unwrap();
    std::fs::set_permissions(app.join("empty"), std::fs::Permissions::from_mode(0o750)).unwrap();
    set_mtime(&app.join("empty"), 1_500_000_000);
    set_mtime(&app.join("top.txt"), 1_600_000_000);
    if with_big {
        random_file(&app.join("big.bin"), BIG, 42);
    }
    let conf = root.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("app.conf"), "port=1883\n").unwrap();
    vec![app.to_string_lossy().into_owned(), conf.to_string_lossy().into_owned()]
}

/// The manifest of `paths` computed with std alone (independent of the container scripts).
pub fn walk(paths: &[String]) -> Vec<Entry> {
    let mut out = Vec::new();
    for p in paths {
        walk_one(Path::new(p), &mut out);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn walk_one(p: &Path, out: &mut Vec<Entry>) {
    let md = std::fs::symlink_metadata(p).unwrap();
    let ft = md.file_type();
    use std::os::unix::fs::FileTypeExt;
    let kind = if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_char_device() {
        Kind::Char
    } else {
        Kind::Block
    };
    let (size, sha256) = if kind == Kind::File {
        let data = std::fs::read(p).unwrap();
        (data.len() as u64, Some(hex::encode(Sha256::digest(&data))))
    } else {
        (0, None)
    };
    out.push(Entry {
        path: p.to_string_lossy().trim_start_matches('/').to_string(),
        kind,
        size,
        mode: if kind == Kind::Symlink { 0o777 } else { md.mode() & 0o7777 },
        uid: md.uid(),
        gid: md.gid(),
        mtime: md.mtime(),
        sha256,
        target: if kind == Kind::Symlink {
            Some(std::fs::read_link(p).unwrap().to_string_lossy().into_owned())
        } else {
            None
        },
    });
    if kind == Kind::Dir {
        let mut children: Vec<PathBuf> = std::fs::read_dir(p).unwrap().map(|e| e.unwrap().path()).collect();
        children.sort();
        for c in children {
            walk_one(&c, out);
        }
    }
}

/// The request to snapshot `paths` of lib `lib` (vmid 4242) at `now`.
pub fn req(lib: &str, paths: &[String], now: time::OffsetDateTime) -> TakeRequest {
    TakeRequest { lib: lib.into(), vmid: Some(4242), paths: paths.to_vec(), now }
}

/// A container spec for lib `name` declaring `paths`.
pub fn spec(name: &str, paths: &[String]) -> ContainerSpec {
    super::spec::spec(name, 4242).snapshot_paths(paths).build()
}

/// Names of the files in `dir` (sorted), empty when it does not exist.
pub fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// Wraps the local executor and flips one byte of stdout at `offset` (a transfer error the
/// verification must catch).
pub struct FlipByte {
    pub inner: LocalExec,
    pub offset: u64,
}

struct FlipWriter<'a> {
    inner: &'a mut (dyn AsyncWrite + Send + Unpin),
    pos: u64,
    offset: u64,
}

impl AsyncWrite for FlipWriter<'_> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let mut data = buf.to_vec();
        if this.offset >= this.pos && this.offset < this.pos + data.len() as u64 {
            data[(this.offset - this.pos) as usize] ^= 0x01;
        }
        let r = std::pin::Pin::new(&mut *this.inner).poll_write(cx, &data);
        if let std::task::Poll::Ready(Ok(n)) = &r {
            this.pos += *n as u64;
        }
        r
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

impl RemoteExec for FlipByte {
    fn target(&self) -> String {
        "flaky transport".into()
    }
    fn run<'a>(
        &'a self,
        argv: &'a [&'a str],
        stdin: &'a mut (dyn AsyncRead + Send + Unpin),
        stdout: &'a mut (dyn AsyncWrite + Send + Unpin),
    ) -> BoxFuture<'a, std::io::Result<ExecStatus>> {
        Box::pin(async move {
            let mut w = FlipWriter { inner: stdout, pos: 0, offset: self.offset };
            self.inner.run(argv, stdin, &mut w).await
        })
    }
}

/// An inventory artifact holding `specs`, with the share set to `share`, written to
/// `<artifacts>/inventory.json`; returns its path.
pub fn write_inventory(root: &Path, artifacts: &Path, share: &Path, specs: Vec<ContainerSpec>) -> PathBuf {
    let mut inv = proxmox_gitops::inventory::Inventory {
        root: root.to_path_buf(),
        stage: "main".into(),
        head: None,
        containers: specs,
        submodules: vec![],
        globals: Default::default(),
        tasks: vec![],
        configs: vec![],
        base: None,
        libraries: None,
        settings: proxmox_gitops::settings::Settings::default().public(),
    };
    inv.settings.share = share.to_path_buf();
    let path = artifacts.join("inventory.json");
    proxmox_gitops::artifact::write(&path, &inv).unwrap();
    path
}

/// Runs the binary with `args`; returns (exit code, stdout, stderr).
pub fn cli(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxmox-gitops")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
