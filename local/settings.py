#!/usr/bin/env python3
"""The local run's settings, decided before the binary is built (local/run.sh calls it first).

    python3 local/settings.py ROOT

ROOT is the monorepo. Settings are read as the binary reads them (src/settings): the environment
wins over local/config.local.json, which wins over local/config.json; an empty value is "not set".

* LOGIN and PASSWORD: when neither the environment nor a config file sets one, it is generated once
  (the login `admin`; the password 24 characters from Python's `secrets`, the OS CSPRNG) and stored
  in local/config.local.json as "login"/"password". Later runs find them there and reuse them.
* The share (PROXMOX_SHARE, `proxmox.share`: the container key pairs and the data snapshots): when
  unset, a local run uses /var/lib/proxmox-gitops/share (root's state directory; containers are
  host-wide, so their keys and snapshots are too), or /share when it already holds key pairs from
  earlier runs (the former default: moving it would orphan those containers' keys and snapshots).
  The choice is stored as `proxmox.share` in local/config.local.json.

local/config.local.json is written only when something was generated: atomically, mode 0600, owned
by the owner of the local/ directory (the user who cloned the repository, not root under sudo), and
only when git ignores it (it holds a password). Other keys in it are kept.

Output: one `==> ` line per decision on stderr; on stdout the share directory. Exit codes: 0 done,
2 a config file is not valid JSON, has a key the binary does not take (every one is named, before
the build rather than after it), or the file would not be git-ignored.
"""

import json
import os
import string
import sys

# `secrets` and `subprocess` are imported where they are needed (generating a password, asking
# git): a re-run needs neither, and every local run starts this script (and summary.py imports it).

LOCAL = "local/config.local.json"
BASE = "local/config.json"
DEFAULT_LOGIN = "admin"
PASSWORD_LENGTH = 24
# Letters and digits only: the password reaches config files, URLs and command-line tools of the
# libs (mosquitto, Samba …) and must need no quoting anywhere. 24 of 62 symbols: 142 bits.
PASSWORD_ALPHABET = string.ascii_letters + string.digits
LOCAL_SHARE = "/var/lib/proxmox-gitops/share"
LEGACY_SHARE = "/share"


def say(msg):
    print(f"==> {msg}", file=sys.stderr)


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def read(root, rel):
    path = os.path.join(root, rel)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as e:
        fail(f"{rel}:{e.lineno}: not valid JSON ({e.msg})")
    if not isinstance(value, dict):
        fail(f"{rel}: expected a JSON object")
    unknown = unknown_keys(rel, text, value)
    if unknown:
        fail("\n  ".join([f"{len(unknown)} unknown key(s), refused before the build:"] + unknown))
    return value


# The keys the binary's config files take (src/settings/file.rs: PROXMOX_KEYS, CONTROL_PLANE_KEYS, TOP_KEYS); an
# unknown key is refused here, before the build, as the binary would refuse it after.
PROXMOX_KEYS = (
    "host", "port", "user", "password", "token", "secret", "node", "gateway", "mask", "interface",
    "bridge", "storage", "template", "share",
)
CONTROL_PLANE_KEYS = ("gitea_binary", "gitea_static", "runner_binary")
TOP_KEYS = ("proxmox", "control_plane", "host", "login", "password", "token", "checkout")


def key_line(text, key, start=0):
    """1-based line of the first `"key":` at or after `start` (a heuristic, as the binary's)."""
    needle = json.dumps(key)
    at = text.find(needle, start)
    while at >= 0:
        if text[at + len(needle):].lstrip().startswith(":"):
            return text.count("\n", 0, at) + 1, at + len(needle)
        at = text.find(needle, at + len(needle))
    return None, start


def unknown_keys(rel, text, value):
    """One message per unknown key of a config file, as the binary words it."""
    out = []

    def where(key, json_key, start=0):
        line, _ = key_line(text, key, start)
        return f"{rel}:{line} ({json_key})" if line else f"{rel} ({json_key})"

    proxmox = value.get("proxmox")
    if isinstance(proxmox, dict):
        _, start = key_line(text, "proxmox")
        for k in proxmox:
            if k not in PROXMOX_KEYS:
                takes = ", ".join(f"`{n}`" for n in PROXMOX_KEYS)
                out.append(f"{where(k, f'proxmox.{k}', start)}: unknown key `{k}`; the `proxmox` section takes {takes}")
    control_plane = value.get("control_plane")
    if isinstance(control_plane, dict):
        _, start = key_line(text, "control_plane")
        for k in control_plane:
            if k not in CONTROL_PLANE_KEYS:
                takes = ", ".join(f"`{n}`" for n in CONTROL_PLANE_KEYS)
                out.append(
                    f"{where(k, f'control_plane.{k}', start)}: unknown key `{k}`; the `control_plane` section takes {takes}"
                )
    for k in value:
        if k not in TOP_KEYS:
            takes = ", ".join(f"`{n}`" for n in TOP_KEYS)
            out.append(f"{where(k, k)}: unknown key `{k}`; a config file takes {takes}")
    return out


