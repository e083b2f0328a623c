#!/usr/bin/env python3
"""The end of a local run: how to reach each lib's container and what its configuration reported.

    python3 local/summary.py ROOT ARTIFACTS SINCE LIB...

ROOT is the monorepo, ARTIFACTS its artifacts directory, SINCE a file whose modification time
marks the start of this run (a configure artifact older than it is from an earlier run and not
shown), LIB the libs deployed, in order. It reads the artifacts the steps wrote:

* `inventory.json`: the share (key pairs), the login (`settings.gitea_login`), each lib's
  `REQUIRES`;
* `provision/LIB.json`: the container, its status and address;
* `configure/LIB.json`: the outputs the lib published (`KEY=value` lines of `$PGO_OUTPUT`: the
  broker's `LIBS_BROKER_ENDPOINT=mqtt://ADDRESS:1883`, the proxy's URL …), the base role's and the
  lib's engine runs (changed and ok counts where the engine reports them, exit code, time), and the
  error of a failed configuration (its last output lines are printed by `configure` itself).

Nothing here is per lib: any lib's outputs and requirements are shown the same way. A lib whose
`REQUIRES` names LOGIN (or PASSWORD) gets a line with the login and where the password is kept
(never the password itself). Prints to stdout; exit 0 (a missing artifact is said, not an error).
"""

import json
import os
import sys

# No __pycache__ in the user's repository (this runs as root under sudo).
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import settings  # noqa: E402  (local/settings.py: the same lookup order as the binary)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def password_source(root, env):
    """Where PASSWORD comes from, in the binary's precedence (never its value)."""
    base = settings.read(root, settings.BASE)
    local = settings.read(root, settings.LOCAL)
    _, source = settings.lookup(env, local, base, "PASSWORD", "password")
    if source and source.startswith(settings.LOCAL):
        return f'"password" in {os.path.join(os.path.abspath(root), settings.LOCAL)}'
    return source or "not set"


def engine_run(label, run):
    """`lib (ansible): 2 changed, 10 ok, 12.3 s` — the counts the engine reports."""
    if not run:
        return None
    if run.get("skipped"):
        return f"{label} ({run.get('engine', '?')}): skipped, unchanged since the last configure"
    parts = []
    if run.get("changed") is not None:
        parts.append(f"{run['changed']} changed")
    if run.get("ok") is not None:
        parts.append(f"{run['ok']} ok")
    if run.get("changed") is None and run.get("exit_code") is not None:
        parts.append(f"exit code {run['exit_code']}")
    parts.append(f"{run.get('duration_ms', 0) / 1000:.1f} s")
    status = "" if run.get("success") else "FAILED, "
    return f"{label} ({run.get('engine', '?')}): {status}{', '.join(parts)}"


def lines_for(lib, inv, prov, conf, password_at):
    """The summary lines of one lib (label, value) after its heading."""
    spec = next((c for c in inv.get("containers", []) if c.get("name") == lib), {})
    share = inv.get("settings", {}).get("share", "/share")
    rows = []
    if conf is not None:
        for key, value in sorted(conf.get("outputs", {}).items()):
            rows.append((key, value))
        requires = spec.get("requires", [])
        if "LOGIN" in requires or "PASSWORD" in requires:
            login = inv.get("settings", {}).get("gitea_login") or "(not set)"
            rows.append(("login", f"{login}, password: {password_at}" if "PASSWORD" in requires else login))
        runs = [r for r in (engine_run("base role", conf.get("base")), engine_run("lib", conf.get("lib"))) if r]
        if conf.get("restore"):
            runs.append("data restored from a snapshot")
        if runs:
            rows.append(("configured", "; ".join(runs)))
        if conf.get("result") == "failed":
            # `configure` printed the log tail just before: point there, once.
            error = conf.get("error", "").removesuffix(" (see the log tail)")
            rows.append(("FAILED", f"{error} (its last output lines are above)"))
    else:
        rows.append(("configured", "not in this run (see the errors above)"))
    if prov and prov.get("address"):
        # The base role disables root logins and authorizes the container key for `config`.
        rows.append(("ssh", f"ssh -i {share}/.keys/{prov['vmid']} config@{prov['address']}"))
    if prov:
        rows.append(("shell", f"lxc-attach -n {prov['hostname']}"))
    return rows


def main(argv, env):
    if len(argv) < 5:
        print("usage: summary.py ROOT ARTIFACTS SINCE LIB...", file=sys.stderr)
        return 2
    root, artifacts, since = argv[1], argv[2], argv[3]
    since_ns = os.stat(since).st_mtime_ns
    inv = load(os.path.join(artifacts, "inventory.json")) or {}
    password_at = password_source(root, env)
    for lib in argv[4:]:
        prov = load(os.path.join(artifacts, "provision", f"{lib}.json"))
        conf_path = os.path.join(artifacts, "configure", f"{lib}.json")
        conf = load(conf_path)
        if conf is not None and os.stat(conf_path).st_mtime_ns < since_ns:
            conf = None
        print()
        if prov and prov.get("result") == "failed":
            print(f"  {lib}: container {prov['hostname']}: provision failed (see the errors above)")
        elif prov:
            print(f"  {lib}: container {prov['hostname']} ({prov.get('status') or 'unknown'}) at {prov.get('address') or 'no address'}")
        else:
            print(f"  {lib}: not provisioned")
        rows = lines_for(lib, inv, prov, conf, password_at)
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            print(f"    {key.ljust(width)}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv, os.environ))
