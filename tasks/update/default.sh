#!/bin/sh
# ! cron '0 4 * * 0'
# ! ref release
#
# Task `update` (Sundays at 04:00 UTC): per container, takes a container snapshot, runs a full
# non-interactive package upgrade, reboots when the distribution asks for it and runs the
# health check; when the upgrade or the health check fails, the container is rolled back to the
# snapshot automatically and the run fails, naming it. Containers are updated two at a time;
# one container's failure does not stop the others.
#
# Run by hand from the monorepo: proxmox-gitops update --all   (or --container NAME)
# See docs/tasks.md.
set -eu
exec "${PROXMOX_GITOPS:-proxmox-gitops}" update --all
