"""A board that really leaks: tbhub's own launcher (real TensorBoard) with a WSGI wrapper that
keeps the MiB a request asks for in `tbhub_test_leak_mib` and never frees them, and names
the instance that answered in an `X-Test-Instance` header.

Used as TBHUB_TENSORBOARD_BIN by bench/memory_restart.py and tests/e2e/test_memory_restart.py
(each writes it out behind a `#!<venv python>` line).
"""

import os
import sys
from urllib.parse import parse_qs

from tbhub.supervisor.board_process import run_board

LEAKED = []
INSTANCE = os.environ.get("TBHUB_INSTANCE", "")


def leaky(wsgi_app):
    def app(environ, start_response):
        mib = parse_qs(environ.get("QUERY_STRING", "")).get("tbhub_test_leak_mib")
        if mib:
            LEAKED.append(b"x" * (int(mib[0]) << 20))

        def start(status, headers, exc_info=None):
            return start_response(status, [*headers, ("X-Test-Instance", INSTANCE)], exc_info)

        return wsgi_app(environ, start)

    return app


if __name__ == "__main__":
    sys.exit(run_board(sys.argv[1:], middleware=leaky))
