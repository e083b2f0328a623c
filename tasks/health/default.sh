#!/bin/sh
# ! cron '0 */3 * * *'
# ! ref release
#
# Task `health` (every three hours): checks that each deployed container answers and that the
# services its lib declares (SERVICES in container.env; without it: no failed systemd unit) are
# active. The result goes into each lib repository's description on Gitea and, as a table, into
# the job summary; the run fails when something is down.
#
# Run by hand from the monorepo: proxmox-gitops health
# The task workflow (.gitea/workflows/task.yml, rendered by publish) runs this script at the
# root of the monorepo's checkout with the binary in $PROXMOX_GITOPS; see docs/tasks.md.
set -eu
exec "${PROXMOX_GITOPS:-proxmox-gitops}" health --all
