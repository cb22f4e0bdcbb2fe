"""TensorBoard's data-server module, and the stand-ins the parts of this package put in it."""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar


def ingester() -> Any:
    """`tensorboard.data.server_ingester`, imported on first use (only boards import it).
    Typed loosely: its names may change with TensorBoard, and each part checks its own."""
    from tensorboard.data import server_ingester

    return server_ingester


class StandIn:
    """Stands in for a module (`time`, `subprocess`) of TensorBoard's data-server module:
    what a subclass does not define is that module's own."""

    module: ClassVar[ModuleType]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)
