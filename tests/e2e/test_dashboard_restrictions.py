"""The restricted-dashboard matrix, through the real nginx, hook and TensorBoard: every route
TensorBoard 2.21 serves x (owner, editor, viewer, share link) x (no restriction, restricted
for both, for viewers only, for share links only).

The route table is checked against the routes the real TensorBoard application registers:
a route TensorBoard adds (or drops) fails `test_every_tensorboard_route_is_in_the_table`
until someone says which dashboard it belongs to."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest
from playwright.sync_api import Browser

from tbhub.core.models import Role
from tbhub.domain.dashboards import CARRIERS, DASHBOARDS, SUGGESTED
from tbhub.domain.projects import set_membership
from tbhub.supervisor.board_process import LauncherArgs, board_plugins
from tests.e2e.conftest import BOTH_DATABASES
from tests.e2e.harness import TbhubServer, wait_until

JSON = {"Accept": "application/json"}
STATIC_PREFIXES = ("/font-roboto/", "/tf-imports/")  # the page's own files: fonts, editor
RUN = "run-a"


@dataclass(frozen=True)
class Probe:
    """One request to a board route: the dashboard whose data it answers (None: the page,
    runs, environment...), and how to ask so the owner's answer is a real one."""

    path: str
    dashboard: str | None
    query: dict[str, str] = field(default_factory=dict)
    form: dict[str, str] | None = None  # POST with this form
    must_work: bool = False  # the owner (no restriction) gets 200


def plugin(name: str, route: str, *, works: bool = False, form: dict[str, str] | None = None,
           **query: str) -> Probe:  # fmt: skip
    return Probe(f"/data/plugin/{name}/{route}", name, query, form, works)


def core(path: str, *, works: bool = False) -> Probe:
    return Probe(path, None, must_work=works)


