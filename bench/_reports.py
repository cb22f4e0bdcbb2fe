"""A benchmark's command line, its rounds of measurements (warm-up first), small statistics,
and its results: for people on stdout or as JSON, with progress lines on stderr.

Every other bench module may use this one; it uses only bench/_places.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import IO, Any, Protocol, TypeVar

from _places import TBHUB_BIN

# -- command line and rounds ------------------------------------------------------------------


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `low`."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}")
        return value

    return parse


def subset_of(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated, non-empty subset of `allowed`, in the order given."""

    def parse(text: str) -> list[str]:
        chosen = [name for name in text.split(",") if name]
        if not chosen or set(chosen) - set(allowed):
            raise argparse.ArgumentTypeError(f"takes a comma-separated subset of {allowed}")
        return chosen

    return parse


def arguments(
    doc: str, *, runs: int | None = None, warmup: int | None = None, json: bool = True,
    tbhub_bin: bool = False, databases: str | None = None,
) -> argparse.ArgumentParser:  # fmt: skip
    """A benchmark's parser, described by the first paragraph of its docstring, with the
    options it shares with others: --runs, --warmup, --databases (given their defaults),
    --json, and --tbhub-bin (the executable to measure, for A/B tests)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if runs is not None:
        parser.add_argument("--runs", type=at_least(1), default=runs, help="measured runs")
    if warmup is not None:
        parser.add_argument(
            "--warmup", type=at_least(0), default=warmup, help="unmeasured warm-up first"
        )
    if json:
        parser.add_argument("--json", action="store_true", help="print the results as JSON")
    if databases is not None:
        parser.add_argument(
            "--databases", default=databases, help="postgresql and/or sqlite, comma-separated"
        )
    if tbhub_bin:
        parser.add_argument(
            "--tbhub-bin", default=TBHUB_BIN, help="the tbhub executable to measure (A/B tests)"
        )
    return parser


S = TypeVar("S")


def timed_rounds(
    repeats: int, sides: Sequence[str], measure: Callable[[int], dict[str, float]],
    describe: Callable[[dict[str, float]], str],
) -> tuple[dict[str, list[float]], dict[str, float]]:  # fmt: skip
    """One unmeasured warm-up round, then `repeats` measured ones, each `measure(index)`:
    seconds per side. Returns every measured round's seconds per side, and their medians."""
    rounds = measure_rounds(repeats, 1, lambda index, _label: [measure(index)], describe)
    results = {side: [r[side] for r in rounds] for side in sides}
    return results, {side: median(seconds) for side, seconds in results.items()}


def measure_rounds(
    repeats: int, warmup: int, measure: Callable[[int, str], list[S]],
    describe: Callable[[S], str], noun: str = "run",
) -> list[S]:  # fmt: skip
    """`warmup` unmeasured rounds (index <= 0), then rounds 1..`repeats`; each round's samples
    logged, the measured ones returned. `measure(index, label)`: `label` names the round in
    file names ("3", "warmup0")."""
    samples: list[S] = []
    for index in range(1 - warmup, repeats + 1):
        label = f"{index}" if index > 0 else f"warmup{-index}"
        measured = measure(index, label)
        tag = "warm-up" if index <= 0 else f"{noun} {index}/{repeats}"
        log(f"{tag}: " + ", ".join(describe(sample) for sample in measured))
        if index > 0:
            samples += measured
    return samples


class Kinded(Protocol):
    @property
    def kind(self) -> str: ...


K = TypeVar("K", bound=Kinded)


def medians(
    samples: Sequence[K], kinds: Sequence[str], value: Callable[[K], float]
) -> dict[str, float]:
    """The median `value` of the samples of each kind."""
    return {kind: median([value(s) for s in samples if s.kind == kind]) for kind in kinds}


# -- reporting --------------------------------------------------------------------------------


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], q: float) -> float:
    """The value below which a share `q` of `values` lies (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def emit_json(data: dict[str, Any], stream: IO[str] = sys.stdout) -> None:
    json.dump(data, stream, indent=2)
    stream.write("\n")


def report(result: dict[str, Any], *, as_json: bool, text: str, to_log: bool = False) -> None:
    """The results: as JSON with --json, else `text` for people, on stdout (or with
    `to_log`, on stderr with the progress lines)."""
    if as_json:
        emit_json(result)
    elif to_log:
        log(text)
    else:
        print(text)


def emit_report(
    benchmark: str, *, data: dict[str, Any], samples: Sequence[Any], n: int, summary: str,
    **figures: Any,
) -> None:  # fmt: skip
    """A benchmark's results as JSON: its name, the data it ran on, every sample (dataclasses),
    its `figures`, the number of measured runs and the one-line summary."""
    emit_json({"benchmark": benchmark, "data": data, "samples": [asdict(s) for s in samples],
               **figures, "n": n, "summary": summary})  # fmt: skip
