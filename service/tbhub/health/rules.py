"""The detectors' rules: defaults that work with no configuration on the tags torch's
SummaryWriter, the HF Trainer, Lightning and Keras write, and a project's own changes (the
`alert_rules` table: a row per detector an owner changed, a null field meaning the default).

`check_change` is the one validation of a change, for the API and `tbhub admin alerts set`:
an invalid rule is refused with a message naming the detector and the field.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tbhub.core.errors import InvalidInput
from tbhub.core.models import AlertRule

# A loss-like curve: loss, train/loss, epoch_loss (Keras), train_loss_step (Lightning), val_loss.
LOSS_LIKE = r"(?i)(^|[/_])loss([/_]|$)"
# A grad-norm-like curve: train/grad_norm (HF), grad_norm, gradient_norm, grad-norm.
GRAD_NORM_LIKE = r"(?i)grad(ient)?[-_/ ]?norm"
DETECTORS = ("nan", "divergence", "grad_explosion", "plateau", "stalled", "crashed", "finished")
SEVERITY = {
    "nan": "error",
    "divergence": "error",
    "crashed": "error",
    "grad_explosion": "warning",
    "plateau": "warning",
    "stalled": "warning",
    "finished": "info",
}
ON_CURVES = frozenset({"nan", "divergence", "grad_explosion", "plateau"})  # take a tag regex
REGEX_MAX = 255  # alert_rules.tag_regex String(255)
WINDOW_MAX = 100_000
THRESHOLD_MAX = 1e6
MINUTES_MAX = 10 * 24 * 60.0


@dataclass(frozen=True)
class Rule:
    detector: str
    enabled: bool
    tag_regex: str | None = None  # the curves it looks at (None: it looks at no curve)
    threshold: float | None = None  # robust z (divergence, grad_explosion), relative
    # improvement (plateau), minutes (stalled)
    window: int | None = None  # recent points (divergence, grad_explosion), steps (plateau)
    histograms: bool = False  # nan: look into histograms too

    @cached_property
    def pattern(self) -> re.Pattern[str] | None:
        return re.compile(self.tag_regex) if self.tag_regex is not None else None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "detector"}


def defaults(stalled_minutes: float) -> dict[str, Rule]:
    """Every detector's default; `stalled_minutes` is the instance's run_stalled_minutes."""
    return {
        "nan": Rule("nan", True, ".*"),
        "divergence": Rule("divergence", True, LOSS_LIKE, threshold=10.0, window=100),
        "grad_explosion": Rule("grad_explosion", True, GRAD_NORM_LIKE, threshold=10.0, window=100),
        "plateau": Rule("plateau", False, LOSS_LIKE, threshold=0.001, window=1000),
        "stalled": Rule("stalled", True, threshold=stalled_minutes),
        "crashed": Rule("crashed", True),
        "finished": Rule("finished", True),
    }


@dataclass(frozen=True)
class RuleSet:
    """One project's effective rules, and which of them an owner changed."""

    rules: dict[str, Rule]
    customized: frozenset[str] = frozenset()

    def __getitem__(self, detector: str) -> Rule:
        return self.rules[detector]

    def on(self, detector: str) -> bool:
        return self.rules[detector].enabled


FIELDS = ("enabled", "tag_regex", "threshold", "window", "histograms")


def merge(base: dict[str, Rule], rows: list[AlertRule]) -> RuleSet:
    rules = dict(base)
    for row in rows:
        if row.detector not in rules:
            continue  # a detector this version does not know: left alone
        changes = {f: getattr(row, f) for f in FIELDS if getattr(row, f) is not None}
        rules[row.detector] = replace(rules[row.detector], **changes)
    return RuleSet(rules, frozenset(r.detector for r in rows if r.detector in rules))


def effective_rules(session: Session, *, project_id: int, stalled_minutes: float) -> RuleSet:
    rows = session.scalars(select(AlertRule).where(AlertRule.project_id == project_id))
    return merge(defaults(stalled_minutes), list(rows))


