"""Serve a fakepve instance for the Rust integration tests and take commands on stdin.

Started by tests/support/fakepve.rs as `python3 fakepve_driver.py DIR [TIME_SCALE [HOST]]`:

* makes a certificate in DIR with fakepve.certs.make_cert (names HOST),
* starts FakePve on HOST (default 127.0.0.1; the tests give only loopback or the host's own
  lxcbr0 address, for containers to reach it), port 0 (the system picks a free one),
* lets the tests answer schema paths fakepve builds from the schema's shapes (the appliance
  index `GET /nodes/{node}/aplinfo`, `GET /nodes/{node}/status` …): `pve.test_answers[(METHOD,
  PATH_TEMPLATE, NODE or None)] = value`, NODE None for every node,
* prints one JSON line {"port": N, "ca": "DIR/fakepve.crt"} on stdout,
* then reads JSON lines {"code": "..."} on stdin. The code runs as the body of an async
  function with `pve` (the FakePve) in scope, on the server's event loop; it may `await`, and
  sets `result` to answer something. The answer is one JSON line {"ok": true, "result": ...}
  or {"ok": false, "error": "..."}.

EOF on stdin stops it.
"""

import asyncio
import copy
import json
import logging
import sys
import os
import textwrap
import threading
import traceback

from fakepve import FakePve
from fakepve.certs import make_cert


def main():
    # Dropped connections (flaky_network) are scenarios here, not server errors worth a traceback.
    logging.getLogger('aiohttp').setLevel(logging.CRITICAL)
    directory = sys.argv[1]
    time_scale = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    host = sys.argv[3] if len(sys.argv) > 3 else '127.0.0.1'
    certfile, keyfile, _ = make_cert(directory, hosts=(host,))
    # The password comes from the Rust side (support::fakepve::PASSWORD), its one definition.
    pve = FakePve(user='root@pam', password=os.environ['FAKEPVE_PASSWORD'], host=host, port=0)
    pve.time_scale = time_scale
    pve.test_answers = {}
    shaped = pve.synthesise

    async def synthesise(match, method, info, user, values):
        for key in ((method, match.template, values.get('node')), (method, match.template, None)):
            if key in pve.test_answers:
                return copy.deepcopy(pve.test_answers[key])
        return await shaped(match, method, info, user, values)
    pve.synthesise = synthesise
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(pve.start(certfile, keyfile))
    print(json.dumps({'port': pve.port, 'ca': certfile}), flush=True)

    async def run(code):
        scope = {'pve': pve, 'asyncio': asyncio}
        src = 'async def __cmd(pve):\n    result = None\n' + textwrap.indent(code, '    ') + '\n    return result\n'
        exec(compile(src, '<command>', 'exec'), scope)
        return await scope['__cmd'](pve)

    def reader():
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                code = json.loads(line)['code']
                result = asyncio.run_coroutine_threadsafe(run(code), loop).result(60)
                answer = {'ok': True, 'result': result}
                text = json.dumps(answer, default=str)
            except Exception as e:  # noqa: BLE001 - reported to the test
                text = json.dumps({'ok': False, 'error': '{0}: {1}\n{2}'.format(
                    type(e).__name__, e, traceback.format_exc())})
            print(text, flush=True)
        loop.call_soon_threadsafe(loop.stop)

    threading.Thread(target=reader, daemon=True).start()
    loop.run_forever()


if __name__ == '__main__':
    main()
