"""TensorBoard's own static files (its webfiles.zip: index.js, the chart worker, fonts, icons)
made cheap to load again, inside the board.

TensorBoard sends them with no validator, and all but its `_file_hash`-stamped scripts with
"no-cache": a returning browser downloads every font and icon again, and keeps even
index.js only for a day. Here each answer carries a strong ETag made of TensorBoard's version
and the file's CRC in the zip, so a browser revalidates with a 304; a URL TensorBoard stamps
with its `_file_hash` is the same bytes for as long as it exists: cached for a year,
immutable. The index page gets a `Link: preload` header for the scripts it names in its last
bytes (the 205 KB page's only <script> tag), so the browser fetches index.js while it still
parses the page. Only files of the zip are touched: data routes (/data/...) never get a
validator or a cache lifetime from here.

The control plane reads the same zip for `stamped_files()`: the stamped scripts a board page
loads (index.js, and the chart worker index.js starts), which the project page prefetches
while its board serves, so that the click on "Open board" finds them in the cache. While a
board starts, the control plane answers those URLs itself (`stamped_file()`: the same bytes,
ETag and lifetime as the board's), so the starting page prefetches them during the wait."""

from __future__ import annotations

import functools
import gzip
import mimetypes
import re
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

IMMUTABLE = "private, max-age=31536000, immutable"
REVALIDATE = "private, no-cache"
INDEX = "index.html"
SCRIPT_SRC = re.compile(rb'<script src="([A-Za-z0-9_./-]+\?_file_hash=[0-9a-f]+)"')
STAMPED_SCRIPT = re.compile(rb'"([A-Za-z0-9_]+\.js\?_file_hash=[0-9a-f]+)"')

StartResponse = Callable[..., Any]


@dataclass(frozen=True)
class Assets:
    """ETag per file of the zip (index.html excepted), and the index page's preload header."""

    etags: dict[str, str]
    preload: str | None


def etag_of(version: str, info: zipfile.ZipInfo) -> str:
    """A file's strong ETag: TensorBoard's version and the file's CRC and size in the zip."""
    return f'"tb-{version}-{info.CRC:08x}-{info.file_size}"'


def read_assets(zip_file: Any, version: str) -> Assets:
    """The ETags of a TensorBoard's webfiles.zip (a path or an open file) and its index
    page's preloads."""
    with zipfile.ZipFile(zip_file) as zip_:
        etags = {
            info.filename: etag_of(version, info)
            for info in zip_.infolist()
            if not info.is_dir() and info.filename != INDEX
        }
        index = zip_.read(INDEX) if INDEX in zip_.namelist() else b""
    scripts = [src.decode() for src in SCRIPT_SRC.findall(index)]
    preload = ", ".join(f"<{src}>; rel=preload; as=script" for src in scripts) or None
    return Assets(etags, preload)


def stamped_in(zip_file: Any) -> tuple[str, ...]:
    """The `_file_hash`-stamped scripts the index page of a webfiles.zip loads, and those
    its scripts load in turn (the chart worker)."""
    with zipfile.ZipFile(zip_file) as zip_:
        names = set(zip_.namelist())
        index = zip_.read(INDEX) if INDEX in names else b""
        scripts = [src.decode() for src in SCRIPT_SRC.findall(index)]
        nested = [
            src.decode()
            for script in scripts
            if script.split("?")[0] in names
            for src in STAMPED_SCRIPT.findall(zip_.read(script.split("?")[0]))
        ]
    return tuple(dict.fromkeys(scripts + nested))


def installed_assets() -> Assets:
    """Those of the TensorBoard this board runs."""
    from tensorboard import assets, version

    with assets.get_default_assets_zip_provider()() as zip_file:
        return read_assets(zip_file, version.VERSION)


@functools.cache
def stamped_files() -> tuple[str, ...]:
    """stamped_in() the installed TensorBoard's zip: the one boards run (a board image is
    built from the same environment); read once per process."""
    from tensorboard import assets

    with assets.get_default_assets_zip_provider()() as zip_file:
        return stamped_in(zip_file)


def _without(headers: Iterable[tuple[str, str]], names: set[str]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k.lower() not in names]


def _matches(if_none_match: str, etag: str) -> bool:
    return any(tag.strip() in (etag, "*") for tag in if_none_match.split(","))


class BoardAssets:
    """WSGI middleware over TensorBoard's app served under `prefix` (its --path_prefix)."""

    def __init__(self, app: Any, prefix: str, assets: Assets) -> None:
        self.app = app
        self.prefix = prefix.rstrip("/") + "/"
        self.assets = assets

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Any:
        path = str(environ.get("PATH_INFO", ""))
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD") or not path.startswith(self.prefix):
            return self.app(environ, start_response)
        name = path[len(self.prefix) :]
        if name in ("", INDEX):
            return self._index(environ, start_response)
        etag = self.assets.etags.get(name)
        if etag is None:
            return self.app(environ, start_response)
        stamped = "_file_hash=" in str(environ.get("QUERY_STRING", ""))
        cache = IMMUTABLE if stamped else REVALIDATE
        if _matches(str(environ.get("HTTP_IF_NONE_MATCH", "")), etag):
            start_response("304 Not Modified", [("ETag", etag), ("Cache-Control", cache)])
            return [b""]

        def with_validator(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            if status.startswith("200"):
                headers = _without(headers, {"cache-control", "expires", "etag"})
                headers += [("ETag", etag), ("Cache-Control", cache)]
            return start_response(status, headers, *exc)

        return self.app(environ, with_validator)

    def _index(self, environ: dict[str, Any], start_response: StartResponse) -> Any:
        preload = self.assets.preload
        if preload is None:
            return self.app(environ, start_response)

        def with_preload(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            if status.startswith("200"):
                headers = [*headers, ("Link", preload)]
            return start_response(status, headers, *exc)

        return self.app(environ, with_preload)


@dataclass(frozen=True)
class StampedFile:
    """One stamped script as a board would send it: gzipped, with its ETag and type."""

    gzipped: bytes
    etag: str
    content_type: str


def stamped_file(src: str) -> StampedFile | None:
    """The installed TensorBoard's file for `src`, one of stamped_files(); None for any other
    URL (only version-stamped scripts may be answered without the board). Only the real
    files are kept: an LRU of whatever URLs were asked let other URLs push them out, and the
    next script read the zip and gzipped 6 MB again."""
    return _stamped_file(src) if src in stamped_files() else None


@functools.cache
def _stamped_file(src: str) -> StampedFile:
    """Read and gzipped once per process (each of the few stamped_files())."""
    from tensorboard import assets, version

    name = src.split("?")[0]
    with assets.get_default_assets_zip_provider()() as zip_file, zipfile.ZipFile(zip_file) as zip_:
        info = zip_.getinfo(name)
        content = zip_.read(name)
    kind = mimetypes.guess_type(name)[0] or "application/javascript"
    gzipped = gzip.compress(content, compresslevel=6, mtime=0)
    return StampedFile(gzipped, etag_of(version.VERSION, info), kind)