def nonempty(v):
    return v.strip() if isinstance(v, str) and v.strip() else None


def lookup(env, local, base, var, *keys):
    """The first non-empty of the environment variable, the local file's key, the base file's key."""

    def dig(d):
        for k in keys:
            d = d.get(k) if isinstance(d, dict) else None
        return nonempty(d)

    if nonempty(env.get(var)):
        return nonempty(env.get(var)), f"the environment ({var})"
    for d, rel in ((local, LOCAL), (base, BASE)):
        if dig(d):
            return dig(d), f"{rel} ({'.'.join(keys)})"
    return None, None


def git_ignored(root, rel):
    """True when git ignores `rel`, or `root` is not a git work tree (nothing to commit it to)."""
    import subprocess

    try:
        inside = subprocess.run(
            ["git", "-C", root, "rev-parse", "--is-inside-work-tree"],
            capture_output=True, text=True, check=False,
        )
    except FileNotFoundError:
        return True
    if inside.returncode != 0:
        return True
    r = subprocess.run(["git", "-C", root, "check-ignore", "-q", "--no-index", rel], check=False)
    return r.returncode == 0


def write_private(root, local):
    """Writes local/config.local.json atomically with mode 0600, owned like the local/ directory."""
    path = os.path.join(root, LOCAL)
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".config.local.json.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(local, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        st = os.stat(d)
        if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0):
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def main(argv, env):
    if len(argv) != 2:
        print("usage: settings.py ROOT", file=sys.stderr)
        return 2
    root = argv[1]
    base = read(root, BASE)
    local = read(root, LOCAL)
    generated = []

    login, _ = lookup(env, local, base, "LOGIN", "login")
    if login is None:
        login = DEFAULT_LOGIN
        local["login"] = login
        generated.append("login")
    password, _ = lookup(env, local, base, "PASSWORD", "password")
    if password is None:
        import secrets

        local["password"] = "".join(secrets.choice(PASSWORD_ALPHABET) for _ in range(PASSWORD_LENGTH))
        generated.append("password")

    share, share_from = lookup(env, local, base, "PROXMOX_SHARE", "proxmox", "share")
    if share is None:
        legacy = os.path.isdir(os.path.join(LEGACY_SHARE, ".keys"))
        share = LEGACY_SHARE if legacy else LOCAL_SHARE
        share_from = (
            f"{LOCAL} (proxmox.share), kept where earlier runs left key pairs"
            if legacy
            else f"{LOCAL} (proxmox.share), the local runs' default"
        )
        proxmox = local.get("proxmox")
        if not isinstance(proxmox, dict):
            proxmox = {}
            local["proxmox"] = proxmox
        proxmox["share"] = share
        generated.append("share")

    path = os.path.join(os.path.abspath(root), LOCAL)
    if generated:
        if not git_ignored(root, LOCAL):
            fail(
                f"{LOCAL} is not git-ignored, and it would hold a password: add the line "
                f"`{LOCAL}` (or `*.local.*`) to .gitignore, or set LOGIN, PASSWORD and PROXMOX_SHARE "
                "in the environment"
            )
        write_private(root, local)
    elif os.path.exists(path) and os.stat(path).st_mode & 0o077 and nonempty(local.get("password")):
        os.chmod(path, 0o600)
        say(f"{path} holds a password and was readable by others: its mode is now 0600")

    if "login" in generated or "password" in generated:
        what = " and ".join(
            w
            for w, k in ((f"LOGIN `{login}`", "login"), ("a random PASSWORD", "password"))
            if k in generated
        )
        say(
            f"generated {what} for the containers' services, stored in {path} (mode 0600, "
            f"git-ignored) as \"login\"/\"password\"; later runs reuse them (LOGIN/PASSWORD in the "
            "environment take precedence)"
        )
    say(
        f"share: {share} (container key pairs in .keys/, data snapshots), from {share_from}"
        + ("; set PROXMOX_SHARE or proxmox.share to use another" if "share" in generated else "")
    )
    print(share)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv, os.environ))
