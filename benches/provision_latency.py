"""Benchmark: how close one container's provision comes to its physical limit (not a test).

Usage: python3 benches/provision_latency.py PATH/TO/proxmox-gitops [ROUNDS=10] [SCALES=0,1,0.1]

The physical limit of a create + start is the sum of the two PVE tasks' durations: nothing can
notice the end of a task before it ends. fakepve (in this process, 127.0.0.1, its own
certificate, the template present) runs with realistic durations — `vzcreate` 10 PVE seconds
(`ct_secs['create']`), `vzstart` 3 (`start_secs` of every new container) — at each time scale
(1: real durations, 13 s; 0.1: scaled tenfold, 1.3 s; 0: no task time, which leaves the
client's own cost). For each scale, ROUNDS fresh runs of `provision -c ct000` (the container
removed between runs, the SSH wait answered by a banner listener on 127.0.0.1), each a new
process. Per scale, on one fakepve: round 1 is the first create the node ever ran, by a runner
that knows nothing ("first on the node"); then ROUNDS "cold" rounds, each with a new
`XDG_CACHE_HOME` (and `HOME`) — a runner whose home is new every job: nothing learned, but the
node lists the earlier rounds' tasks (src/pve/task_prior.rs); then ROUNDS rounds sharing one cache:
the first of them cold, the later ones use the intervals learned before (src/pve/task_wait.rs) and
are "learning" while an interval is still wide enough for the schedule to probe inside it,
"steady" after ("warm" is both).

Per round: wall time of the process, the limit, wall / limit, the task status polls
(`GET /nodes/…/tasks/…/status`), polls per task-second, and every API request fakepve answered
(login included). Prints Markdown. Loopback only.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import fakepve.lxc

from served import CREATE_SECS, TEMPLATE, Served
START_SECS = 3


def every_new_ct_starts_in(secs):
    """fakepve's start_secs is per container (0 by default): give every new one `secs`."""
    init = fakepve.lxc.FakeCt.__init__

    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.start_secs = secs
    fakepve.lxc.FakeCt.__init__ = patched


def ssh_banner():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(('127.0.0.1', 0))
    srv.listen(16)

    def serve():
        while True:
            conn, _ = srv.accept()
            try:
                conn.sendall(b'SSH-2.0-OpenSSH_9.2 bench\r\n')
            finally:
                conn.close()
    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def repo(directory):
    lib = os.path.join(directory, 'libs', 'ct000')
    os.makedirs(lib)
    with open(os.path.join(lib, 'container.env'), 'w') as f:
        f.write('ID=1000\nIP=127.0.0.1/8\nCORES=1\nMEMORY=512\n')


def provision(binary, served, repo_dir, share, cache, ssh_port):
    env = dict(PATH=os.environ.get('PATH', ''), HOME=cache, XDG_CACHE_HOME=cache, PROXMOX_HOST='127.0.0.1',
               PROXMOX_PORT=str(served.pve.port), PROXMOX_USER='root@pam', PROXMOX_PASSWORD='secret',
               PROXMOX_NODE='pve1', PROXMOX_TEMPLATE=TEMPLATE, PROXMOX_STORAGE='local',
               PROXMOX_GATEWAY='127.0.0.254', PROXMOX_SHARE=share, RUST_LOG='warn')
    cmd = [binary, '--repo', repo_dir, '--quiet', 'provision', '--pve-ca', served.ca, '--ssh-port', str(ssh_port),
           '--container', 'ct000']
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit('provision failed ({0}):\n{1}\n{2}'.format(out.returncode, out.stdout, out.stderr))
    return wall


def learning(cache):
    """True when a learned interval in the cache is still wider than the schedule's `narrow`
    (max(5 ms, 0.25 %), src/pve/task_wait.rs): the next run will probe inside it."""
    path = os.path.join(cache, 'proxmox-gitops', 'pve-task-times.json')
    try:
        with open(path) as f:
            entries = json.load(f).values()
    except OSError:
        return False
    return any(isinstance(e, dict) and e['secs'] - e['lo'] > max(0.005, e['secs'] / 400) for e in entries)


