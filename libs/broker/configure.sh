#!/usr/bin/env bash
# Mosquitto MQTT broker, configured by `proxmox-gitops configure` (engine: shell, run as root).
# Contract (environment): IP, LOGIN, PASSWORD, BROKER_PORT (container.env), PGO_OUTPUT.
# The password never appears on a command line: python3 reads it from the environment and
# writes the PBKDF2-SHA512 hash (mosquitto's `$7$` format) into the password file.
set -euo pipefail

missing=()
[ -n "${LOGIN:-}" ] || missing+=(LOGIN)
[ -n "${PASSWORD:-}" ] || missing+=(PASSWORD)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "broker: ${missing[*]} not set: the broker's user and password are the control plane's login." >&2
  echo "Set them in the runner's environment (export LOGIN=… PASSWORD=…; in Gitea Actions the LOGIN" >&2
  echo "variable and PASSWORD secret) or as \"login\"/\"password\" in local/config.local.json." >&2
  exit 2
fi
port="${BROKER_PORT:-1883}"
conf=/etc/mosquitto/conf.d/proxmox-gitops.conf
passwd=/etc/mosquitto/passwd
restart=no

if ! dpkg-query -W -f '${Status}' mosquitto 2>/dev/null | grep -q 'ok installed'; then
  echo "installing mosquitto"
  export DEBIAN_FRONTEND=noninteractive
  # The base role refreshed the package lists (they are at most a day old): install from them,
  # and refresh them only when that fails (a package that moved on the mirror since).
  if ! apt-get install -y -q --no-install-recommends mosquitto; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends mosquitto
  fi
  restart=yes
fi

want="# Managed by proxmox-gitops (libs/broker).
listener ${port}
allow_anonymous false
password_file ${passwd}
"
if [ "$(cat "$conf" 2>/dev/null || true)" != "$(printf '%s' "$want")" ]; then
  printf '%s' "$want" > "$conf.tmp"
  chmod 0644 "$conf.tmp"
  mv "$conf.tmp" "$conf"
  echo "wrote $conf"
  restart=yes
fi

# Exit 0: password file (re)written; 3: already holds LOGIN with PASSWORD.
set +e
python3 - "$passwd" <<'PY'
import base64, hashlib, hmac, os, sys
path, login, password = sys.argv[1], os.environ["LOGIN"], os.environ["PASSWORD"].encode()
def check(line):
    user, _, h = line.partition(":")
    parts = h.split("$")
    if user != login or len(parts) != 5 or parts[1] != "7":
        return False
    salt, want = base64.b64decode(parts[3]), base64.b64decode(parts[4])
    return hmac.compare_digest(hashlib.pbkdf2_hmac("sha512", password, salt, int(parts[2]), len(want)), want)
try:
    lines = [l for l in open(path).read().splitlines() if l.strip()]
    if len(lines) == 1 and check(lines[0]):
        sys.exit(3)
except FileNotFoundError:
    pass
salt = os.urandom(12)
digest = hashlib.pbkdf2_hmac("sha512", password, salt, 101, 64)
entry = "%s:$7$101$%s$%s\n" % (login, base64.b64encode(salt).decode(), base64.b64encode(digest).decode())
tmp = path + ".tmp"
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
with os.fdopen(fd, "w") as f:
    f.write(entry)
import grp
os.chown(tmp, 0, grp.getgrnam("mosquitto").gr_gid)
os.chmod(tmp, 0o640)
os.replace(tmp, path)
PY
rc=$?
set -e
case $rc in
  0) echo "wrote $passwd"; restart=yes ;;
  3) ;;
  *) echo "cannot write $passwd" >&2; exit 1 ;;
esac

# Pre-snapshot hook (see docs/snapshot.md): mosquitto keeps retained messages and durable sessions
# in memory and writes its persistence database only now and then, or on SIGUSR1. Before a
# snapshot archives /var/lib/mosquitto, have it write the database and wait until the new file is
# in place (mosquitto writes `mosquitto.db.new` and renames it).
hook=/etc/proxmox-gitops/pre-snapshot.d/mosquitto
want_hook='#!/bin/sh
# Installed by libs/broker (proxmox-gitops): write the persistence database before a snapshot.
set -eu
db=/var/lib/mosquitto/mosquitto.db
systemctl is-active --quiet mosquitto || exit 0
state() { stat -c "%i %y" "$db" 2>/dev/null || echo none; }
before=$(state)
systemctl kill --kill-whom=main --signal=USR1 mosquitto
i=0
while [ "$(state)" = "$before" ]; do
  i=$((i + 1))
  if [ "$i" -gt 100 ]; then echo "mosquitto did not write $db within 10 s of SIGUSR1" >&2; exit 1; fi
  sleep 0.1
done
echo "mosquitto wrote $db"
'
if [ "$(cat "$hook" 2>/dev/null || true)" != "$(printf '%s' "$want_hook")" ]; then
  mkdir -p "${hook%/*}"
  printf '%s' "$want_hook" > "$hook.tmp"
  chmod 0755 "$hook.tmp"
  mv "$hook.tmp" "$hook"
  echo "wrote $hook"
fi

systemctl enable --quiet mosquitto
if [ "$restart" = yes ] || ! systemctl is-active --quiet mosquitto; then
  systemctl restart mosquitto
  echo "restarted mosquitto"
fi
systemctl is-active --quiet mosquitto

echo "LIBS_BROKER_ENDPOINT=mqtt://${IP}:${port}" >> "$PGO_OUTPUT"
