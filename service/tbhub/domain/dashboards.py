"""Dashboards a project restricts: which ones, for whom, and which board request asks for one.

An owner names TensorBoard dashboards (plugin names) that an audience may not see: the
project's viewers, its share links, or both. Editors and owners see every dashboard. The auth
hook reads the board request's own URI, the path TensorBoard will route, and refuses a
restricted dashboard's routes (api/board_gate.py); the plugins listing goes through the
control plane, which leaves the restricted tabs out.

The Time Series dashboard (`timeseries`) multiplexes scalars, histograms and images in one POST
body the hook never sees. It is restricted whenever any kind it carries is: the scalars,
images and text dashboards keep working on their own routes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote

from tbhub.core.errors import InvalidInput

# Every dashboard (plugin) a board serves: TensorBoard 2.21's and the PyTorch profiler's
# (`pytorch_profiler`, pinned with it), by the name in its /data/plugin/<name>/ routes and
# its plugins listing (tests/e2e/test_dashboard_restrictions.py checks this against the
# application a board runs). `core` serves the page itself and is never restricted.
DASHBOARDS = frozenset({
    "timeseries", "scalars", "custom_scalars", "images", "audio", "debugger-v2", "graphs",
    "distributions", "histograms", "text", "pr_curves", "profile_redirect", "hparams", "mesh",
    "wit_redirect", "projector", "pytorch_profiler",
})  # fmt: skip
# What the settings page and `tbhub admin board set --restrict-suggested` offer first: the
# dashboards that show a model's insides rather than its metrics (the profile: the PyTorch
# profiler's, which shows the model's operators, kernels and memory).
SUGGESTED = ("distributions", "graphs", "histograms", "mesh", "projector", "pytorch_profiler")
AUDIENCES = ("viewers", "share_links", "both")
DEFAULT_AUDIENCE = "both"
# A dashboard whose routes carry other dashboards' data, and the kinds it carries.
CARRIERS = {"timeseries": frozenset({"scalars", "histograms", "images"})}

# The path TensorBoard routes after the board's prefix: an optional /experiment/<id> first
# (TensorBoard strips one), then /data/plugin/<name>/... or the plugin entry page.
_PLUGIN_ROUTE = re.compile(r"^(?:/experiment/[^/]*)?/data/plugin/([^/]*)")
_ENTRY_ROUTE = re.compile(r"^(?:/experiment/[^/]*)?/data/plugin_entry\.html/?$")
_LISTING_ROUTE = re.compile(r"^(?:/experiment/[^/]*)?/data/plugins_listing/?$")


@dataclass(frozen=True)
class Restriction:
    """One project's restricted dashboards and the audience they are restricted for."""

    dashboards: frozenset[str] = frozenset()
    audience: str = DEFAULT_AUDIENCE

    def denied(self, *, share_link: bool) -> frozenset[str]:
        """The dashboards a viewer (or a share link) may not see: the restricted ones and
        any carrier of one."""
        kind = "share_links" if share_link else "viewers"
        if not self.dashboards or self.audience not in (kind, "both"):
            return frozenset()
        carriers = {name for name, kinds in CARRIERS.items() if kinds & self.dashboards}
        return self.dashboards | carriers


NO_RESTRICTION = Restriction()


def check_restriction(dashboards: Iterable[str], audience: str | None) -> list[str]:
    """The dashboards, sorted and checked against TensorBoard's; InvalidInput names the
    valid ones."""
    names = sorted(set(dashboards))
    unknown = [name for name in names if name not in DASHBOARDS]
    if unknown:
        shown = ", ".join(repr(name[:64]) for name in unknown[:5])
        raise InvalidInput(
            f"unknown dashboard(s) {shown}; restrict any of: {', '.join(sorted(DASHBOARDS))}"
        )
    if audience is not None and audience not in AUDIENCES:
        raise InvalidInput(
            f"audience {audience[:32]!r} is not one of {', '.join(AUDIENCES)}; "
            f"e.g. viewers to keep share links as they are"
        )
    return names


def board_route(raw_rest: str) -> str:
    """The path TensorBoard routes for a board request: the raw URI after the board's
    prefix, query left off, percent-decoded as TensorBoard's server decodes it."""
    path = raw_rest.split("?", 1)[0]
    return unquote(path, errors="replace") or "/"


def dashboards_of(raw_rest: str) -> frozenset[str]:
    """The dashboards a board request asks for (none: the page, fonts, runs, listing...)."""
    path = board_route(raw_rest)
    match = _PLUGIN_ROUTE.match(path)
    if match is not None:
        return frozenset({match.group(1)})
    if _ENTRY_ROUTE.match(path):
        # TensorBoard reads one `name`; every one given is judged.
        query = raw_rest.split("?", 1)[1] if "?" in raw_rest else ""
        return frozenset(value for key, value in parse_qsl(query, keep_blank_values=True)
                         if key == "name")  # fmt: skip
    return frozenset()


def asks_denied(raw_rest: str, denied: frozenset[str]) -> str | None:
    """The restricted dashboard this request asks for, if it asks for one."""
    asked = dashboards_of(raw_rest) & denied if denied else frozenset()
    return min(asked) if asked else None


def is_listing(raw_rest: str) -> bool:
    return _LISTING_ROUTE.match(board_route(raw_rest)) is not None


def filter_listing(listing: dict[str, object], denied: frozenset[str]) -> dict[str, object]:
    """TensorBoard's plugins listing without the denied dashboards: their tabs do not show."""
    return {name: entry for name, entry in listing.items() if name not in denied}
