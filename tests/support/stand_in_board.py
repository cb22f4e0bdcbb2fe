"""A stand-in for a board: a small HTTP server that prints TensorBoard's ready line and
answers `/data/environment` (the supervisor's probe) with 200 `{}`, anything else with
200 `[]`. Tests and benchmarks run it where a real TensorBoard would measure the host."""

from __future__ import annotations

STAND_IN = """\
import http.server, sys, time

time.sleep({listen_after})

class Board(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"{{}}" if self.path.endswith("/data/environment") else b"[]"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Board)
print(f"TensorBoard 0.0 at http://127.0.0.1:{{server.server_address[1]}}/ (Press CTRL+C to quit)",
      flush=True)
server.serve_forever()
"""


def stand_in_board(*, listen_after: float = 0.0) -> str:
    """The stand-in's source; it listens `listen_after` seconds after it starts."""
    return STAND_IN.format(listen_after=listen_after)