def rate(polls, task_secs):
    return '{0:.2f}'.format(polls / task_secs) if task_secs else '-'


def main():
    binary = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    scales = [float(s) for s in (sys.argv[3] if len(sys.argv) > 3 else '0,1,0.1').split(',')]
    every_new_ct_starts_in(START_SECS)
    ssh_port = ssh_banner()
    print('| time scale | round | wall time | limit (create + start) | wall / limit | status polls '
          '| polls per task-second | API requests |')
    print('|---|---|---|---|---|---|---|---|')
    summary = []
    for scale in scales:
        with tempfile.TemporaryDirectory() as tmp:
            served = Served(tmp, scale)
            shared = tempfile.mkdtemp(dir=tmp)
            limit = (CREATE_SECS + START_SECS) * scale
            # Per kind of round: wall / limit ratios, status polls, API requests.
            kinds = {}
            # Round 1: the first create this node ever ran, by a runner that knows nothing. Then
            # ROUNDS cold runs (a runner whose cache is new each job: nothing learned, but the node
            # lists the earlier tasks), then ROUNDS runs sharing one cache (the first of them cold
            # again, the others warm: learning, then steady).
            plan = ([('new node', None)] + [('cold', None)] * rounds + [('shared', shared)] * rounds)
            for r, (what, cache) in enumerate(plan, 1):
                repo_dir = tempfile.mkdtemp(dir=tmp)
                share = tempfile.mkdtemp(dir=tmp)
                repo(repo_dir)
                if cache is None:
                    cache = tempfile.mkdtemp(dir=tmp)
                    fresh = True
                else:
                    fresh = not os.path.exists(os.path.join(cache, 'proxmox-gitops', 'pve-task-times.json'))
                kind = ('no task time' if not limit else 'first on the node' if what == 'new node'
                        else 'cold' if fresh else 'learning' if learning(cache) else 'steady')
                served.call(lambda: served.pve.cts.clear())
                served.call(lambda: served.pve.requests.clear())
                wall = provision(binary, served, repo_dir, share, cache, ssh_port)
                reqs = served.call(lambda: list(served.pve.requests))
                polls = sum(1 for (m, p, _) in reqs if m == 'GET' and '/tasks/' in p and p.endswith('/status'))
                for k in (kind, 'warm') if kind in ('learning', 'steady') else (kind,):
                    kinds.setdefault(k, []).append((wall / limit if limit else 0.0, polls, len(reqs)))
                ratio = '{0:.3f}'.format(wall / limit) if limit else '-'
                print('| {0:g} | {1} ({2}) | {3:.3f} s | {4:.3f} s | {5} | {6} | {7} | {8} |'.format(
                    scale, r, kind, wall, limit, ratio, polls, rate(polls, limit), len(reqs)))
                sys.stdout.flush()
            served.stop()
            summary.append((scale, limit, kinds))
    print()
    print('| time scale | rounds | wall / limit min / mean / max | status polls per task-second '
          '| API requests mean (min–max) |')
    print('|---|---|---|---|---|')
    for scale, limit, kinds in summary:
        for k in ('no task time', 'first on the node', 'cold', 'warm', 'learning', 'steady'):
            runs = kinds.get(k)
            if not runs:
                continue
            ratios = [x[0] for x in runs]
            polls = sum(x[1] for x in runs)
            reqs = [x[2] for x in runs]
            spread = ('{0:.3f} / {1:.3f} / {2:.3f}'.format(min(ratios), sum(ratios) / len(ratios), max(ratios))
                      if limit else '-')
            print('| {0:g} | {1} ({2}) | {3} | {4} | {5:.1f} ({6}–{7}) |'.format(
                scale, k, len(runs), spread, rate(polls, limit * len(runs)), sum(reqs) / len(reqs),
                min(reqs), max(reqs)))


if __name__ == '__main__':
    main()
