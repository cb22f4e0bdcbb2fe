"""The upload wire protocol, shared by the server (api/uploads.py) and the uploader
(client/upload.py). Standard library only: the client must import it with just httpx around.

    HEAD  <upload_url><path>   -> Upload-Offset: N, Upload-Complete: ?0|?1
    PATCH <upload_url><path>   Upload-Offset: N, Content-Digest: sha-256=:<base64>:,
                               [Upload-Complete: ?1]; body = the bytes from N on
    POST  <upload_url>         Content-Type: application/x-tar, Content-Digest of the body;
                               body = a tar of whole files, each written as a PUT would

The header names follow the IETF resumable-uploads draft; the digest is RFC 9530's.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile

from tbhub.core.errors import BadRequest, ChecksumMismatch, NameTooLong, UnsafePath

OFFSET_HEADER = "Upload-Offset"
COMPLETE_HEADER = "Upload-Complete"
DIGEST_HEADER = "Content-Digest"
EVENTS_MARK = "tfevents"  # TensorBoard reads every file whose name contains this
PARTIAL_SUFFIX = ".tbhub-partial"  # a file being uploaded: .<name>.tbhub-partial
TAIL_SUFFIX = ".tbhub-tail"  # an event file's record not yet whole: .<name>.tbhub-tail
HIDDEN_SUFFIXES = (PARTIAL_SUFFIX, TAIL_SUFFIX)
MAX_PATH_BYTES = 1024
MAX_NAME_BYTES = 255  # a directory's name: the filesystem's limit
# A file's name leaves room for the hidden name beside it ('.' + name + suffix).
MAX_FILE_NAME_BYTES = MAX_NAME_BYTES - 1 - max(len(suffix) for suffix in HIDDEN_SUFFIXES)
MAX_OFFSET = 2**63 - 1
BATCH_TYPE = "application/x-tar"
MAX_BATCH_FILES = 1000  # whole files in one batch request
_SHA256_MEMBER = re.compile(r"\s*sha-256\s*=\s*:([A-Za-z0-9+/]{43}=):\s*")


def is_event_file(name: str) -> bool:
    return EVENTS_MARK in name


def check_upload_path(raw: str) -> list[str]:
    """The components of a file path inside a run, or UnsafePath (400) for anything that
    could leave the run directory or be read two ways. The path arrives percent-decoded once;
    a '%' left in it means it was encoded twice, so it is refused rather than decoded again."""
    if not raw:
        raise UnsafePath("name the file after /files/, like /files/train/events.out.tfevents.1")
    if len(raw.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise NameTooLong(f"the file path is longer than {MAX_PATH_BYTES} bytes; shorten it")
    bad = next((c for c in raw if c in "\\%" or ord(c) < 32 or ord(c) == 127), None)
    if raw.startswith("/") or bad is not None:
        what = "an absolute path" if raw.startswith("/") else f"the character {bad!r}"
        raise UnsafePath(
            f"file path {raw!r} has {what}; use a relative path with '/' between directories"
        )
    parts = raw.split("/")
    for part in parts:
        if part in ("", ".", "..") or part.endswith(HIDDEN_SUFFIXES):
            raise UnsafePath(
                f"file path {raw!r} has an empty, '.', '..', '*{PARTIAL_SUFFIX}' or "
                f"'*{TAIL_SUFFIX}' part; use a plain relative path inside the run"
            )
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            raise NameTooLong(f"{part[:40]!r}... is longer than {MAX_NAME_BYTES} bytes; shorten it")
    if len(parts[-1].encode("utf-8", "surrogateescape")) > MAX_FILE_NAME_BYTES:
        raise NameTooLong(
            f"the file name {parts[-1][:40]!r}... is longer than {MAX_FILE_NAME_BYTES} bytes "
            "(tbhub keeps a hidden name beside each file while it uploads); shorten it"
        )
    return parts


def hidden_name(name: str) -> str:
    """Where a file's bytes wait until they may be seen: a non-event file until it is whole,
    an event file's last record until it is. Never a name a board reads as events."""
    if is_event_file(name):
        return "." + name.replace(EVENTS_MARK, "tfEvents") + TAIL_SUFFIX
    return "." + name + PARTIAL_SUFFIX


def content_digest(data: bytes | memoryview) -> str:
    return "sha-256=:" + base64.b64encode(hashlib.sha256(data).digest()).decode() + ":"


def expected_sha256(header: str | None) -> bytes:
    """The sha-256 a Content-Digest header names; InvalidInput when there is none."""
    for member in (header or "").split(","):
        match = _SHA256_MEMBER.fullmatch(member)
        if match:
            return base64.b64decode(match.group(1))
    raise BadRequest(
        f"send the chunk's checksum as `{DIGEST_HEADER}: sha-256=:<base64 of its SHA-256>:`"
    )


def check_digest(expected: bytes, actual: bytes) -> None:
    if expected != actual:
        raise ChecksumMismatch(
            "the chunk's SHA-256 does not match its Content-Digest, so nothing was written; "
            "it was damaged on the way: send it again"
        )


def parse_offset(header: str | None) -> int:
    if header is None or not header.isascii() or not header.isdigit():
        raise BadRequest(f"send `{OFFSET_HEADER}: N`, the byte offset the chunk starts at")
    offset = int(header)
    if offset > MAX_OFFSET:
        raise BadRequest(f"{OFFSET_HEADER} {header} is beyond any file")
    return offset


def parse_complete(header: str | None) -> bool:
    if header is None or header == "?0":
        return False
    if header == "?1":
        return True
    raise BadRequest(f"{COMPLETE_HEADER} is `?1` (this chunk ends the file) or `?0`")


def pack_batch(files: list[tuple[str, bytes | memoryview]]) -> bytes:
    """Whole files (path inside the run, bytes) as one tar body for a batch upload."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in files:
            member = tarfile.TarInfo(path)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


def unpack_batch(body: bytes) -> list[tuple[list[str], bytes]]:
    """The files of a batch body (each path checked), or BadRequest/UnsafePath naming what is
    wrong with it; nothing is written before the whole body has been read this way."""
    files: list[tuple[list[str], bytes]] = []
    seen: set[str] = set()
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
            for member in tar:
                if not member.isreg():
                    raise BadRequest(
                        f"{member.name!r} in the batch is not a plain file; send only files "
                        "(their directories are made for them)"
                    )
                if member.name in seen or len(files) == MAX_BATCH_FILES:
                    raise BadRequest(
                        f"a batch holds each path once and at most {MAX_BATCH_FILES} files; "
                        "split it"
                    )
                seen.add(member.name)
                parts = check_upload_path(member.name)
                reader = tar.extractfile(member)
                assert reader is not None  # a regular member always has one
                files.append((parts, reader.read()))
    except tarfile.TarError as exc:
        raise BadRequest(
            f"the batch body is not a whole tar archive ({exc}); send files as `tar cf` writes them"
        ) from None
    return files