def describe(ruleset: RuleSet, stalled_minutes: float) -> list[dict[str, Any]]:
    """The API's and the CLI's view: each detector's effective rule and its default."""
    base = defaults(stalled_minutes)
    return [
        {
            "detector": d,
            **ruleset[d].as_dict(),
            "customized": d in ruleset.customized,
            "default": base[d].as_dict(),
        }
        for d in DETECTORS
    ]


def check_change(detector: str, change: dict[str, Any]) -> dict[str, Any]:
    """A change to one detector's rule, checked: the same dict, or InvalidInput naming what
    is wrong. Keys are FIELDS; a None value goes back to the default."""
    if detector not in DETECTORS:
        raise InvalidInput(f"unknown detector {detector!r}; one of {', '.join(DETECTORS)}")
    unknown = set(change) - set(FIELDS)
    if unknown:
        raise InvalidInput(
            f"{detector}: unknown field(s) {', '.join(sorted(unknown))}; one of {', '.join(FIELDS)}"
        )
    where = f"{detector}:"
    for name in ("enabled", "histograms"):
        if change.get(name) is not None and not isinstance(change[name], bool):
            raise InvalidInput(f"{where} {name} must be true or false")
    if change.get("histograms") and detector != "nan":
        raise InvalidInput(f"{where} only the nan detector looks into histograms")
    regex = change.get("tag_regex")
    if regex is not None:
        if detector not in ON_CURVES:
            raise InvalidInput(f"{where} {detector} is about whole runs and takes no tag regex")
        _check_regex(where, regex)
    threshold = change.get("threshold")
    if threshold is not None:
        _check_threshold(where, detector, threshold)
    window = change.get("window")
    if window is not None:
        if detector not in ("divergence", "grad_explosion", "plateau"):
            raise InvalidInput(f"{where} {detector} takes no window")
        if isinstance(window, bool) or not isinstance(window, int):
            raise InvalidInput(f"{where} window must be a whole number")
        low = 5 if detector != "plateau" else 1
        if not low <= window <= WINDOW_MAX:
            raise InvalidInput(
                f"{where} window must be between {low} and {WINDOW_MAX}, not {window}"
            )
    return change


def _check_regex(where: str, regex: Any) -> None:
    if not isinstance(regex, str) or not regex:
        raise InvalidInput(f"{where} tag_regex must be a non-empty regular expression")
    if len(regex) > REGEX_MAX:
        raise InvalidInput(f"{where} tag_regex is longer than {REGEX_MAX} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in regex):
        raise InvalidInput(f"{where} tag_regex may not hold control characters")
    try:
        re.compile(regex)
    except re.error as exc:
        raise InvalidInput(
            f"{where} tag_regex {regex!r} is not a regular expression: {exc}"
        ) from None


def _check_threshold(where: str, detector: str, threshold: Any) -> None:
    if detector in ("nan", "crashed", "finished"):
        raise InvalidInput(f"{where} {detector} takes no threshold")
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise InvalidInput(f"{where} threshold must be a number")
    value = float(threshold)
    high = MINUTES_MAX if detector == "stalled" else THRESHOLD_MAX
    if not math.isfinite(value) or not 0 < value <= high:
        what = {"stalled": "minutes", "plateau": "a relative improvement"}.get(
            detector, "robust z-scores"
        )
        raise InvalidInput(
            f"{where} threshold ({what}) must be above 0 and at most {high:g}, not {threshold}"
        )


def set_rule(
    session: Session,
    *,
    project_id: int,
    detector: str,
    change: dict[str, Any],
    actor: str,
    reset: bool = False,
) -> None:
    """Apply one checked change (or, `reset`, drop the project's row: all defaults)."""
    check_change(detector, change)
    row = session.scalar(
        select(AlertRule).where(AlertRule.project_id == project_id, AlertRule.detector == detector)
    )
    if reset:
        if row is not None:
            session.delete(row)
        return
    if row is None:
        row = AlertRule(project_id=project_id, detector=detector, updated_by=actor)
        session.add(row)
    for name, value in change.items():
        setattr(row, name, float(value) if name == "threshold" and value is not None else value)
    row.updated_by, row.updated_at = actor, datetime.now(UTC)
    if all(getattr(row, f) is None for f in FIELDS):  # nothing left that differs
        if row in session.new:
            session.expunge(row)
        else:
            session.delete(row)
    session.flush()
