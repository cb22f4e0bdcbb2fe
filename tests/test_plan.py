"""plan(desired, actual) as a table: each row is one situation and the fix it needs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tbhub.supervisor.loop import busy
from tbhub.supervisor.plan import (
    BoardSpec,
    Desired,
    Drain,
    Forget,
    Health,
    Instance,
    MemoryBackoff,
    MiB,
    Plan,
    Policy,
    Start,
    Stop,
    memory_backoff_seconds,
    plan,
)
from tbhub.supervisor.state import restart_backoff

SPEC = BoardSpec(project="p", logdir="/s/p", path_prefix="/boards/p")
NEW_SPEC = replace(SPEC, reload_interval=5)
NOW = 1000.0
TIMEOUT = 60.0
POLICY = Policy(start_timeout=TIMEOUT)


def inst(iid: str, *, spec: BoardSpec = SPEC, started: float = 990.0, alive: bool = True,
         ready: bool = False, upstream: str | None = "127.0.0.1:1") -> Instance:  # fmt: skip
    return Instance(iid, spec.project, spec.fingerprint, started, alive, upstream, ready)


def run(desired: dict[str, Desired], actual: list[Instance]) -> tuple[list[str], dict[str, str]]:
    result = plan(desired, actual, now=NOW, policy=POLICY)
    described = []
    for action in result.actions:
        if isinstance(action, Start):
            described.append(f"start {action.spec.project}")
        elif isinstance(action, Stop):
            described.append(f"stop {action.instance.instance_id}")
        else:
            assert isinstance(action, Forget)
            described.append(f"forget {action.instance.instance_id}")
    return sorted(described), {k: v.state for k, v in result.observed.items()}


WANTED = {"p": Desired(SPEC, running=True)}
UNWANTED = {"p": Desired(SPEC, running=False)}

CASES = [
    # (name, desired, actual, actions, observed)
    ("wanted and absent: start", WANTED, [], ["start p"], {"p": "starting"}),
    ("wanted and ready: nothing", WANTED, [inst("a", ready=True)], [], {"p": "ready"}),
    ("wanted and starting: wait", WANTED, [inst("a")], [], {"p": "starting"}),
    ("not wanted and running: stop", UNWANTED, [inst("a", ready=True)], ["stop a"], {"p": "stopped"}),
    ("not wanted and absent: nothing", UNWANTED, [], [], {"p": "stopped"}),
    ("project deleted: stop", {}, [inst("a", ready=True)], ["stop a"], {}),
    ("crashed and wanted: forget and start", WANTED, [inst("a", alive=False)],
     ["forget a", "start p"], {"p": "starting"}),
    ("crashed and not wanted: forget", UNWANTED, [inst("a", alive=False)], ["forget a"], {"p": "stopped"}),
    ("start timed out: stop it, start after the backoff", WANTED, [inst("a", started=NOW - TIMEOUT - 1)],
     ["stop a"], {"p": "failed"}),
    ("backing off after a crash: wait", {"p": Desired(SPEC, running=True, retry_at=NOW + 5)}, [],
     [], {"p": "failed"}),
    ("backoff over: start", {"p": Desired(SPEC, running=True, retry_at=NOW - 1)}, [],
     ["start p"], {"p": "starting"}),
    ("two ready: keep the newest", WANTED,
     [inst("old", ready=True, started=900), inst("new", ready=True, started=950)],
     ["stop old"], {"p": "ready"}),
    ("new spec: start a replacement, old keeps serving", {"p": Desired(NEW_SPEC, running=True)},
     [inst("old", ready=True)], ["start p"], {"p": "ready"}),
    ("new spec, replacement starting: old keeps serving", {"p": Desired(NEW_SPEC, running=True)},
     [inst("old", ready=True), inst("new", spec=NEW_SPEC, started=995)], [], {"p": "ready"}),
    ("new spec, replacement ready: stop the old", {"p": Desired(NEW_SPEC, running=True)},
     [inst("old", ready=True), inst("new", spec=NEW_SPEC, ready=True, started=995)],
     ["stop old"], {"p": "ready"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "desired", "actual", "actions", "observed"), CASES, ids=[c[0] for c in CASES]
)
def test_plan_table(name: str, desired: dict[str, Desired], actual: list[Instance],
                    actions: list[str], observed: dict[str, str]) -> None:  # fmt: skip
    assert run(desired, actual) == (sorted(actions), observed)


def test_crash_and_timeout_of_wanted_boards_count_as_failures() -> None:
    desired = {
        "p": Desired(SPEC, running=True),
        "q": Desired(replace(SPEC, project="q"), running=True),
        "r": Desired(replace(SPEC, project="r"), running=False),
    }
    actual = [
        inst("crashed", alive=False),
        Instance("slow", "q", desired["q"].spec.fingerprint, NOW - TIMEOUT - 1, True, None, False),
        Instance("stopped-by-hand", "r", desired["r"].spec.fingerprint, 900.0, False, None, False),
    ]
    assert plan(desired, actual, now=NOW, policy=POLICY).failed == {"p", "q"}


def test_restart_backoff_doubles_up_to_five_minutes() -> None:
    assert [restart_backoff(n) for n in (1, 2, 3, 4, 9, 10, 50)] == [1, 2, 4, 8, 256, 300, 300]


def test_ready_board_reports_the_upstream_of_the_current_spec() -> None:
    result = plan(
        {"p": Desired(NEW_SPEC, running=True)},
        [inst("old", ready=True, upstream="127.0.0.1:1"),
         inst("new", spec=NEW_SPEC, ready=True, started=995, upstream="127.0.0.1:2")],
        now=NOW, policy=POLICY,
    )  # fmt: skip
    assert result.observed["p"].upstream == "127.0.0.1:2"
    assert result.observed["p"].instance_id == "new"


def test_spec_fingerprint_changes_with_any_field() -> None:
    assert SPEC.fingerprint == replace(SPEC).fingerprint
    assert SPEC.fingerprint != NEW_SPEC.fingerprint
    assert (
        SPEC.fingerprint != replace(SPEC, extra_args=("--samples_per_plugin=images=0",)).fingerprint
    )
    assert SPEC.fingerprint != replace(SPEC, memory_limit=300 * MiB).fingerprint


def test_an_unset_container_memory_limit_leaves_the_fingerprint_of_earlier_versions() -> None:
    # What BoardSpec.fingerprint hashed before it had a memory_limit: boards running then are
    # adopted by a new version, not replaced.
    import hashlib
    import json

    before = {"project": "p", "logdir": "/s/p", "path_prefix": "/boards/p", "reload_interval": 30,
              "extra_args": [], "samples_per_plugin": "", "plugins": []}  # fmt: skip
    raw = json.dumps(before, sort_keys=True).encode()
    assert SPEC.fingerprint == hashlib.sha256(raw).hexdigest()[:16]


# -- healing: memory limit, hung boards, blue/green drain, memory budget ------------------------

LIMIT = 200 * MiB
OLD = 500.0  # started long before NOW: past its first minutes
HEAL = Policy(start_timeout=TIMEOUT, hung_after=3, over_limit_after=2, drain_hold=7,
              drain_max=300, runs_wait=30, memory_fresh=300)  # fmt: skip
RUNS = frozenset({"run-a", "run-b"})
MOUNT = "the storage of project p is not answering"


def want(**changes: object) -> dict[str, Desired]:
    return {"p": replace(Desired(SPEC, running=True, memory_limit=LIMIT, serving="old"), **changes)}  # type: ignore[arg-type]


def board(iid: str, *, started: float = OLD, ready: bool = True, pss: int | None = 100 * MiB,
          active: int = 0, runs: frozenset[str] | None = None, project: str = "p") -> Instance:  # fmt: skip
    return Instance(iid, project, SPEC.fingerprint, started, True, f"127.0.0.1:{len(iid)}",
                    ready, pss, active, runs)  # fmt: skip


def seen(ready_at: float | None = 900.0, probe_failures: int = 0, over_limit: int = 0) -> Health:
    return Health(ready_at=ready_at, probe_failures=probe_failures, over_limit=over_limit)


def describe(result: Plan) -> list[str]:
    described = []
    for action in result.actions:
        if isinstance(action, Start):
            described.append(f"start {action.spec.project} ({action.reason})")
        elif isinstance(action, Stop):
            described.append(f"{'kill' if action.force else 'stop'} {action.instance.instance_id}")
        else:
            described.append(f"forget {action.instance.instance_id}")
    described += [f"drain {iid}" for iid in result.drains.values() if iid]
    described += [f"evict {project}" for project in result.evicted]
    return sorted(described)


HEAL_CASES = [
    # (name, desired, actual, health, actions, serving instance)
    ("over the limit once: nothing yet", want(), [board("old", pss=300 * MiB)], {},
     [], "old"),
    ("over the limit twice: replacement starts, old keeps serving", want(),
     [board("old", pss=300 * MiB)], {"old": seen(over_limit=1)},
     ["start p (memory)"], "old"),
    ("back under the limit: the count starts again", want(),
     [board("old", pss=150 * MiB)], {"old": seen(over_limit=1)}, [], "old"),
    ("no limit: never a memory restart", want(memory_limit=None),
     [board("old", pss=900 * MiB)], {"old": seen(over_limit=5)}, [], "old"),
    ("replacement starting: wait, old serves", want(),
     [board("old", pss=300 * MiB), board("new", started=990, ready=False)],
     {"old": seen(over_limit=2)}, [], "old"),
    ("replacement ready but missing runs: old serves", want(),
     [board("old", pss=300 * MiB, runs=RUNS), board("new", started=990, runs=frozenset({"run-a"}))],
     {"old": seen(over_limit=2), "new": seen(ready_at=NOW - 5)}, [], "old"),
    ("replacement lists the old runs: switch, old drains", want(),
     [board("old", pss=300 * MiB, runs=RUNS), board("new", started=990, runs=RUNS)],
     {"old": seen(over_limit=2), "new": seen(ready_at=NOW - 1)}, ["drain old"], "new"),
    ("replacement ready long enough: switch even without the runs", want(),
     [board("old", pss=300 * MiB), board("new", started=900)],
     {"old": seen(over_limit=2), "new": seen(ready_at=NOW - 31)}, ["drain old"], "new"),
    ("draining within the hold: old still alive", want(serving="new", draining=Drain("old", NOW - 3)),
     [board("old", pss=300 * MiB), board("new", started=990)],
     {"old": seen(over_limit=2), "new": seen()}, [], "new"),
    ("hold over but requests in flight: wait", want(serving="new", draining=Drain("old", NOW - 8)),
     [board("old", pss=300 * MiB, active=2), board("new", started=990)],
     {"old": seen(over_limit=2), "new": seen()}, [], "new"),
    ("hold over and idle: stop the old", want(serving="new", draining=Drain("old", NOW - 8)),
     [board("old", pss=300 * MiB), board("new", started=990)],
     {"old": seen(over_limit=2), "new": seen()}, ["stop old"], "new"),
    ("requests never end: stop after the drain bound", want(serving="new", draining=Drain("old", NOW - 301)),
     [board("old", pss=300 * MiB, active=1), board("new", started=990)],
     {"old": seen(over_limit=2), "new": seen()}, ["stop old"], "new"),
    # The spec goes back to the draining board's (a plugin turned on, then off at once): the
    # draining board is on its way out, never chosen again; a board of that spec starts.
    ("spec back to the draining board's: a new board starts", want(serving="new", draining=Drain("old", NOW - 3)),
     [board("old"), replace(board("new", started=990), fingerprint="other")],
     {"old": seen(), "new": seen()}, ["start p (spec)"], "new"),
    ("spec back to the draining board's, hold over: it stops too", want(serving="new", draining=Drain("old", NOW - 8)),
     [board("old"), replace(board("new", started=990), fingerprint="other")],
     {"old": seen(), "new": seen()}, ["start p (spec)", "stop old"], "new"),
    ("one failed probe: a ready board keeps serving", want(),
     [board("old", ready=False)], {"old": seen(probe_failures=1)}, [], "old"),
    ("third failed probe: hung, a replacement starts first", want(),
     [board("old", ready=False)], {"old": seen(probe_failures=2)}, ["start p (hung)"], None),
    ("hung and replacement ready: kill the hung group", want(),
     [board("old", ready=False), board("new", started=990)],
     {"old": seen(probe_failures=5), "new": seen()}, ["kill old"], "new"),
    ("operator asked for a restart: replacement starts, old serves", want(restart_after=NOW - 1),
     [board("old")], {"old": seen()}, ["start p (admin)"], "old"),
    ("restart asked before the replacement started: it is not replaced again",
     want(restart_after=980.0, serving="new"), [board("new", started=990)], {"new": seen()}, [], "new"),
    ("crash after earlier failures: the restart says crash", want(serving=None, failures=2), [],
     {}, ["start p (crash)"], None),
    ("exited: forget it, the restart says crash", want(), [replace(board("old"), alive=False)],
     {"old": seen()}, ["forget old", "start p (crash)"], None),
    ("killed at its cgroup limit: forget it, the restart says oom", want(),
     [replace(board("old"), alive=False, exit_reason="oom")], {"old": seen()},
     ["forget old", "start p (oom)"], None),
    # The project's storage does not answer (a hung network mount): a new board would hang
    # the same way, so nothing starts or restarts, however the probes fail (no storm).
    ("storage unavailable, board hung: no restart, it keeps its route", want(storage_unavailable=MOUNT),
     [board("old", ready=False)], {"old": seen(probe_failures=5)}, [], "old"),
    ("storage unavailable, board starting: no second start", want(storage_unavailable=MOUNT, serving=None),
     [board("new", started=990, ready=False)], {"new": seen(ready_at=None)}, [], None),
    ("storage unavailable, no board: none starts", want(storage_unavailable=MOUNT, serving=None),
     [], {}, [], None),
    ("storage unavailable, board exited: forget it, start none", want(storage_unavailable=MOUNT),
     [replace(board("old"), alive=False)], {"old": seen()}, ["forget old"], None),
    ("storage unavailable, backoff over after crashes: still no start",
     want(storage_unavailable=MOUNT, serving=None, failures=3, retry_at=NOW - 1), [], {}, [], None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "desired", "actual", "health", "actions", "serving"),
    HEAL_CASES,
    ids=[c[0] for c in HEAL_CASES],
)
def test_heal_table(name: str, desired: dict[str, Desired], actual: list[Instance],
                    health: dict[str, Health], actions: list[str], serving: str | None) -> None:  # fmt: skip
    result = plan(desired, actual, now=NOW, policy=HEAL, health=health)
    assert describe(result) == sorted(actions)
    assert result.observed["p"].instance_id == serving


def test_a_board_on_unavailable_storage_shows_degraded_with_the_reason() -> None:
    serving = plan(want(storage_unavailable=MOUNT), [board("old", ready=False)], now=NOW,
                   policy=HEAL, health={"old": seen(probe_failures=9)})  # fmt: skip
    assert serving.observed["p"].state == "ready"
    assert serving.observed["p"].note == f"degraded: {MOUNT}"
    gone = plan(want(storage_unavailable=MOUNT, serving=None), [], now=NOW, policy=HEAL)
    assert gone.observed["p"].state == "failed"
    assert gone.observed["p"].note == f"degraded: {MOUNT}"
    assert MOUNT in (gone.observed["p"].error or "")
    assert not gone.failed  # no failure counted: no backoff grows while the mount hangs


BUSY_CASES = [
    # (name, actual, health, whether the next pass should come soon)
    ("over the limit twice: the replacement starts, look again soon",
     [board("old", pss=300 * MiB)], {"old": seen(over_limit=1)}, True),
    ("replacement ready but missing runs: look again soon",
     [board("old", pss=300 * MiB, runs=RUNS), board("new", started=990, runs=frozenset({"run-a"}))],
     {"old": seen(over_limit=2), "new": seen(ready_at=NOW - 5)}, True),
    ("replacement lists the old runs: switched, nothing to hurry",
     [board("old", pss=300 * MiB, runs=RUNS), board("new", started=990, runs=RUNS)],
     {"old": seen(over_limit=2), "new": seen(ready_at=NOW - 1)}, False),
    ("one board within its limit: the interval will do",
     [board("old")], {"old": seen()}, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "actual", "health", "busy_after"), BUSY_CASES, ids=[c[0] for c in BUSY_CASES]
)
def test_a_pass_in_the_middle_of_a_swap_asks_for_the_next_one_soon(
    name: str, actual: list[Instance], health: dict[str, Health], busy_after: bool
) -> None:
    result = plan(want(), actual, now=NOW, policy=HEAL, health=health)
    assert busy(result, actual) is busy_after
    assert ("p" in result.catching_up) is name.startswith("replacement ready but missing")


def test_over_the_limit_soon_after_start_backs_off_instead_of_restarting() -> None:
    fresh = board("old", started=NOW - 60, pss=300 * MiB)
    result = plan(want(), [fresh], now=NOW, policy=HEAL, health={"old": seen(over_limit=1)})
    assert describe(result) == []
    assert result.memory_backoff["p"] == MemoryBackoff(1, NOW + 60)
    note = result.observed["p"].note
    assert note is not None and note.startswith("memory limit below what this board needs")
    assert result.observed["p"].state == "ready"


def test_memory_backoff_doubles_from_one_minute_to_an_hour() -> None:
    assert [memory_backoff_seconds(n, 3600) for n in (1, 2, 3, 6, 7, 20)] == [
        60,
        120,
        240,
        1920,
        3600,
        3600,
    ]


def test_during_the_backoff_an_old_board_over_its_limit_is_left_alone() -> None:
    desired = want(memory_backoffs=2, memory_retry_at=NOW + 100)
    result = plan(desired, [board("old", pss=300 * MiB)], now=NOW, policy=HEAL,
                  health={"old": seen(over_limit=4)})  # fmt: skip
    assert describe(result) == []
    assert "no memory restart before 1970-01-01T00:18:20Z" in (result.observed["p"].note or "")


def test_after_the_backoff_an_old_board_over_its_limit_is_replaced() -> None:
    desired = want(memory_backoffs=2, memory_retry_at=NOW - 1)
    result = plan(desired, [board("old", pss=300 * MiB)], now=NOW, policy=HEAL,
                  health={"old": seen(over_limit=4)})  # fmt: skip
    assert describe(result) == ["start p (memory)"]


def test_a_board_that_outlives_its_first_minutes_within_the_limit_clears_the_backoff() -> None:
    desired = want(memory_backoffs=3, memory_retry_at=NOW - 1)
    result = plan(desired, [board("old")], now=NOW, policy=HEAL, health={"old": seen()})
    assert result.memory_backoff["p"] == MemoryBackoff(0, None)


def test_health_counts_failed_probes_and_observations_over_the_limit() -> None:
    result = plan(want(), [board("old", ready=False, pss=300 * MiB)], now=NOW, policy=HEAL,
                  health={"old": seen(probe_failures=1, over_limit=1)})  # fmt: skip
    assert result.health["old"] == Health(ready_at=900.0, probe_failures=2, over_limit=2)
    unmeasured = plan(want(), [board("old", pss=None)], now=NOW, policy=HEAL,
                      health={"old": seen(over_limit=1)})  # fmt: skip
    assert unmeasured.health["old"].over_limit == 1, "a pass without a measurement keeps the count"


def test_a_starting_board_whose_probe_fails_is_starting_not_hung() -> None:
    result = plan(want(serving=None), [board("new", started=NOW - 10, ready=False)], now=NOW,
                  policy=HEAL, health={"new": Health(probe_failures=0)})  # fmt: skip
    assert describe(result) == []
    assert result.observed["p"].state == "starting"


# -- the memory budget ------------------------------------------------------------------------

BUDGET = replace(HEAL, budget=500 * MiB, reading_window=120)


def project_want(name: str, *, running: bool = True, last_access: float = NOW - 600,
                 pinned: bool = False, serving: str | None = None) -> Desired:  # fmt: skip
    spec = replace(SPEC, project=name, logdir=f"/s/{name}", path_prefix=f"/boards/{name}")
    return Desired(spec, running=running, last_access=last_access, pinned=pinned,
                   serving=serving or f"{name}-1")  # fmt: skip


def live(name: str, pss: int = 200 * MiB) -> Instance:
    spec = project_want(name).spec
    return Instance(f"{name}-1", name, spec.fingerprint, OLD, True, "127.0.0.1:9", True, pss)


def test_budget_with_room_starts_the_board() -> None:
    desired = {"a": project_want("a"), "c": project_want("c", last_access=NOW)}
    result = plan(desired, [live("a")], now=NOW, policy=BUDGET)
    assert describe(result) == ["start c (None)"]


def test_budget_full_stops_the_least_recently_used_idle_board_first() -> None:
    desired = {
        "a": project_want("a", last_access=NOW - 900),
        "b": project_want("b", last_access=NOW - 600),
        "c": project_want("c", last_access=NOW),
    }
    result = plan(desired, [live("a"), live("b")], now=NOW, policy=BUDGET)
    assert describe(result) == ["evict a", "stop a-1"]
    assert result.observed["a"].state == "stopped"
    assert "waiting for memory: stopping a" in (result.observed["c"].note or "")


def test_budget_waits_for_a_stopping_board_rather_than_evicting_another() -> None:
    """The pass after an eviction: the evicted board is still alive, and the board it shared
    pages with has grown. Its memory is on the way back, so nothing else is evicted."""
    desired = {
        "a": project_want("a", running=False, last_access=NOW - 900),
        "b": project_want("b", last_access=NOW - 600),
        "c": project_want("c", last_access=NOW),
    }
    result = plan(desired, [live("a"), live("b", pss=250 * MiB)], now=NOW, policy=BUDGET)
    assert result.evicted == []
    assert not any(line.startswith(("start c", "stop b")) for line in describe(result))
    assert "waiting for memory: stopping a" in (result.observed["c"].note or "")


def test_budget_never_evicts_pinned_boards_or_boards_someone_reads() -> None:
    desired = {
        "a": project_want("a", pinned=True, last_access=NOW - 900),
        "b": project_want("b", last_access=NOW - 30),
        "c": project_want("c", last_access=NOW),
    }
    result = plan(desired, [live("a"), live("b")], now=NOW, policy=BUDGET)
    assert describe(result) == []
    assert result.observed["c"].state == "no_capacity"
    assert (result.observed["c"].note or "").startswith("no capacity right now")


def test_budget_counts_a_replacement_as_no_new_board() -> None:
    desired = {"a": replace(project_want("a"), memory_limit=LIMIT)}
    over = replace(live("a", pss=450 * MiB))
    result = plan(desired, [over], now=NOW, policy=BUDGET, health={"a-1": seen(over_limit=1)})
    assert describe(result) == ["start a (memory)"]


def test_budget_uses_the_last_measured_pss_on_passes_that_measure_nothing() -> None:
    desired = {
        "a": replace(project_want("a", last_access=NOW - 900), last_pss=200 * MiB),
        "b": replace(project_want("b", last_access=NOW - 600), last_pss=200 * MiB),
        "c": project_want("c", last_access=NOW),
    }
    unmeasured = [replace(live("a"), pss_bytes=None), replace(live("b"), pss_bytes=None)]
    budget = replace(BUDGET, budget=700 * MiB, board_estimate=400 * MiB)
    result = plan(desired, unmeasured, now=NOW, policy=budget)
    assert describe(result) == ["start c (None)"], "200 + 200 + 200 fits in 700"


# What a cold start meets under a small budget: (name, budget MiB, desired, actual,
# actions, c's observed state, words c's note must hold, words it must not hold).
SMALL_BUDGET_CASES = [
    ("budget below the default estimate, nothing runs: the first board starts", 64,
     {"c": project_want("c", last_access=NOW)}, [], ["start c (None)"], "starting", [], []),
    ("a board measured bigger than the whole budget: says which setting to raise", 150,
     {"c": replace(project_want("c", last_access=NOW), last_pss=300 * MiB)}, [], [],
     "no_capacity", ["more than the whole 150 MiB", "TBHUB_BOARD_MEMORY_BUDGET",
                     "at least 300 MiB"], ["pinned"]),
    ("the memory is held by a board being read: named, and nothing called pinned", 300,
     {"b": project_want("b", last_access=NOW - 30), "c": project_want("c", last_access=NOW)},
     [live("b")], [], "no_capacity", ["b (being read, 200 MiB)", "200 MiB of the 300 MiB"],
     ["pinned"]),
    ("a pinned board and an idle one too small to make room: both named", 450,
     {"a": project_want("a", pinned=True), "i": project_want("i", last_access=NOW - 900),
      "c": replace(project_want("c", last_access=NOW), last_pss=300 * MiB)},
     [live("a"), live("i", pss=100 * MiB)], [], "no_capacity",
     ["a (pinned, 200 MiB)", "i (idle, 100 MiB)"], ["being read"]),
    ("two cold starts, room for one: the other names the board starting before it", 100,
     {"c": project_want("c", last_access=NOW), "d": project_want("d", last_access=NOW - 5)},
     [], ["start c (None)"], "starting", [], []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "budget", "desired", "actual", "actions", "state", "says", "never_says"),
    SMALL_BUDGET_CASES,
    ids=[c[0] for c in SMALL_BUDGET_CASES],
)
def test_small_budget_table(name: str, budget: int, desired: dict[str, Desired],
                            actual: list[Instance], actions: list[str], state: str,
                            says: list[str], never_says: list[str]) -> None:  # fmt: skip
    result = plan(desired, actual, now=NOW, policy=replace(BUDGET, budget=budget * MiB))
    assert describe(result) == actions
    assert result.observed["c"].state == state
    note = result.observed["c"].note or ""
    assert all(word in note for word in says), note
    assert not any(word in note for word in never_says), note


def test_a_board_refused_for_room_names_the_board_admitted_before_it() -> None:
    desired = {"c": project_want("c", last_access=NOW), "d": project_want("d", last_access=NOW - 5)}
    result = plan(desired, [], now=NOW, policy=replace(BUDGET, budget=100 * MiB))
    assert result.observed["d"].state == "no_capacity"
    assert "c (starting, 100 MiB)" in (result.observed["d"].note or "")


def test_a_board_being_replaced_or_drained_is_marked_swapping() -> None:
    def swapping(actual: list[Instance], **changes: object) -> bool:
        result = plan(want(**changes), actual, now=NOW, policy=HEAL,
                      health={i.instance_id: seen(over_limit=2) if i.instance_id == "old" else seen()
                              for i in actual})  # fmt: skip
        return result.observed["p"].swapping

    assert swapping([board("old", pss=300 * MiB)]), "the replacement starts in this pass"
    assert swapping([board("old", pss=300 * MiB), board("new", started=990, ready=False)])
    assert swapping([board("old"), board("new", started=990)], serving="new",
                    draining=Drain("old", NOW - 1))  # fmt: skip
    assert not swapping([board("old", pss=100 * MiB)])


def test_a_board_over_its_limit_once_is_swapping_before_its_replacement_starts() -> None:
    """One observation over the limit: no restart yet, but nginx stops caching answers that
    point at the board, so the switch a pass later reaches every reader at once."""

    def observed(pss: int, health: Health, *, answers: bool = True, **changes: object
                 ) -> tuple[list[str], bool]:  # fmt: skip
        old = board("old", pss=pss, ready=answers)
        result = plan(want(**changes), [old], now=NOW, policy=HEAL,
                      health={"old": health})  # fmt: skip
        return describe(result), result.observed["p"].swapping

    assert observed(300 * MiB, seen()) == ([], True), "first time over: no restart, no cache"
    assert observed(100 * MiB, seen(over_limit=1)) == ([], False), "back under: cached again"
    assert observed(100 * MiB, seen(), answers=False) == ([], False), "one missed probe: cached"
    assert observed(100 * MiB, seen(probe_failures=1), answers=False) == ([], True), (
        "two missed probes in a row, one short of hung: no cache"
    )
    backing_off = observed(300 * MiB, seen(over_limit=4), memory_backoffs=1,
                           memory_retry_at=NOW + 60)  # fmt: skip
    assert backing_off == ([], False), "during a memory backoff nothing is coming: cached"


def test_a_project_with_a_link_out_of_it_gets_no_board_and_its_board_is_killed() -> None:
    desired = want(unsafe_link="run-x -> /storage/other/run")
    result = plan(desired, [board("old")], now=NOW, policy=HEAL, health={"old": seen()})
    assert describe(result) == ["kill old"]
    observed = result.observed["p"]
    assert observed.state == "failed" and observed.upstream is None
    assert "the symlink run-x -> /storage/other/run leads outside" in (observed.error or "")
    assert describe(plan(desired, [], now=NOW, policy=HEAL)) == [], "and none starts"


def test_a_refused_board_is_killed_none_starts_and_the_reason_is_its_error() -> None:
    desired = want(refusal="runs cannot be hard-linked into the compare root")
    result = plan(desired, [board("old")], now=NOW, policy=HEAL, health={"old": seen()})
    assert describe(result) == ["kill old"]
    observed = result.observed["p"]
    assert observed.state == "failed" and observed.upstream is None
    assert observed.error == "not serving p: runs cannot be hard-linked into the compare root"
    assert describe(plan(desired, [], now=NOW, policy=HEAL)) == [], "and none starts"


def test_a_board_a_fast_pass_did_not_probe_keeps_its_counts() -> None:
    unprobed = replace(board("old", ready=False), probed=False)
    result = plan(want(), [unprobed], now=NOW, policy=HEAL, health={"old": seen(probe_failures=2)})
    assert result.health["old"].probe_failures == 2, "neither a failure nor a success"
    assert describe(result) == [] and result.observed["p"].instance_id == "old"
