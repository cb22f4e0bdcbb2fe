"""Which runs a run path that names none most likely meant: one suggestion for every
command that takes a run path (`retention pin`, `backup restore --run`)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

SUGGESTED = 5


def similar_runs(run_path: str, runs: Iterable[str]) -> list[str]:
    """Runs ending in `run_path` (given without its group, like `run-0` for `g/run-0`),
    then the closest spellings."""
    known = sorted(set(runs))
    ends = [run for run in known if run.endswith("/" + run_path.strip("/"))]
    close = difflib.get_close_matches(run_path, known, n=SUGGESTED, cutoff=0.5)
    return list(dict.fromkeys([*ends, *close]))[:SUGGESTED]


def similar_runs_hint(run_path: str, runs: Iterable[str], *, otherwise: str) -> str:
    """`runs with similar names: ...`, or `otherwise` when none is near."""
    nearby = similar_runs(run_path, runs)
    return f"runs with similar names: {', '.join(nearby)}" if nearby else otherwise
