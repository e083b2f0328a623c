"""fakepve for the benchmarks: one instance on its own event-loop thread (not a test).

`Served(directory, scale)` starts fakepve on 127.0.0.1 (port chosen by the kernel) with its own
certificate made in `directory` (`ca` is its path), login root@pam / `secret`, node `pve1`, the
template `TEMPLATE` on storage `local`, tasks taking `scale` real seconds per PVE second and
`vzcreate` taking `CREATE_SECS` PVE seconds. `call(fn)` runs `fn` on fakepve's loop and returns
its result (30 s at most); `stop()` ends it. Loopback only.
"""

import asyncio
import threading

from fakepve import FakePve
from fakepve.certs import make_cert

TEMPLATE = 'debian-13-standard_13.1-2'
CREATE_SECS = 10


class Served:
    def __init__(self, directory, scale=0.0, keep_requests=False):
        cert, key, _ = make_cert(directory, hosts=('127.0.0.1',))
        self.ca = cert
        self.pve = FakePve(user='root@pam', password='secret', host='127.0.0.1', port=0)
        self.pve.time_scale = scale
        self.pve.ct_secs['create'] = CREATE_SECS
        if keep_requests:
            self.pve.max_requests = 10 ** 7  # keep every request: they are counted
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.pve.start(cert, key), self.loop).result(30)
        self.call(lambda: self.pve.store_file('local', TEMPLATE + '_amd64.tar.zst', 1024 ** 2, content='vztmpl'))

    def call(self, fn):
        async def run():
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def stop(self):
        asyncio.run_coroutine_threadsafe(self.pve.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
