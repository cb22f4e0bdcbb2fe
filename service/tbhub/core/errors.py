"""Typed errors, mapped once to the JSON error shape and to the CLI message style."""

from __future__ import annotations


class TbhubError(Exception):
    """An error a user can act on. `code` is stable; `message` says what to do next."""

    code = "error"
    http_status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def as_json(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


class InvalidInput(TbhubError):
    code = "invalid_input"
    http_status = 422


class NotFound(TbhubError):
    code = "not_found"
    http_status = 404


class AlreadyExists(TbhubError):
    code = "already_exists"
    http_status = 409


class NotAuthenticated(TbhubError):
    code = "not_authenticated"
    http_status = 401


class Forbidden(TbhubError):
    code = "forbidden"
    http_status = 403


class ConfigError(TbhubError):
    code = "config_error"
    http_status = 500


class NoInstance(ConfigError):
    """A command that acts on an instance found none where its settings point."""

    code = "no_instance"


class SettingsDisagree(ConfigError):
    """A command's setting differs from the one the server runs with."""

    code = "settings_disagree"


class UnsafePath(TbhubError):
    code = "unsafe_path"
    http_status = 400


class NameTooLong(UnsafePath):
    """A path, or a name in it, longer than the filesystem (or tbhub's hidden names) allow."""

    code = "name_too_long"


class AmbiguousSession(TbhubError):
    """The request carries the session cookie more than once or under another spelling, so
    nginx and tbhub could read two different credentials from it: it is refused."""

    code = "ambiguous_session"
    http_status = 400


class DatabaseUnavailable(TbhubError):
    code = "database_unavailable"
    http_status = 503


class StorageUnavailable(TbhubError):
    """A project's storage did not answer in time, or its mount is gone (ENOTCONN, ESTALE):
    a hung or dropped network filesystem. Nothing was read, written or decided."""

    code = "storage_unavailable"
    http_status = 503


class JobBusy(TbhubError):
    code = "job_busy"
    http_status = 409


class ArchiveFailed(TbhubError):
    """Writing or reading back a run's archive failed; the run stays where it was."""

    code = "archive_failed"
    http_status = 500


class BackupFailed(TbhubError):
    code = "backup_failed"
    http_status = 500


class BadRequest(TbhubError):
    code = "bad_request"
    http_status = 400


# -- uploads (issue 8) ----------------------------------------------------------------------------


class ChecksumMismatch(TbhubError):
    code = "checksum_mismatch"
    http_status = 400


class OffsetMismatch(TbhubError):
    """A chunk that does not start where the file ends; `offset` is where it does."""

    code = "offset_mismatch"
    http_status = 409

    def __init__(self, message: str, *, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class TooLarge(TbhubError):
    code = "too_large"
    http_status = 413


class InsufficientStorage(TbhubError):
    code = "insufficient_storage"
    http_status = 507


class BoardUnavailable(TbhubError):
    """A running board that did not answer the control plane (the filtered plugins listing)."""

    code = "board_unavailable"
    http_status = 502