SERIES = json.dumps([{"plugin": "scalars", "tag": "loss"}])
HIST_FORM = {"requests": json.dumps([{"plugin": "histograms", "tag": "weights", "runId": RUN}])}
CSV = {"run": RUN, "tag": "loss", "format": "csv"}
# Every route of TensorBoard 2.21 (fonts and editor files aside: STATIC_PREFIXES).
ROUTES: dict[str, Probe] = {
    probe.path: probe
    for probe in [
        core("/", works=True), core("/index.html", works=True), core("/index.js", works=True),
        core("/icon_bundle.svg", works=True), core("/chart_worker.js", works=True),
        core("/favicon.ico"), core("/___rPc_sWiTcH___"),
        # Old dashboard URLs: TensorBoard redirects them to its page.
        core("/audio"), core("/events"), core("/graphs"), core("/histograms"), core("/images"),
        core("/data/environment", works=True), core("/data/experiment_runs"),
        core("/data/experiments", works=True), core("/data/logdir", works=True),
        core("/data/notifications"), core("/data/runs", works=True),
        core("/data/window_properties", works=True),
        Probe("/data/plugins_listing", None, must_work=True),
        Probe("/data/plugin_entry.html", "projector", {"name": "projector"}),
        plugin("scalars", "tags", works=True),
        plugin("scalars", "scalars", works=True, run=RUN, tag="loss"),
        plugin("scalars", "scalars_multirun", works=True, form={"tag": "loss", "runs": RUN}),
        plugin("custom_scalars", "layout", works=True),
        plugin("custom_scalars", "scalars", run=RUN, tag="loss"),
        plugin("custom_scalars", "download_data", run=RUN, tag="loss", format="csv"),
        plugin("images", "tags", works=True),
        plugin("images", "images", works=True, run=RUN, tag="sample"),
        plugin("images", "individualImage"),  # its blob key is filled in from `images`
        plugin("audio", "tags", works=True), plugin("audio", "audio", run=RUN, tag="none"),
        plugin("audio", "individualAudio"),
        plugin("text", "tags", works=True),
        plugin("text", "text", works=True, run=RUN, tag="note"),
        plugin("histograms", "tags", works=True),
        plugin("histograms", "histograms", works=True, run=RUN, tag="weights"),
        plugin("distributions", "tags", works=True),
        plugin("distributions", "distributions", works=True, run=RUN, tag="weights"),
        plugin("graphs", "graph", works=True, run=RUN),
        plugin("graphs", "run_metadata", run=RUN, tag="none"), plugin("graphs", "info"),
        plugin("timeseries", "tags", works=True),
        plugin("timeseries", "timeSeries", works=True, form={"requests": SERIES}),
        plugin("timeseries", "imageData", imageId="none"),
        plugin("pr_curves", "tags", works=True), plugin("pr_curves", "pr_curves", run=RUN),
        plugin("mesh", "tags", works=True), plugin("mesh", "meshes", run=RUN, tag="none"),
        plugin("mesh", "data", run=RUN, tag="none"),
        plugin("hparams", "experiment", form={"request": "{}"}),
        plugin("hparams", "session_groups", form={"request": "{}"}),
        plugin("hparams", "metric_evals", form={"request": "{}"}),
        plugin("hparams", "download_data", format="csv"),
        plugin("debugger-v2", "runs", works=True), plugin("debugger-v2", "alerts", run="none"),
        plugin("debugger-v2", "execution/data", run="none"),
        plugin("debugger-v2", "execution/digests", run="none"),
        plugin("debugger-v2", "graph_execution/data", run="none"),
        plugin("debugger-v2", "graph_execution/digests", run="none"),
        plugin("debugger-v2", "source_files/file", run="none"),
        plugin("debugger-v2", "source_files/list", run="none"),
        plugin("debugger-v2", "stack_frames/stack_frames", run="none"),
        plugin("debugger-v2", "graphs/graph_info", run="none"),
        plugin("debugger-v2", "graphs/op_info", run="none"),
        plugin("projector", "runs", works=True), plugin("projector", "bookmarks", run=RUN),
        plugin("projector", "index.js", works=True), plugin("projector", "metadata", run=RUN),
        plugin("projector", "projector_binary.html", works=True),
        plugin("projector", "projector_binary.js", works=True),
        plugin("projector", "sprite_image", run=RUN), plugin("projector", "tensor", run=RUN),
        plugin("projector", "info", run=RUN),
        # The PyTorch profiler, pinned with TensorBoard (on per board, like the projector).
        *(plugin("pytorch_profiler", route, works=True) for route in (
            "index.js", "index.html", "trace_viewer_full.html", "trace_embedding.html",
            "runs")),
        *(plugin("pytorch_profiler", route, run=RUN) for route in (
            "views", "workers", "spans", "overview", "operation", "operation/table",
            "operation/stack", "kernel", "kernel/table", "kernel/tc_pie", "trace",
            "distributed/gpuinfo", "distributed/overlap", "distributed/waittime",
            "distributed/commops", "memory", "memory_curve", "memory_events", "module", "tree",
            "diff", "diffnode")),
    ]
}  # fmt: skip
# The same dashboards asked for other ways TensorBoard routes them: under /experiment/<id>,
# percent-encoded, as a CSV download, as a timeseries request for histograms, a trailing
# slash, the entry page of a dashboard that stays and of one that does not.
VARIANTS = [
    Probe("/experiment/x/data/plugin/histograms/tags", "histograms", must_work=True),
    Probe("/experiment/x/data/plugin/scalars/tags", "scalars", must_work=True),
    Probe("/experiment/x/data/plugins_listing", None, must_work=True),
    Probe("/data/plugin/histo%67rams/tags", "histograms", must_work=True),
    Probe("/data/plugin/%67raphs/graph", "graphs", {"run": RUN}, must_work=True),
    Probe("/data/plugin/histograms/tags/", "histograms", must_work=True),
    Probe("/data/plugin/scalars/scalars", "scalars", CSV, must_work=True),
    Probe("/data/plugin/timeseries/timeSeries", "timeseries", form=HIST_FORM, must_work=True),
    Probe("/data/plugin_entry.html", "scalars", {"name": "scalars"}),
    Probe("/data/plugin_entry.html", "graphs", {"name": "graphs"}),
]
ROLES = ("owner", "editor", "viewer", "share")
# The restriction in each phase: (audience, dashboards); None: no restriction.
PHASES: dict[str, tuple[str, list[str]] | None] = {
    "off": None,
    "both": ("both", list(SUGGESTED)),
    "viewers": ("viewers", list(SUGGESTED)),
    "share_links": ("share_links", list(SUGGESTED)),
}
KEPT = {"scalars", "images", "text"}  # what a restricted audience must still read


