//! The fixed shell scripts run as root inside the container.
//!
//! They are constants: no user value is ever pasted into them. Paths arrive NUL-terminated on
//! stdin (read byte-exact with bash's `read -d ''`), the mode is a constant argv word. The caller
//! runs them as `bash -c SCRIPT NAME MODE` through a [`super::RemoteExec`]. They need only bash,
//! GNU coreutils, findutils and GNU tar, which every Debian/Ubuntu container has.
//!
//! # Manifest framing (stdout)
//!
//! Both [`PRODUCER`] and [`STAGE`] print a manifest the same way:
//!
//! ```text
//! PGO-MANIFEST/1 <meta bytes> <sums bytes> <extra bytes>\n
//! <meta>   find -printf records: type, mode (octal), uid, gid, mtime (s.frac), size, path, link target; each field NUL-terminated
//! <sums>   `sha256sum -z` lines: "<hex>  <path>\0" for every regular file
//! <extra>  PRODUCER: empty; STAGE: the staging directory's absolute path
//! ```
//!
//! [`PRODUCER`] in mode `archive` then writes a POSIX (pax) tar stream of the same paths,
//! relative to `/`, with numeric owners, symlinks stored as links (never followed), no atime or
//! ctime records.

/// The directory of pre-snapshot hooks inside the container, a contract for libs: before the
/// manifest of an archive is computed, [`PRODUCER`] runs every executable regular file directly in
/// it whose name has only `A-Z a-z 0-9 _ -` (run-parts' rule, so `x.dpkg-old` or `x~` are skipped),
/// in name order, as root, with no stdin and its output on stderr, each bounded by
/// [`PRE_SNAPSHOT_TIMEOUT_SECS`]. A lib's configuration installs a hook to make its data
/// consistent on disk (e.g. libs/broker has mosquitto write its persistence database). A failing
/// hook fails the snapshot (exit 5) and no archive is kept.
pub const PRE_SNAPSHOT_DIR: &str = "/etc/proxmox-gitops/pre-snapshot.d";

/// How long one pre-snapshot hook may run, in seconds (see [`PRE_SNAPSHOT_DIR`]).
pub const PRE_SNAPSHOT_TIMEOUT_SECS: u32 = 120;

/// The directory of post-snapshot hooks inside the container, the other half of
/// [`PRE_SNAPSHOT_DIR`]: once an archive's stream has ended (or the producer failed after the
/// pre-snapshot hooks began), [`PRODUCER`] runs its hooks by the same rules and bound, so that a
/// service a pre-snapshot hook stopped for a consistent copy runs again (the control plane's
/// Gitea, `playbook.yml`). A failing post-snapshot hook is reported on stderr and does not fail
/// the snapshot: the archive is complete by then.
pub const POST_SNAPSHOT_DIR: &str = "/etc/proxmox-gitops/post-snapshot.d";

