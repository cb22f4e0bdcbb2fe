"""TensorBoard's data server, started the way a board needs it: one entry point, `install()`.

TensorBoard (`--load_fast=true`) reads a logdir through `tensorboard-data-server`, a child
process that its module `tensorboard.data.server_ingester` starts, waits for and connects to.
`install()` changes three things in that module of the board's own process, each on its own
(`ingester.py` holds what they share):
- `port_wait.py`: its `time`, so that TensorBoard's wait for the server's port ends once the
  port is written, not at its next half-second look;
- `no_delay.py`: its `_make_stub`, so that the server's listener gets TCP_NODELAY before
  TensorBoard connects (its gRPC answers no longer wait out a 40 ms delayed ACK);
- `first_load.py`: its `subprocess`, so that one thread of the board reads the server's log
  and notes its first finished load of the logdir (nginx keeps only answers after it).
Each fails closed alone: if TensorBoard's module has changed shape where a part looks, that
part changes nothing and the board starts and serves as TensorBoard would, without it.
"""

from __future__ import annotations

from tbhub.supervisor.data_server import first_load, no_delay, port_wait
from tbhub.supervisor.data_server.first_load import FirstLoad


def install() -> FirstLoad | None:
    """Install all three parts in this process's TensorBoard. Returns the watch on the first
    load, or None if that part could not be installed (then no answer is marked loaded)."""
    port_wait.install()
    no_delay.install()
    return first_load.install()