def denied(role: str, phase: str) -> set[str]:
    """What the role may not see in the phase, worked out here, apart from tbhub's code: the
    suggested set, and Time Series, which carries histograms."""
    restriction = PHASES[phase]
    if restriction is None or role in ("owner", "editor"):
        return set()
    audience, dashboards = restriction
    if audience != "both" and audience != {"viewer": "viewers", "share": "share_links"}[role]:
        return set()
    return {*dashboards, "timeseries"}


# -- the routes TensorBoard serves ----------------------------------------------------------


# TensorBoard's plugins import its vendored bleach, which warns about html5lib's sanitizer.
pytestmark = pytest.mark.filterwarnings("ignore:html5lib's sanitizer is deprecated")


@pytest.fixture(scope="module")
def tensorboard_routes(tmp_path_factory: pytest.TempPathFactory) -> tuple[set[str], set[str]]:
    """(routes, plugin names) of the real TensorBoard application with every plugin a board
    loads (board_plugins: TensorBoard's and the installed dynamic ones), the projector too."""
    from tensorboard import program
    from tensorboard.backend import application

    logdir = tmp_path_factory.mktemp("empty-logdir")
    board = program.TensorBoard(plugins=board_plugins(LauncherArgs(disabled=set(), flags=[])))
    board.configure(argv=["tensorboard", "--logdir", str(logdir), "--load_fast", "false"])
    provider, multiplexer = board._make_data_provider()
    app = application.TensorBoardWSGIApp(
        board.flags, board.plugin_loaders, provider, board.assets_zip_provider, multiplexer
    )
    routes = {*app.exact_routes, *app.prefix_routes}
    names = {p.plugin_name for p in app._plugins if p.plugin_name != "core"}
    return {r for r in routes if not r.startswith(STATIC_PREFIXES)}, names


def test_every_tensorboard_route_is_in_the_table(
    tensorboard_routes: tuple[set[str], set[str]],
) -> None:
    routes, _ = tensorboard_routes
    assert routes == set(ROUTES), (
        f"routes TensorBoard serves and the table lacks: {sorted(routes - set(ROUTES))}; "
        f"in the table, not served: {sorted(set(ROUTES) - routes)}"
    )
    for path, probe in ROUTES.items():
        if path.startswith("/data/plugin/"):
            assert probe.dashboard == path.split("/")[3], path


def test_the_dashboards_tbhub_knows_are_the_ones_tensorboard_serves(
    tensorboard_routes: tuple[set[str], set[str]],
) -> None:
    _, names = tensorboard_routes
    assert names == DASHBOARDS
    assert set(SUGGESTED) <= DASHBOARDS and set(CARRIERS) <= DASHBOARDS


# -- the matrix ---------------------------------------------------------------------------


