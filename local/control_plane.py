#!/usr/bin/env python3
"""What local/run.sh needs to know about the control plane after `config` is configured.

    python3 local/control_plane.py settings ROOT          # KEY=value lines of the local settings
    python3 local/control_plane.py url ARTIFACTS          # Gitea's URL from configure/config.json
    python3 local/control_plane.py pull URL ARTIFACTS     # the release pull request: page, merge URL, repo

`settings` prints, one `KEY=value` per line, with the lookup order of the binary (environment,
local/config.local.json, local/config.json; see local/settings.py): `LOGIN`, `PVE` (`yes` when
PROXMOX_HOST is set: the control plane's own runner deploys to Proxmox VE), and the programs
`PGO_GITEA_BINARY`, `PGO_GITEA_STATIC`, `PGO_RUNNER_BINARY` (empty when not given). Never a
secret. Exit 1 with a message on stderr when an artifact is missing.
"""

import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import settings  # noqa: E402  (the same lookup order as the binary)


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        fail(f"{path} is missing")
    except json.JSONDecodeError as e:
        fail(f"{path}: not valid JSON ({e.msg})")


def one_line(value):
    """A value as bash's `read` takes it back: one line, nothing else."""
    value = value or ""
    if "\n" in value or "\r" in value:
        fail("a setting holds a line break")
    return value


def main(argv, env):
    if len(argv) >= 3 and argv[1] == "settings":
        root = argv[2]
        base = settings.read(root, settings.BASE)
        local = settings.read(root, settings.LOCAL)
        login, _ = settings.lookup(env, local, base, "LOGIN", "login")
        pve, _ = settings.lookup(env, local, base, "PROXMOX_HOST", "proxmox", "host")
        print(f"LOGIN={one_line(login)}")
        print(f"PVE={'yes' if pve else 'no'}")
        for var, key in (
            ("PGO_GITEA_BINARY", "gitea_binary"),
            ("PGO_GITEA_STATIC", "gitea_static"),
            ("PGO_RUNNER_BINARY", "runner_binary"),
        ):
            value, _ = settings.lookup(env, local, base, var, "control_plane", key)
            print(f"{var}={one_line(os.path.abspath(value) if value else '')}")
        return 0
    if len(argv) == 3 and argv[1] == "url":
        art = load(os.path.join(argv[2], "configure", "config.json"))
        url = (art.get("outputs") or {}).get("CONFIG_GITEA_URL")
        if not url:
            fail("configure/config.json has no CONFIG_GITEA_URL: was `config` configured by the root playbook.yml?")
        print(one_line(url))
        return 0
    if len(argv) == 4 and argv[1] == "pull":
        url = argv[2].rstrip("/")
        report = load(os.path.join(argv[3], "publish.json"))
        for repo in report.get("repos") or []:
            if repo.get("path") is None:
                number = (repo.get("pull") or {}).get("number")
                if number is not None:
                    print(f"{url}/{repo['full_name']}/pulls/{number}")
                    print(f"{url}/api/v1/repos/{repo['full_name']}/pulls/{number}/merge")
                    print(repo["full_name"])
                return 0
        fail("publish.json names no monorepo")
    print(__doc__.strip().splitlines()[2:5], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv, os.environ))
