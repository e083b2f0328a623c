"""Benchmark: how `provision --all` scales with the number of containers on one node (not a test).

Usage: [SLOW=PVE_SECS] python3 benches/scale_pve.py PATH/TO/proxmox-gitops [SIZES=1,10,50,200]
                                    [JOBS=8] [SCALES=0,0.1] [REPEAT=3]

For each time scale and each size N: a fresh fakepve (in this process, 127.0.0.1, a free port,
its own certificate, one node `pve1`, the template present) with PVE task durations as on real
hardware — `vzcreate` 10 PVE seconds, `vzstart` 3 — multiplied by the time scale (0: tasks end
before their answer, which leaves the client's own cost), a generated monorepo of N libs, and
`proxmox-gitops provision --all --jobs JOBS` (every container absent: create, start, SSH wait,
answered by a banner listener on the container's own loopback address). Then the same
provision again, with nothing to do (reads only). REPEAT rounds per (scale, N); the median
round by wall time is reported, with the spread.

Reported per round:

* wall time of the process; the **limit**: ceil(N / JOBS) x (create + start) x time scale —
  fakepve runs every task concurrently (an asyncio sleep, no per-node limit), so the only
  bound is the client's JOBS containers at a time, each a create then a start; wall / limit,
  and the time above the limit per container. With SLOW set, the first container's start
  takes SLOW PVE seconds instead of 3 (one slow boot among many); the limit is then the best
  schedule of JOBS workers (`limit_of`);
* every API request fakepve answered, per container, and grouped by kind (status polls, cluster
  reads, config reads, ...); the TCP connections they came on (distinct client ports);
* peak RSS and CPU time (user + system) of the `proxmox-gitops` process (GNU time), and
  fakepve's own CPU time (this process, while the binary ran): fakepve's lookups are linear
  scans over its guests, so its cost per request grows with N — that is the fake's, not the
  client's;
* the load average and the CPU count when the round ended.

Each (scale, N) gets a fresh XDG_CACHE_HOME (learned task durations, src/pve/task_wait.rs):
the first tasks of a run are "cold", the later ones use what the earlier ones taught the
process. Prints Markdown; writes nothing else. Loopback only (127.0.0.1 and the 127.1.x.y
addresses of the containers).
"""

import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time

import fakepve.lxc
from fakepve import FakePve

from served import CREATE_SECS, TEMPLATE, Served
START_SECS = 3
# No single run may take longer than this (real seconds): a bound on every wait of the benchmark.
RUN_TIMEOUT = 1800
FIRST_VMID = 1000


def every_new_ct_starts_in(secs, slow):
    """fakepve's start_secs is per container (0 by default): give every new one `secs`, the
    first container (vmid 1000) `slow` when it is set."""
    init = fakepve.lxc.FakeCt.__init__

    def patched(self, vmid, *args, **kwargs):
        init(self, vmid, *args, **kwargs)
        self.start_secs = slow if slow is not None and int(vmid) == FIRST_VMID else secs
    fakepve.lxc.FakeCt.__init__ = patched


def limit_of(n, jobs, scale, slow):
    """The shortest time JOBS workers need for N containers, each a create then a start (the
    first one's start `slow` PVE seconds when set): one worker takes the longest first, every
    other container goes to the worker free first (optimal for equal jobs after one long one)."""
    first = CREATE_SECS + (START_SECS if slow is None else slow)
    free = [0.0] * jobs
    for d in [first] + [CREATE_SECS + START_SECS] * (n - 1):
        free.sort()
        free[0] += d
    return max(free) * scale


def count_connections():
    """Note each request's client address (host, port) in pve.peers: one per TCP connection."""
    record = FakePve._record

    def patched(self, request, body):
        record(self, request, body)
        peer = request.transport.get_extra_info('peername') if request.transport else None
        self.peers.add(tuple(peer[:2]) if peer else None)
    FakePve._record = patched


