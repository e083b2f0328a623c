"""Benchmark `proxmox-gitops provision` against fakepve (not a test).

Usage: python3 benches/provision_pve.py PATH/TO/proxmox-gitops [N=50] [JOBS=8]

Runs fakepve in this process (127.0.0.1, free port, time scale 0, its own certificate, the
template present), an SSH-banner listener on 127.0.0.1, and the release binary:

1. one container, create + start (+ SSH wait): wall time and the API requests fakepve answered
   (the client's own count is printed in its debug log as well);
2. N containers with --jobs JOBS: wall time and peak RSS (GNU time -v).

Prints a Markdown table. Loopback only.
"""

import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

from served import TEMPLATE, Served


def ssh_banner(address='127.0.0.1', port=0):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((address, port))
    srv.listen(128)

    def serve():
        while True:
            conn, _ = srv.accept()
            try:
                conn.sendall(b'SSH-2.0-OpenSSH_9.2 bench\r\n')
            finally:
                conn.close()
    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def repo_with(n, directory):
    for i in range(n):
        lib = os.path.join(directory, 'libs', 'ct{0:03d}'.format(i))
        os.makedirs(lib)
        with open(os.path.join(lib, 'container.env'), 'w') as f:
            f.write('ID={0}\nIP={1}/8\nCORES=1\nMEMORY=512\n'.format(1000 + i, address(i)))


def address(i):
    """A distinct loopback address per container (the inventory refuses duplicate IPs)."""
    return '127.0.1.{0}'.format(i + 1)


def run(binary, served, repo, share, ssh_port, extra, timed=False):
    env = dict(PATH=os.environ.get('PATH', ''), PROXMOX_HOST='127.0.0.1', PROXMOX_PORT=str(served.pve.port),
               PROXMOX_USER='root@pam', PROXMOX_PASSWORD='secret', PROXMOX_NODE='pve1', PROXMOX_TEMPLATE=TEMPLATE,
               PROXMOX_STORAGE='local', PROXMOX_GATEWAY='127.0.0.254', PROXMOX_SHARE=share, RUST_LOG='warn')
    cmd = [binary, '--repo', repo, '--quiet', 'provision', '--pve-ca', served.ca, '--ssh-port', str(ssh_port)] + extra
    if timed:
        cmd = ['/usr/bin/time', '-v'] + cmd
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit('provision failed ({0}):\n{1}\n{2}'.format(out.returncode, out.stdout, out.stderr))
    rss = None
    m = re.search(r'Maximum resident set size \(kbytes\): (\d+)', out.stderr)
    if m:
        rss = int(m.group(1))
    return wall, rss


def main():
    binary = os.path.abspath(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    jobs = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    ssh_port = ssh_banner(address(0))
    for i in range(1, n):
        ssh_banner(address(i), ssh_port)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        served = Served(tmp, 0.0)
        # 1. One container: create + start + SSH wait; best of 5 fresh runs.
        best, requests = None, None
        for attempt in range(5):
            repo = tempfile.mkdtemp(dir=tmp)
            share = tempfile.mkdtemp(dir=tmp)
            repo_with(1, repo)
            served.call(lambda: served.pve.cts.clear())
            served.call(lambda: served.pve.requests.clear())
            wall, _ = run(binary, served, repo, share, ssh_port, ['--container', 'ct000'])
            count = served.call(lambda: len(served.pve.requests))
            if best is None or wall < best:
                best, requests = wall, count
        rows.append(('1 container, create + start + SSH wait (best of 5)', '{0:.3f} s'.format(best), str(requests), '-'))
        # 2. N containers, --jobs JOBS.
        repo = tempfile.mkdtemp(dir=tmp)
        share = tempfile.mkdtemp(dir=tmp)
        repo_with(n, repo)
        served.call(lambda: served.pve.cts.clear())
        served.call(lambda: served.pve.requests.clear())
        wall, rss = run(binary, served, repo, share, ssh_port, ['--all', '--jobs', str(jobs)], timed=True)
        count = served.call(lambda: len(served.pve.requests))
        rows.append(('{0} containers, --jobs {1}'.format(n, jobs), '{0:.3f} s'.format(wall), str(count),
                     '{0:.1f} MiB'.format(rss / 1024) if rss else '?'))
        # 3. The same N again: converged, reads only.
        served.call(lambda: served.pve.requests.clear())
        wall, rss = run(binary, served, repo, share, ssh_port, ['--all', '--jobs', str(jobs)], timed=True)
        count = served.call(lambda: len(served.pve.requests))
        rows.append(('{0} containers again (no change), --jobs {1}'.format(n, jobs), '{0:.3f} s'.format(wall), str(count),
                     '{0:.1f} MiB'.format(rss / 1024) if rss else '?'))
    print('| scenario | wall time | API requests | peak RSS |')
    print('|---|---|---|---|')
    for r in rows:
        print('| ' + ' | '.join(r) + ' |')


if __name__ == '__main__':
    main()
