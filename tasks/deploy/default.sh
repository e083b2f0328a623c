#!/bin/sh
#
# Task `deploy` (no schedule: run it from the task repository's Actions page, or on a push to its
# main): when the variable AUTO_DEPLOY is true, merges the open release pull requests of the
# monorepo and its libs whose release plan needs no recreate that PROXMOX_GITOPS_RECREATE
# refuses; each merge pushes `release`, which deploys. Without AUTO_DEPLOY it only says so.
#
# Run by hand from the monorepo (with HOST and LOGIN/PASSWORD set):
#   AUTO_DEPLOY=true proxmox-gitops auto-merge --monorepo OWNER/REPO [--dry-run]
# See docs/tasks.md.
set -eu
exec "${PROXMOX_GITOPS:-proxmox-gitops}" auto-merge
