"""A response whose body is part of an open file, read in the thread pool as it is sent,
with the file closed however the sending ends; and the headers that keep a downloaded
file from ever being shown as a page of this origin."""

from __future__ import annotations

import os
import re
from urllib.parse import quote

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

CHUNK_BYTES = 4 << 20
# Files a browser may show as text; everything else is bytes to save.
TEXT_SUFFIXES = (".txt", ".log", ".yaml", ".yml", ".csv", ".tsv", ".md", ".cfg", ".ini", ".toml")
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._+-]")


def download_type(path: str) -> str:
    if path.lower().endswith(TEXT_SUFFIXES):
        return "text/plain; charset=utf-8"
    if path.lower().endswith(".json"):
        return "application/json"
    return "application/octet-stream"


def attachment(name: str) -> str:
    """`attachment` with an ASCII fallback name and the exact one as RFC 8187 UTF-8."""
    fallback = _UNSAFE_IN_NAME.sub("_", name).lstrip(".") or "download"
    exact = quote(name.encode("utf-8", "surrogateescape"), safe="")
    return f"attachment; filename=\"{fallback[:200]}\"; filename*=UTF-8''{exact}"


class FileBody(Response):
    """`length` bytes of `fd` from `start`; `fd` is this response's to close."""

    def __init__(
        self,
        fd: int,
        *,
        start: int,
        length: int,
        status_code: int,
        headers: dict[str, str],
        media_type: str,
        send_body: bool,
    ) -> None:
        super().__init__(status_code=status_code, headers=headers, media_type=media_type)
        self.headers["content-length"] = str(length)
        self.fd, self.start, self.length, self.send_body = fd, start, length, send_body

    @staticmethod
    def close_unsent(fd: int) -> None:
        os.close(fd)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code,
                 "headers": self.raw_headers}
            )  # fmt: skip
            offset, left = self.start, self.length if self.send_body else 0
            while left > 0:
                chunk = await anyio.to_thread.run_sync(
                    os.pread, self.fd, min(CHUNK_BYTES, left), offset
                )
                if not chunk:  # cut short since it was opened: the connection ends short too
                    raise OSError(f"the file ended {left} bytes early while it was being sent")
                offset, left = offset + len(chunk), left - len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": left > 0})
            if not self.send_body or self.length == 0:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            os.close(self.fd)
