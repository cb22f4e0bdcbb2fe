"""Boards on their own origin: `<project>.<TBHUB_BOARD_DOMAIN>`, each with its own cookie.

TensorBoard is not a security boundary: whoever writes a project's event files controls
what its board page shows. On its own origin, such content cannot act on tbhub's origin
(its cookies, its API) or on another project's board. The browser crosses over with a pass:

1. A board origin without its cookie sends the browser to tbhub's
   `/auth/board-pass?project=P&next=...`, where the signed-in member gets a pass (signed,
   for that project and user, valid 60 s) and is sent back to `/_tbhub/enter?pass=...`.
2. `/_tbhub/enter` on the board origin checks the pass and sets `tbhub_board`, a host-only
   cookie holding a signed board session for that project (user, session epoch, expiry, and
   the id of the tbhub session the pass was made from).
3. The auth hook, asked from a board origin, accepts that cookie for that project only and
   re-checks the user's access, session epoch and session like any session: signing out of
   tbhub ends the board sessions made from that session too.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from tbhub.auth.sessions import Signer

PASS_SECONDS = 60
SLUG = r"[a-z0-9][a-z0-9-]{0,62}"


@dataclass(frozen=True)
class BoardSession:
    user_id: int
    project: str
    epoch: int
    expires_at: int
    session_id: str  # the tbhub session it was made from (auth/user_sessions.py)


class BoardOrigins:
    def __init__(self, *, board_domain: str, public_url: str, secret_key: str, max_age: int):
        self.domain = board_domain.lower()
        parts = urlsplit(public_url)
        self.scheme = parts.scheme
        self.port_suffix = f":{parts.port}" if parts.port else ""
        self._host = re.compile(rf"^({SLUG})\.{re.escape(self.domain)}(?::\d{{1,5}})?$")
        self._passes = Signer(secret_key, "tbhub-board-pass")
        self._sessions = Signer(secret_key, "tbhub-board-session")
        self.max_age = max_age

    def project_of_host(self, host: str | None) -> str | None:
        """The project whose board origin `host` is, or None for any other host."""
        match = self._host.match((host or "").lower())
        return match.group(1) if match else None

    def url(self, project: str, path: str = "/") -> str:
        return f"{self.scheme}://{project}.{self.domain}{self.port_suffix}{path}"

    def issue_pass(self, *, user_id: int, project: str, epoch: int, session_id: str) -> str:
        return self._passes.dump({"u": user_id, "p": project, "v": epoch, "s": session_id,
                                  "e": int(time.time() + PASS_SECONDS)})  # fmt: skip

    def redeem_pass(self, value: str | None, project: str) -> BoardSession | None:
        """A board session for `project` from a pass made for it, or None."""
        data = self._passes.load(value)
        try:
            if data is None or data["p"] != project or int(data["e"]) < time.time():
                return None
            return BoardSession(int(data["u"]), project, int(data["v"]),
                                int(time.time() + self.max_age), str(data["s"]))  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None

    def cookie_value(self, session: BoardSession) -> str:
        return self._sessions.dump({"u": session.user_id, "p": session.project,
                                    "v": session.epoch, "e": session.expires_at,
                                    "s": session.session_id})  # fmt: skip

    def read_cookie(self, value: str | None, project: str) -> BoardSession | None:
        """The board session a cookie carries, if it is for `project` and not expired."""
        data = self._sessions.load(value)
        try:
            if data is None or data["p"] != project or int(data["e"]) < time.time():
                return None
            return BoardSession(int(data["u"]), project, int(data["v"]), int(data["e"]),
                                str(data["s"]))  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None
