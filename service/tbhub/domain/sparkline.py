"""A sparkline as a small standalone SVG: one polyline through (step, value) points, scaled to
the box, and a <title> naming the curve and its last value. Pure: no I/O.

Names come from event files, which anyone who can write to a project controls, so every
piece of text is XML-escaped."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT, PAD = 112, 26, 2
STROKE = "#0550ae"  # the stylesheet's accent: an <img> does not see the page's CSS


def _number(value: float) -> str:
    return f"{value:.3g}" if value == value else "nan"


def sparkline_points(points: Sequence[tuple[int, float]], *, width: int = WIDTH,
                     height: int = HEIGHT, pad: int = PAD) -> str:  # fmt: skip
    """The polyline's `points` attribute: steps along x, values along y (higher is up); a
    flat curve sits in the middle. Points that are not finite are left out."""
    finite = [(s, v) for s, v in points if math.isfinite(v)]
    if not finite:
        return ""
    steps = [s for s, _ in finite]
    values = [v for _, v in finite]
    low_step, high_step = min(steps), max(steps)
    low, high = min(values), max(values)
    span_x = (high_step - low_step) or 1
    inner_w, inner_h = width - 2 * pad, height - 2 * pad
    coordinates: list[tuple[float, float]] = []
    for step, value in finite:
        x = pad + (step - low_step) / span_x * inner_w if high_step > low_step else width / 2
        y = pad + inner_h / 2 if high == low else pad + (high - value) / (high - low) * inner_h
        coordinates.append((x, y))
    if len(coordinates) == 1:  # one point: a short flat dash, so there is something to see
        x, y = coordinates[0]
        coordinates = [(x - 3, y), (x + 3, y)]
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in coordinates)


def sparkline_svg(points: Sequence[tuple[int, float]], *, name: str | None,
                  width: int = WIDTH, height: int = HEIGHT) -> str:  # fmt: skip
    """The whole SVG document; an empty box titled "no scalars yet" when there is no curve."""
    drawn = sparkline_points(points, width=width, height=height) if name else ""
    if drawn:
        step, value = points[-1]
        title = f"{name}: {_number(value)} at step {step} ({len(points)} points shown)"
        body = (f'<polyline points="{drawn}" fill="none" stroke="{STROKE}" stroke-width="1.5" '
                'stroke-linejoin="round" stroke-linecap="round"/>')  # fmt: skip
    else:
        title = "no scalars yet"
        body = (f'<line x1="{PAD}" y1="{height / 2}" x2="{width - PAD}" y2="{height / 2}" '
                'stroke="#8c959f" stroke-width="1" stroke-dasharray="2 3"/>')  # fmt: skip
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>{escape(title)}</title>{body}</svg>'
    )
