"""The curve detectors, pure: fed one run's new points in order, they say what they see.

- nan: a value that is NaN or ±Inf on a matching curve (and in a histogram, when asked).
- divergence: a loss-like curve far above its recent level for `PATIENCE` points in a row.
  "Far" is robust: (value - median) / (1.4826 · MAD) over the last `window` points, so the
  spikes of a noisy loss move neither the level nor the spread much (a mean and standard
  deviation would let one spike hide the next).
- grad_explosion: the same on the logarithm of a grad-norm-like curve (norms spread over
  orders of magnitude), one point is enough.
- plateau: no improvement by a relative `threshold` for `window` steps (off by default).

The run-level detectors (stalled, crashed, finished) look at the runs table (monitor.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from tbhub.health.rules import RuleSet
from tbhub.storage.event_reader import HistogramPoint, ScalarPoint

MIN_POINTS = 20  # recent points a robust level needs before anything is called far from it
LEVELS = ("divergence", "grad_explosion")  # the detectors of a curve's level
PATIENCE = {"divergence": 3, "grad_explosion": 1}
MAD_TO_SIGMA = 1.4826
# The least spread assumed, so a curve that was flat is not "far" from a tiny wobble:
# relative to the level for a loss, absolute in log space for a norm (healthy norms jump
# 2-3x on a spiky batch: with the default threshold only a jump of 12x or more counts).
SPREAD_FLOOR = {"divergence": 0.01, "grad_explosion": 0.25}
TAG_MAX = 255  # incidents.tag String(255)


@dataclass(frozen=True)
class Detection:
    detector: str
    tag: str | None
    step: int | None
    wall_time: float | None
    value: float | None
    message: str


def value_text(value: float | None) -> str | None:
    if value is None:
        return None
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.6g}"


@dataclass
class _Curve:
    recent: deque[float]  # the last `window` values, in order ...
    ordered: list[float] = field(default_factory=list)  # ... and the same values sorted
    above: int = 0  # points in a row far above the level
    best: float | None = None  # plateau: the lowest value so far ...
    best_step: int = 0  # ... and where it was reached
    flat_reported: bool = False


@dataclass
class _Level:
    """A level detector (divergence, grad_explosion) on one curve, its rule made ready."""

    detector: str
    curve: _Curve
    threshold: float
    floor: float  # the least spread (SPREAD_FLOOR)
    patience: int
    in_logs: bool  # grad norms: in log space, the floor absolute; a loss: the floor relative

    def far_above(self, value: float) -> int:
        """Take the curve's next (finite) value; how many points in a row, this one the last,
        have been far above the recent level (0 when this one is not)."""
        curve = self.curve
        if self.in_logs:
            if value <= 0:
                return 0  # not counted, and the run of far points goes on
            value = math.log(value)
        far = _far_above_level(value, curve.ordered, self.floor, not self.in_logs,
                               self.threshold)  # fmt: skip
        _remember(curve, value)
        curve.above = curve.above + 1 if far else 0
        return curve.above

    def detection(self, point: ScalarPoint) -> Detection:
        level = _middle(self.curve.ordered)
        shown = math.exp(level) if self.in_logs else level
        what = "diverging" if self.detector == "divergence" else "exploding"
        return Detection(
            self.detector,
            point.tag,
            point.step,
            point.wall_time,
            point.value,
            f"{point.tag} is {what}: {value_text(point.value)} at step "
            f"{point.step}, its recent level is {value_text(shown)}",
        )


@dataclass
class RunDetectors:
    """One run's curves as the detectors remember them."""

    rules: RuleSet
    curves: dict[tuple[str, str], _Curve] = field(default_factory=dict)
    _matches: dict[tuple[str, str], bool] = field(default_factory=dict)
    _plans: dict[str, tuple[bool, tuple[_Level, ...], bool]] = field(default_factory=dict)

    def matches(self, detector: str, tag: str) -> bool:
        key = (detector, tag)
        hit = self._matches.get(key)
        if hit is None:
            rule = self.rules[detector]
            pattern = rule.pattern
            hit = self._matches[key] = bool(
                rule.enabled and pattern is not None and pattern.search(tag[:TAG_MAX])
            )
        return hit

    def _plan(self, tag: str) -> tuple[bool, tuple[_Level, ...], bool]:
        """What looks at a curve: nan, the level detectors (each with its window and rule
        made ready), plateau; worked out once a tag (a run's points are many, its tags few)."""
        plan = self._plans.get(tag)
        if plan is None:
            levels = tuple(self._level(d, tag) for d in LEVELS if self.matches(d, tag))
            plan = self._plans[tag] = (
                self.matches("nan", tag),
                levels,
                self.matches("plateau", tag),
            )
        return plan

    def _level(self, detector: str, tag: str) -> _Level:
        rule = self.rules[detector]
        assert rule.window is not None and rule.threshold is not None
        return _Level(
            detector,
            self._curve(detector, tag, rule.window),
            rule.threshold,
            SPREAD_FLOOR[detector],
            PATIENCE[detector],
            in_logs=detector == "grad_explosion",
        )

    def feed(self, points: Iterable[ScalarPoint]) -> list[Detection]:
        found: list[Detection] = []
        isfinite = math.isfinite
        plans = self._plans
        for point in points:
            plan = plans.get(point.tag) or self._plan(point.tag)
            nan, levels, plateau = plan
            if not isfinite(point.value):
                if nan:
                    found.append(
                        Detection(
                            "nan",
                            point.tag,
                            point.step,
                            point.wall_time,
                            point.value,
                            f"{point.tag} is {value_text(point.value)} at step {point.step}",
                        )
                    )
                continue
            for level in levels:
                if level.far_above(point.value) >= level.patience:
                    found.append(level.detection(point))
            if plateau:
                hit = self._plateau(point)
                if hit is not None:
                    found.append(hit)
        return found

    def feed_histograms(self, points: Iterable[HistogramPoint]) -> list[Detection]:
        if not (self.rules.on("nan") and self.rules["nan"].histograms):
            return []
        return [
            Detection(
                "nan",
                p.tag,
                p.step,
                p.wall_time,
                None,
                f"histogram {p.tag} holds NaN or infinite values at step {p.step}",
            )
            for p in points
            if not p.finite and self.matches("nan", p.tag)
        ]

    def _curve(self, detector: str, tag: str, window: int) -> _Curve:
        curve = self.curves.get((detector, tag))
        if curve is None:
            curve = self.curves[(detector, tag)] = _Curve(deque(maxlen=window))
        return curve

    def _plateau(self, point: ScalarPoint) -> Detection | None:
        rule = self.rules["plateau"]
        assert rule.window is not None and rule.threshold is not None
        curve = self._curve("plateau", point.tag, 1)
        if curve.best is None or point.value < curve.best - rule.threshold * abs(curve.best):
            curve.best, curve.best_step, curve.flat_reported = point.value, point.step, False
            return None
        if curve.flat_reported or point.step - curve.best_step < rule.window:
            return None
        curve.flat_reported = True
        return Detection(
            "plateau",
            point.tag,
            point.step,
            point.wall_time,
            point.value,
            f"{point.tag} has not improved for {point.step - curve.best_step} "
            f"steps (best {value_text(curve.best)} at step {curve.best_step})",
        )


