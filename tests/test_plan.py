"""plan(desired, actual) as a table: each row is one situation and the fix it needs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tbhub.supervisor.loop import restart_backoff
from tbhub.supervisor.plan import BoardSpec, Desired, Forget, Instance, Start, Stop, plan

SPEC = BoardSpec(project="p", logdir="/s/p", path_prefix="/boards/p")
NEW_SPEC = replace(SPEC, reload_interval=5)
NOW = 1000.0
TIMEOUT = 60.0


def inst(iid: str, *, spec: BoardSpec = SPEC, started: float = 990.0, alive: bool = True,
         ready: bool = False, upstream: str | None = "127.0.0.1:1") -> Instance:  # fmt: skip
    return Instance(iid, spec.project, spec.fingerprint, started, alive, upstream, ready)


def run(desired: dict[str, Desired], actual: list[Instance]) -> tuple[list[str], dict[str, str]]:
    result = plan(desired, actual, now=NOW, start_timeout=TIMEOUT)
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
    assert plan(desired, actual, now=NOW, start_timeout=TIMEOUT).failed == {"p", "q"}


def test_restart_backoff_doubles_up_to_five_minutes() -> None:
    assert [restart_backoff(n) for n in (1, 2, 3, 4, 9, 10, 50)] == [1, 2, 4, 8, 256, 300, 300]


def test_ready_board_reports_the_upstream_of_the_current_spec() -> None:
    result = plan(
        {"p": Desired(NEW_SPEC, running=True)},
        [inst("old", ready=True, upstream="127.0.0.1:1"),
         inst("new", spec=NEW_SPEC, ready=True, started=995, upstream="127.0.0.1:2")],
        now=NOW, start_timeout=TIMEOUT,
    )  # fmt: skip
    assert result.observed["p"].upstream == "127.0.0.1:2"
    assert result.observed["p"].instance_id == "new"


def test_spec_fingerprint_changes_with_any_field() -> None:
    assert SPEC.fingerprint == replace(SPEC).fingerprint
    assert SPEC.fingerprint != NEW_SPEC.fingerprint
    assert (
        SPEC.fingerprint != replace(SPEC, extra_args=("--samples_per_plugin=images=0",)).fingerprint
    )
