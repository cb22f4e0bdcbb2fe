"""One message from one or more incidents: a single incident says what happened and where;
a storm folded within a minute becomes a digest listing them (the first MAX_LISTED)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

MAX_LISTED = 20  # incidents spelled out in a digest; the rest are counted

KIND_WORDS = {
    "nan": "non-finite value",
    "divergence": "divergence",
    "grad_explosion": "gradient explosion",
    "plateau": "plateau",
    "stalled": "stalled",
    "crashed": "crashed",
    "finished": "finished",
}


@dataclass(frozen=True)
class Message:
    project: str
    subject: str
    text: str  # plain text with links: the Slack text and the email body
    incidents: tuple[dict[str, Any], ...]  # as the webhook's JSON carries them
    delivery: str  # the id a receiver can tell a repeat by
    kind: str  # incident | digest | test

    @property
    def digest(self) -> bool:
        return self.kind == "digest"


def compose(
    project: str, payloads: Sequence[dict[str, Any]], *, public_url: str, delivery: str
) -> Message:
    incidents = tuple({**p, "link": incident_link(p, public_url)} for p in payloads)
    if len(incidents) == 1:
        one = incidents[0]
        return Message(
            project=project,
            subject=f"[tbhub] {project}: {headline(one)}",
            text=f"{headline(one)}\n{details(one)}\n{one['link']}",
            incidents=incidents,
            delivery=delivery,
            kind="test" if one.get("detector") == "test" else "incident",
        )
    counts = Counter(KIND_WORDS.get(str(p.get("detector")), str(p.get("detector")))
                     for p in incidents)  # fmt: skip
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.most_common())
    lines = [f"{len(incidents)} incidents in {project} ({summary}):"]
    lines += [f"- {headline(p)}: {p['link']}" for p in incidents[:MAX_LISTED]]
    if len(incidents) > MAX_LISTED:
        lines.append(f"… and {len(incidents) - MAX_LISTED} more: {public_url}/projects/"
                     f"{quote(project, safe='')}")  # fmt: skip
    return Message(
        project=project,
        subject=f"[tbhub] {project}: {len(incidents)} incidents ({summary})",
        text="\n".join(lines),
        incidents=incidents,
        delivery=delivery,
        kind="digest",
    )


def headline(payload: dict[str, Any]) -> str:
    if payload.get("detector") == "test":
        return "a test message"
    kind = KIND_WORDS.get(str(payload.get("detector")), str(payload.get("detector")))
    where = payload.get("run_path") or "a run"
    tag = f" {payload['tag']}" if payload.get("tag") else ""
    return f"{kind} in {where}{tag}"


def details(payload: dict[str, Any]) -> str:
    if payload.get("message"):
        return str(payload["message"])
    parts = []
    if payload.get("step") is not None:
        parts.append(f"step {payload['step']}")
    value = payload.get("value_text") or payload.get("value")
    if value is not None:
        parts.append(f"value {value}")
    return ", ".join(parts) or "no details"


def incident_link(payload: dict[str, Any], public_url: str) -> str:
    """The incident's own link (helper A's board_path: the board filtered to its run and
    tag) when it has one, else the run's page, else the project's."""
    project = quote(str(payload.get("project", "")), safe="")
    if payload.get("board_path"):
        return f"{public_url}{payload['board_path']}"
    if payload.get("run_id") is not None:
        return f"{public_url}/projects/{project}/runs/{payload['run_id']}"
    return f"{public_url}/projects/{project}"
