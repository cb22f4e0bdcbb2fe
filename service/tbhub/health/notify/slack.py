"""Slack-format incoming webhooks: `text` (which Mattermost and Rocket.Chat show, and Slack
uses for notifications) and Slack's `blocks` for the same thing laid out. What a run's
writer chose (its path, its tags) is escaped, so it can neither format nor mention. The
URL is the credential: whoever has it may post, so it is kept like a secret."""

from __future__ import annotations

import json
from typing import Any

from tbhub.core.settings import Settings
from tbhub.health.notify.digest import MAX_LISTED, Message, details, headline
from tbhub.health.notify.outbound import post

TEXT_MAX = 3000  # Slack's limit for one section's text


def payload(message: Message) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [section(f"*{escape(message.subject)}*")]
    for incident in message.incidents[:MAX_LISTED]:
        blocks.append(section(
            f"<{escape(incident['link'])}|{escape(headline(incident))}>\n"
            f"{escape(details(incident))}"
        ))  # fmt: skip
    if len(message.incidents) > MAX_LISTED:
        more = len(message.incidents) - MAX_LISTED
        blocks.append({"type": "context",
                       "elements": [{"type": "mrkdwn", "text": f"… and {more} more"}]})  # fmt: skip
    return {"text": escape(message.text)[: TEXT_MAX * 10], "blocks": blocks}


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:TEXT_MAX]}}


def escape(text: str) -> str:
    """Slack's three control characters, and no mention: a run named `<!channel>` or
    `@here` must not page a whole channel (a zero-width space after each @)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("@", "@\u200b")


def send_slack(settings: Settings, url: str, message: Message) -> None:
    body = json.dumps(payload(message), separators=(",", ":")).encode()
    post(settings, url, body, {"Content-Type": "application/json"})