def address(i):
    """A distinct loopback address per container (the inventory refuses duplicate IPs)."""
    return '127.1.{0}.{1}'.format(i // 250, i % 250 + 1)


def ssh_banners(n):
    """One SSH-banner listener per container address, all on the same port; returns the port."""
    port = 0
    for i in range(n):
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((address(i), port))
        srv.listen(128)
        port = srv.getsockname()[1]

        def serve(srv=srv):
            while True:
                conn, _ = srv.accept()
                try:
                    conn.sendall(b'SSH-2.0-OpenSSH_9.2 bench\r\n')
                except OSError:
                    pass
                finally:
                    conn.close()
        threading.Thread(target=serve, daemon=True).start()
    return port


def make_repo(n, directory):
    for i in range(n):
        lib = os.path.join(directory, 'libs', 'ct{0:04d}'.format(i))
        os.makedirs(lib)
        with open(os.path.join(lib, 'container.env'), 'w') as f:
            f.write('ID={0}\nIP={1}/8\nCORES=1\nMEMORY=512\n'.format(FIRST_VMID + i, address(i)))


def kind(method, path):
    """A request's kind, for the per-kind counts."""
    path = path[len('/api2/json'):] if path.startswith('/api2/json') else path
    if '/tasks/' in path:
        return 'task ' + path.rsplit('/', 1)[1]
    if path == '/access/ticket':
        return 'login'
    m = re.match(r'/nodes/[^/]+/lxc/\d+/(.*)', path)
    if m:
        return '{0} ct {1}'.format(method, m.group(1))
    if method == 'POST' and re.fullmatch(r'/nodes/[^/]+/lxc', path):
        return 'create'
    return '{0} {1}'.format(method, re.sub(r'/nodes/[^/]+/', '/node/', path))


def run(binary, served, repo, share, cache, ssh_port, jobs):
    env = dict(PATH=os.environ.get('PATH', ''), HOME=cache, XDG_CACHE_HOME=cache, PROXMOX_HOST='127.0.0.1',
               PROXMOX_PORT=str(served.pve.port), PROXMOX_USER='root@pam', PROXMOX_PASSWORD='secret',
               PROXMOX_NODE='pve1', PROXMOX_TEMPLATE=TEMPLATE, PROXMOX_STORAGE='local',
               PROXMOX_GATEWAY='127.0.0.254', PROXMOX_SHARE=share, RUST_LOG='warn')
    cmd = ['/usr/bin/time', '-f', 'PGO-TIME %M %U %S', binary, '--repo', repo, '--quiet', 'provision',
           '--pve-ca', served.ca, '--ssh-port', str(ssh_port), '--all', '--jobs', str(jobs)]
    served.call(lambda: served.pve.requests.clear())
    served.call(lambda: served.pve.peers.clear())
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    wall = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    if out.returncode != 0:
        sys.exit('provision failed ({0}):\n{1}\n{2}'.format(out.returncode, out.stdout[-4000:], out.stderr[-4000:]))
    m = re.search(r'PGO-TIME (\d+) ([\d.]+) ([\d.]+)', out.stderr)
    reqs = served.call(lambda: list(served.pve.requests))
    connections = served.call(lambda: len(served.pve.peers))
    kinds = {}
    for method, path, _ in reqs:
        k = kind(method, path)
        kinds[k] = kinds.get(k, 0) + 1
    return dict(wall=wall, rss_kib=int(m.group(1)), cpu=float(m.group(2)) + float(m.group(3)),
                fake_cpu=(cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
                requests=len(reqs), connections=connections, kinds=kinds, load=open('/proc/loadavg').read().split()[:3])


def median_round(rounds):
    return sorted(rounds, key=lambda r: r['wall'])[len(rounds) // 2]


def main():
    binary = os.path.abspath(sys.argv[1])
    sizes = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else '1,10,50,200').split(',')]
    jobs = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    scales = [float(s) for s in (sys.argv[4] if len(sys.argv) > 4 else '0,0.1').split(',')]
    repeat = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    slow = float(os.environ['SLOW']) if os.environ.get('SLOW') else None
    every_new_ct_starts_in(START_SECS, slow)
    count_connections()
    ssh_port = ssh_banners(max(sizes))
    results = []
    for scale in scales:
        for n in sizes:
            fresh, again = [], []
            for _ in range(repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    served = Served(tmp, scale, keep_requests=True)
                    served.pve.peers = set()
                    repo, share, cache = (tempfile.mkdtemp(dir=tmp) for _ in range(3))
                    make_repo(n, repo)
                    fresh.append(run(binary, served, repo, share, cache, ssh_port, jobs))
                    again.append(run(binary, served, repo, share, cache, ssh_port, jobs))
                    served.stop()
            results.append((scale, n, fresh, again))
            r = median_round(fresh)
            print('# scale {0:g}, N {1}: {2:.3f} s, {3} requests, {4:.1f} MiB'.format(
                scale, n, r['wall'], r['requests'], r['rss_kib'] / 1024), file=sys.stderr)
    cpus = os.cpu_count()
    print('Binary: `{0}`; JOBS {1}; {2} round(s) per row, the median by wall time shown (min–max in '
          'brackets); {3} CPU(s){4}.'.format(binary, jobs, repeat, cpus,
                                            '' if slow is None else '; the first container starts in '
                                            '{0:g} PVE s (SLOW), the others in {1}'.format(slow, START_SECS)))
    print()
    print('| time scale | N | wall time | limit | wall / limit | above limit per CT | requests | per CT '
          '| TCP conns | peak RSS | CPU (binary) | CPU per CT | CPU (fakepve) | load avg |')
    print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
    for scale, n, fresh, again in results:
        for label, rounds in (('', fresh), (' again', again)):
            r = median_round(rounds)
            walls = [x['wall'] for x in rounds]
            limit = limit_of(n, jobs, scale, slow) if not label else 0.0
            ratio = '{0:.3f}'.format(r['wall'] / limit) if limit else '-'
            print('| {0:g} | {1}{2} | {3:.3f} s ({4:.3f}–{5:.3f}) | {6:.2f} s | {7} | {8:.1f} ms | {9} | {10:.2f} | {16} '
                  '| {11:.1f} MiB | {12:.2f} s | {13:.1f} ms | {14:.2f} s | {15} |'.format(
                      scale, n, label, r['wall'], min(walls), max(walls), limit, ratio,
                      (r['wall'] - limit) * 1000 / n, r['requests'], r['requests'] / n, r['rss_kib'] / 1024,
                      r['cpu'], r['cpu'] * 1000 / n, r['fake_cpu'], ' '.join(r['load']), r['connections']))
    print()
    print('Requests per container by kind (the median round):')
    print()
    names = sorted({k for _, _, f, a in results for r in f + a for k in r['kinds']})
    print('| time scale | N | ' + ' | '.join(names) + ' |')
    print('|---|---|' + '---|' * len(names))
    for scale, n, fresh, again in results:
        for label, rounds in (('', fresh), (' again', again)):
            r = median_round(rounds)
            print('| {0:g} | {1}{2} | '.format(scale, n, label) + ' | '.join(
                '{0:.2f}'.format(r['kinds'].get(k, 0) / n) for k in names) + ' |')


if __name__ == '__main__':
    main()
