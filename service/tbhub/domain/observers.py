"""watchdog's observers as the storage watcher uses them, blind to the directories it has no
use for: the compare boards' views of hard links (storage/compare_view.py).

A view is a second copy of the directory tree of every run it shows, which the supervisor
builds when its board starts, adds to every 10 s and deletes when the board stops. Watched,
each of its directories cost an inotify watch, and watchdog's recursive watch re-registered
some of them: it walks a directory the moment it appears, and when the supervisor made a
directory below it after its watch was added and before the walk listed it, the walk and the
directory's own creation event both registered it ("Callback with id ... already exists for
watch ... It will be Overwritten", once per such directory). Left out, a view costs neither a
watch nor a poll's walk. Everything else under the root stays in the one recursive watch: the
trash must, so that a run moved there and back is one move that watchdog follows, not a
directory it still watches coming back as a new one.

The same race is left inside projects (a job making `run/train/` while watchdog walks the
`run/` it just saw), where the directories must be watched. There the warning is filtered, that
message alone: what it "overwrites" is always the same callback (watchdog's id for it is the
id of the recursive watch, and the callback is that watch), and watchdog has no setting for it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from watchdog.observers.api import BaseObserver
from watchdog.observers.inotify import InotifyEmitter, InotifyObserver, InotifyWatchGroup

from tbhub.core.fstype import is_network_filesystem

WatchMode = Literal["inotify", "polling"]


@dataclass(frozen=True)
class Unwatched:
    """Directories (absolute, resolved) that no observer watches or walks into."""

    paths: frozenset[str] = frozenset()

    @classmethod
    def of(cls, paths: Collection[Path]) -> Unwatched:
        return cls(frozenset(str(path.resolve()) for path in paths))

    def covers(self, path: str | bytes) -> bool:
        """True for an unwatched directory and anything below it."""
        text = os.fsdecode(path)
        return any(text == p or text.startswith(p + os.sep) for p in self.paths)

    def scandir(self, path: str | None) -> Iterator[os.DirEntry[str]]:
        """The polling observer's listing: an unwatched directory looks empty."""
        if path is not None and self.covers(path):
            return iter(())
        return os.scandir(path)


def choose_mode(root: Path, configured: str) -> WatchMode:
    if configured in ("inotify", "polling"):
        return configured  # type: ignore[return-value]
    return "polling" if is_network_filesystem(root) else "inotify"


def make_observer(
    mode: WatchMode, poll_interval: float, unwatched: Unwatched = Unwatched()
) -> BaseObserver:
    if mode == "inotify":
        return _InotifyObserver(unwatched)
    from watchdog.observers.polling import PollingObserverVFS

    # lstat: a symlinked directory is a link, not a directory to walk into.
    return PollingObserverVFS(
        stat=os.lstat,
        listdir=unwatched.scandir,  # type: ignore[arg-type]
        polling_interval=poll_interval,
    )


@dataclass
class _WatchGroup(InotifyWatchGroup):
    """watchdog's recursive watch, adding no watch in an unwatched directory: the one place
    it adds a watch, for the root, each directory its walks find, and each one created."""

    unwatched: Unwatched = field(default_factory=Unwatched)

    def _add_callback(self, path: bytes) -> None:
        if not self.unwatched.covers(path):
            super()._add_callback(path)


class _InotifyEmitter(InotifyEmitter):
    def __init__(self, *args: Any, unwatched: Unwatched, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unwatched = unwatched

    def on_thread_start(self) -> None:
        # InotifyEmitter.on_thread_start with the group above.
        self._inotify = _WatchGroup(
            self._inotify_fd,
            os.fsencode(self.watch.path),
            is_recursive=self.watch.is_recursive,
            event_mask=self.get_event_mask_from_filter(),
            follow_symlink=self.watch.follow_symlink,
            unwatched=self.unwatched,
        )


class _InotifyObserver(InotifyObserver):
    def __init__(self, unwatched: Unwatched) -> None:
        ignore_reregistration()
        super().__init__()
        # The emitter class is the one thing InotifyObserver does not let a caller choose.
        self._emitter_class = partial(_InotifyEmitter, unwatched=unwatched)  # type: ignore[assignment]


def ignore_reregistration() -> None:
    """Hide watchdog's warning of a directory its recursive watch registered twice (see the
    module's docstring), and nothing else it warns of."""
    warnings.filterwarnings(
        "ignore",
        message=r"Callback with id '\d+' already exists for watch ",
        category=RuntimeWarning,
        module=r"watchdog\.observers\.inotify\Z",
    )