/// `bash -c PRODUCER pgo-snapshot MODE`; stdin: the absolute paths, each NUL-terminated.
///
/// MODE `manifest`: print the manifest only. MODE `archive`: run the hooks in
/// [`PRE_SNAPSHOT_DIR`], then print the manifest, then the tar stream, then (also on a failure
/// after the pre-snapshot hooks began) the hooks in [`POST_SNAPSHOT_DIR`].
/// Its work files (the manifest's parts, the file list) live in a fresh directory
/// `/var/tmp/pgo-snapshot.XXXXXX` (mode 0700, removed on exit) on the container's own root
/// filesystem. Not under `/tmp` (`systemd-tmpfiles --boot` empties it during early boot) nor
/// under `/run` (systemd mounts a fresh tmpfs over it early in boot, hiding what was written
/// before): a snapshot of a container that has just started may run while it still boots.
/// `/var/tmp` is cleaned by age only (Debian's `tmp.conf`: 30 days).
/// Exit codes: 0 ok, 3 bad path (not absolute, `..`), 4 a path does not exist, 5 a pre-snapshot
/// hook failed or timed out, other: the failing tool's code (tar's 1 = a file changed while it
/// was read).
pub const PRODUCER: &str = r#"set -euo pipefail
export LC_ALL=C
umask 077
mode="${1:-}"
case "$mode" in manifest|archive) ;; *) echo "pgo-snapshot: unknown mode '$mode'" >&2; exit 2;; esac
rel=()
while IFS= read -r -d '' p; do
  if [[ "$p" != /* || "$p" == / || "$p" == /[-\(\)\!]* || "/$p/" == */../* || "/$p/" == */./* ]]; then
    echo "pgo-snapshot: path '$p' must be absolute, not /, without . or .., not starting with - ( ) !" >&2; exit 3
  fi
  p="${p%/}"
  if [[ ! -e "$p" && ! -L "$p" ]]; then
    echo "pgo-snapshot: declared snapshot path $p does not exist in the container" >&2; exit 4
  fi
  rel+=("${p#/}")
done
if [[ ${#rel[@]} -eq 0 ]]; then echo "pgo-snapshot: no paths on stdin" >&2; exit 3; fi
hooks=/etc/proxmox-gitops/pre-snapshot.d
post=/etc/proxmox-gitops/post-snapshot.d
work=
began=
# On every exit: the work files go, and once the pre-snapshot hooks began, the post-snapshot
# hooks run (their failures reported, the exit code kept). Their output goes to stderr: stdout
# is the manifest and tar stream.
finish() {
  local rc=$? h name hrc
  [[ -z "$work" ]] || rm -rf -- "$work"
  if [[ -n "$began" && -d "$post" ]]; then
    for h in "$post"/*; do
      name="${h##*/}"
      [[ -f "$h" && -x "$h" && "$name" =~ ^[A-Za-z0-9_-]+$ ]] || continue
      echo "pgo-snapshot: running post-snapshot hook $h" >&2
      hrc=0
      timeout --kill-after=5 120 "$h" </dev/null >&2 || hrc=$?
      [[ $hrc -eq 0 ]] || echo "pgo-snapshot: post-snapshot hook $h failed with exit code $hrc" >&2
    done
  fi
  exit "$rc"
}
trap finish EXIT
[[ "$mode" != archive ]] || began=1
if [[ "$mode" == archive && -d "$hooks" ]]; then
  for h in "$hooks"/*; do
    name="${h##*/}"
    [[ -f "$h" && -x "$h" && "$name" =~ ^[A-Za-z0-9_-]+$ ]] || continue
    echo "pgo-snapshot: running pre-snapshot hook $h" >&2
    rc=0
    timeout --kill-after=5 120 "$h" </dev/null >&2 || rc=$?
    if [[ $rc -ne 0 ]]; then
      [[ $rc -eq 124 ]] && why="timed out after 120s" || why="failed with exit code $rc"
      echo "pgo-snapshot: pre-snapshot hook $h $why; no snapshot taken" >&2; exit 5
    fi
  done
fi
mkdir -p /var/tmp
work="$(mktemp -d /var/tmp/pgo-snapshot.XXXXXX)"
cd /
find "${rel[@]}" ! -type s -printf '%y\0%m\0%U\0%G\0%T@\0%s\0%p\0%l\0' > "$work/meta"
find "${rel[@]}" -type f -print0 | xargs -0 -r sha256sum -z -- > "$work/sums"
printf 'PGO-MANIFEST/1 %s %s 0\n' "$(stat -c %s "$work/meta")" "$(stat -c %s "$work/sums")"
cat -- "$work/meta" "$work/sums"
if [[ "$mode" == archive ]]; then
  find "${rel[@]}" ! -type s -print0 > "$work/list"
  tar --create --file=- --directory=/ --format=posix --numeric-owner --no-recursion \
      --pax-option=delete=atime,delete=ctime --null --verbatim-files-from --files-from="$work/list"
fi
"#;