def write_logs(run_dir: Path) -> None:
    """Scalars, histograms, images and text (tensorboardX, as a training job writes them) and
    a graph (TensorBoard's own writer)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.graph_pb2 import GraphDef
    from tensorboard.compat.proto.node_def_pb2 import NodeDef
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboardX import SummaryWriter

    rng = np.random.default_rng(0)
    writer = SummaryWriter(str(run_dir))
    for step in range(3):
        writer.add_scalar("loss", 1.0 / (step + 1), step)
        writer.add_histogram("weights", rng.random(50), step)
        writer.add_image("sample", rng.random((3, 8, 8)), step)
        writer.add_text("note", f"step {step}", step)
    writer.close()
    graph = GraphDef(node=[NodeDef(name="x", op="Placeholder"),
                           NodeDef(name="y", op="Relu", input=["x"])])  # fmt: skip
    events = EventFileWriter(str(run_dir))
    events.add_event(Event(wall_time=time.time(), step=0, graph_def=graph.SerializeToString()))
    events.close()


@dataclass
class Board:
    server: TbhubServer
    clients: dict[str, httpx.Client]


@pytest.fixture
def board(make_server: Callable[..., TbhubServer]) -> Iterator[Board]:
    server = make_server()
    for name in ("alice", "bob", "carol"):
        server.add_user(name, f"{name}-password")
    write_logs(server.add_project("vision", owner="alice") / RUN)
    with server.db() as session:
        set_membership(session, project="vision", user="bob", role=Role.editor, actor="test")
        set_membership(session, project="vision", user="carol", role=Role.viewer, actor="test")
    server.cli("admin", "board", "set", "vision", "--plugin", "projector",  # every route live
               "--plugin", "pytorch_profiler")  # fmt: skip
    server.start()
    link = json.loads(server.cli("admin", "share", "create", "vision", "--json").stdout)
    guest = server.client()
    assert guest.get(link["url"]).status_code == 303  # the share cookie, as a browser gets it
    clients = {"owner": server.sign_in("alice", "alice-password"),
               "editor": server.sign_in("bob", "bob-password"),
               "viewer": server.sign_in("carol", "carol-password"), "share": guest}  # fmt: skip
    wait_until(
        lambda: (r := clients["owner"].get("/boards/vision/data/plugin/images/tags")).status_code
        == 200 and r.json(),
        timeout=90, what="the board to read the run",
    )  # fmt: skip
    yield Board(server, clients)


def ask(client: httpx.Client, probe: Probe, phase: str, extra: dict[str, str]) -> httpx.Response:
    # Each phase asks with its own marker, in the URI and in a cookie: nginx keeps a "let in"
    # for a few seconds per exact URI, and one for a caller kept from no dashboard per
    # Cookie header for the whole board; the phases change the answer
    # (test_a_change_shows_... waits instead).
    client.cookies.set("tbhub_phase", phase, domain=client.base_url.host, path="/")
    url = f"/boards/vision{probe.path}"
    params = {**probe.query, **extra, "tbhub_phase": phase}
    if probe.form is not None:
        return client.post(url, params=params, data=probe.form, headers=JSON)
    return client.get(url, params=params, headers=JSON)


def restrict(board: Board, phase: str) -> None:
    restriction = PHASES[phase]
    audience, dashboards = restriction if restriction is not None else ("both", [])
    answer = board.clients["owner"].put(
        "/api/v1/projects/vision/board/settings",
        json={"restricted_dashboards": dashboards, "restricted_audience": audience},
    )
    assert answer.status_code == 200, answer.text
    settings = answer.json()["settings"]
    assert (settings["restricted_dashboards"], settings["restricted_audience"]) == (
        sorted(dashboards), audience)  # fmt: skip


def blob_query(client: httpx.Client) -> dict[str, str]:
    """The query of one stored image, from the images dashboard (the owner always sees it)."""
    images = client.get("/boards/vision/data/plugin/images/images",
                        params={"run": RUN, "tag": "sample"}).json()  # fmt: skip
    return dict(pair.split("=", 1) for pair in images[0]["query"].split("&"))


def error_code(answer: httpx.Response) -> str | None:
    """The code of tbhub's JSON error, if the answer is one."""
    try:
        body = answer.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None