def _remember(curve: _Curve, value: float) -> None:
    """Add a value to the curve's window, kept sorted as it goes (a bisection and one move
    of memory per point, where sorting the window for each point cost the detectors most of
    their time); the value leaving the window leaves the sorted list too. Values are finite."""
    recent, ordered = curve.recent, curve.ordered
    if len(recent) == recent.maxlen:
        del ordered[bisect_left(ordered, recent[0])]
    recent.append(value)
    insort(ordered, value)


def _far_above_level(
    value: float, ordered: list[float], floor: float, relative: bool, threshold: float
) -> bool | None:
    """Whether `value` lies more than `threshold` robust standard deviations (MAD) above the
    median of the recent values (`ordered`, sorted); None while there are too few points to
    tell. The spread is at least `least`, so a value less than `threshold * least` above the
    median is not far whatever the spread: the second sort, for the MAD, is made only when it
    could matter (a healthy loss is below its recent median half the time and rarely far
    above it)."""
    if len(ordered) < MIN_POINTS:
        return None
    level = _middle(ordered)
    least = max(floor * abs(level) if relative else floor, 1e-12)
    rise = value - level
    if rise <= threshold * least:
        return False
    spread = MAD_TO_SIGMA * _middle(sorted(abs(v - level) for v in ordered))
    return rise / max(spread, least) > threshold


def _middle(ordered: list[float]) -> float:
    n = len(ordered)
    half = n // 2
    return ordered[half] if n % 2 else (ordered[half - 1] + ordered[half]) / 2