/// `bash -c STAGE pgo-restore stage`; stdin: ONE absolute path, NUL-terminated, then the tar
/// stream of a verified archive.
///
/// Creates a fresh staging directory `<parent of path>/.pgo-restore.XXXXXX` (same filesystem as
/// the path's parent, so the later swap is a rename), extracts the members under the path into
/// it with owners and modes, and prints the manifest of the staged tree (framing above, `extra` =
/// the staging directory). On any failure the staging directory is removed; the live path is
/// never touched.
pub const STAGE: &str = r#"set -euo pipefail
export LC_ALL=C
umask 022
IFS= read -r -d '' p || { echo "pgo-restore: no path on stdin" >&2; exit 3; }
if [[ "$p" != /* || "$p" == / || "$p" == /[-\(\)\!]* || "/$p/" == */../* || "/$p/" == */./* ]]; then
  echo "pgo-restore: path '$p' must be absolute, not /, without . or .., not starting with - ( ) !" >&2; exit 3
fi
p="${p%/}"
rel="${p#/}"
parent="$(dirname -- "$p")"
mkdir -p -- "$parent"
stage="$(mktemp -d "$parent/.pgo-restore.XXXXXX")"
ok=0
trap '[[ $ok == 1 ]] || rm -rf -- "$stage"' EXIT
tar --extract --file=- --directory="$stage" --numeric-owner --same-owner --same-permissions \
    --no-wildcards --anchored -- "$rel"
cd "$stage"
find "$rel" ! -type s -printf '%y\0%m\0%U\0%G\0%T@\0%s\0%p\0%l\0' > "$stage/.pgo-meta"
find "$rel" -type f -print0 | xargs -0 -r sha256sum -z -- > "$stage/.pgo-sums"
printf 'PGO-MANIFEST/1 %s %s %s\n' "$(stat -c %s "$stage/.pgo-meta")" "$(stat -c %s "$stage/.pgo-sums")" \
  "$(printf '%s' "$stage" | wc -c)"
cat -- "$stage/.pgo-meta" "$stage/.pgo-sums"
rm -f -- "$stage/.pgo-meta" "$stage/.pgo-sums"
printf '%s' "$stage"
ok=1
"#;

/// `bash -c COMMIT pgo-restore MODE`; stdin: pairs `STAGING\0PATH\0`.
///
/// MODE `commit`: for each pair, swap the staged tree in: the live path is renamed into the
/// staging directory, the staged tree renamed onto the path, the staging directory (holding the
/// old data) removed. When the path is a mount point (it cannot be renamed) its contents are
/// replaced instead, and its owner, mode and mtime copied from the staged root. MODE `abort`:
/// remove the staging directories only. A staging directory must be
/// `<parent of path>/.pgo-restore.*`; anything else is refused (exit 3).
pub const COMMIT: &str = r#"set -euo pipefail
export LC_ALL=C
mode="${1:-}"
case "$mode" in commit|abort) ;; *) echo "pgo-restore: unknown mode '$mode'" >&2; exit 2;; esac
while IFS= read -r -d '' stage && IFS= read -r -d '' p; do
  if [[ "$p" != /* || "$p" == / || "$p" == /[-\(\)\!]* || "/$p/" == */../* || "/$p/" == */./* ]]; then
    echo "pgo-restore: path '$p' must be absolute, not /, without . or .., not starting with - ( ) !" >&2; exit 3
  fi
  p="${p%/}"
  parent="$(dirname -- "$p")"
  suffix="${stage#"$parent"/.pgo-restore.}"
  if [[ "$stage" != "$parent"/.pgo-restore.* || -z "$suffix" || "$suffix" == */* || ! -d "$stage" ]]; then
    echo "pgo-restore: '$stage' is not a staging directory for $p" >&2; exit 3
  fi
  if [[ "$mode" == abort ]]; then rm -rf -- "$stage"; continue; fi
  src="$stage/${p#/}"
  if [[ ! -e "$src" && ! -L "$src" ]]; then echo "pgo-restore: nothing staged for $p" >&2; exit 4; fi
  if [[ -d "$p" && ! -L "$p" && "$(stat -c %d -- "$p")" != "$(stat -c %d -- "$parent")" ]]; then
    # Moving entries out of the staged root changes its mtime: keep the original on a marker.
    touch -m --reference="$src" -- "$stage/.pgo-mtime"
    find "$p" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
    find "$src" -mindepth 1 -maxdepth 1 -exec mv -t "$p" -- {} +
    chown --reference="$src" -- "$p"
    chmod --reference="$src" -- "$p"
    touch -m --reference="$stage/.pgo-mtime" -- "$p"
  else
    if [[ -e "$p" || -L "$p" ]]; then mv -T -- "$p" "$stage/.pgo-old"; fi
    mv -T -- "$src" "$p"
  fi
  rm -rf -- "$stage"
done
"#;

/// `bash -c PROBE pgo-snapshot probe`; stdin: the absolute paths, each NUL-terminated.
///
/// Prints `empty\n` when every path is missing or an empty directory, otherwise `data\n`. Used
/// by `configure` to decide whether to restore the newest snapshot (the seed's behaviour).
pub const PROBE: &str = r#"set -euo pipefail
export LC_ALL=C
while IFS= read -r -d '' p; do
  if [[ -L "$p" || -f "$p" ]]; then echo data; exit 0; fi
  if [[ -d "$p" && -n "$(find "$p" -mindepth 1 -maxdepth 1 -print -quit)" ]]; then echo data; exit 0; fi
  if [[ -e "$p" && ! -d "$p" ]]; then echo data; exit 0; fi
done
echo empty
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_uses_the_documented_hook_directory_and_timeout() {
        assert!(PRODUCER.contains(&format!("hooks={PRE_SNAPSHOT_DIR}\n")));
        assert!(PRODUCER.contains(&format!("post={POST_SNAPSHOT_DIR}\n")));
        assert!(PRODUCER.contains(&format!("timeout --kill-after=5 {PRE_SNAPSHOT_TIMEOUT_SECS} ")));
        assert!(PRODUCER.contains(&format!("timed out after {PRE_SNAPSHOT_TIMEOUT_SECS}s")));
    }
}