@BOTH_DATABASES  # the gate reads roles, links and restrictions from either kind
def test_restricted_dashboards_answer_no_one_in_their_audience(board: Board) -> None:
    probes = [*ROUTES.values(), *VARIANTS]
    extra = {"/data/plugin/images/individualImage": blob_query(board.clients["owner"])}
    baseline = {
        id(probe): ask(board.clients["owner"], probe, "base", extra.get(probe.path, {}))
        for probe in probes
    }
    for probe in probes:
        status = baseline[id(probe)].status_code
        assert status not in (401, 403), (probe, status)
        if probe.must_work:
            assert status == 200, (probe, status, baseline[id(probe)].text[:200])
    wrong = []
    for phase in PHASES:
        restrict(board, phase)
        for role in ROLES:
            kept_from = denied(role, phase)
            for probe in probes:
                answer = ask(board.clients[role], probe, phase, extra.get(probe.path, {}))
                if probe.dashboard in kept_from:
                    if (answer.status_code, error_code(answer)) != (403, "forbidden"):
                        wrong.append((phase, role, probe.path, probe.query, answer.status_code))
                elif answer.status_code != baseline[id(probe)].status_code:
                    wrong.append((phase, role, probe.path, probe.query, answer.status_code))
                elif probe.path.endswith("/plugins_listing"):
                    tabs = set(answer.json())
                    if tabs & kept_from or not tabs >= KEPT:
                        wrong.append((phase, role, "listing", sorted(tabs)))
                    if not kept_from and not set(SUGGESTED) <= tabs:
                        wrong.append((phase, role, "listing lacks", sorted(tabs)))
    assert not wrong, "\n".join(map(str, wrong))


def test_a_change_from_the_cli_shows_within_the_cache_lifetimes(board: Board) -> None:
    viewer = board.clients["viewer"]
    url = "/boards/vision/data/plugin/histograms/tags"
    assert viewer.get(url, headers=JSON).status_code == 200  # and now cached by nginx
    board.server.cli("admin", "board", "set", "vision", "--restrict-suggested",
                     "--restrict-audience", "viewers")  # fmt: skip
    # The server's restriction cache (10 s) and nginx's "let in" answers (5 s), with room.
    wait_until(lambda: viewer.get(url, headers=JSON).status_code == 403, timeout=25,
               what="the viewer to lose the histograms")  # fmt: skip
    refused = viewer.get(url, headers=JSON)
    assert refused.json()["error"]["code"] == "forbidden"
    assert "histograms dashboard of vision is restricted" in refused.json()["error"]["message"]
    assert board.clients["share"].get(url, headers=JSON).status_code == 200  # viewers only
    assert board.clients["editor"].get(url, headers=JSON).status_code == 200
    # Readers see the setting; only owners change it.
    seen = viewer.get("/api/v1/projects/vision/board/restrictions").json()
    assert (seen["dashboards"], seen["audience"]) == (sorted(SUGGESTED), "viewers")
    for role, status in (("viewer", 403), ("editor", 403), ("owner", 200)):
        answer = board.clients[role].put(
            "/api/v1/projects/vision/board/settings", json={"restricted_dashboards": []}
        )
        assert answer.status_code == status, (role, answer.text)
    assert board.clients["share"].get("/api/v1/projects/vision/board/restrictions").status_code \
        == 401  # fmt: skip


def tabs_seen(browser: Browser, board: Board, role: str) -> str:
    """The text of TensorBoard's dashboard tabs as `role` sees them in Chromium."""
    context = browser.new_context()
    try:
        client = board.clients[role]
        context.add_cookies([{"name": name, "value": value, "url": board.server.base_url}
                             for name, value in client.cookies.items()])  # fmt: skip
        page = context.new_page()
        page.goto(f"{board.server.base_url}/boards/vision/")
        selector = page.locator("plugin-selector")
        selector.get_by_text("Scalars", exact=False).first.wait_for(timeout=30_000)
        return selector.inner_text()
    finally:
        context.close()


def test_the_restricted_tabs_do_not_show_for_the_audience(board: Board, browser: Browser) -> None:
    restrict(board, "viewers")
    owner, viewer = tabs_seen(browser, board, "owner"), tabs_seen(browser, board, "viewer")
    for tab in ("SCALARS", "IMAGES", "TEXT"):
        assert tab in owner.upper() and tab in viewer.upper(), (owner, viewer)
    for tab in ("HISTOGRAMS", "DISTRIBUTIONS", "GRAPHS", "TIME SERIES"):
        assert tab in owner.upper() and tab not in viewer.upper(), (tab, owner, viewer)
