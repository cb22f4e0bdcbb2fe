"""The boards settings: one group of tbhub's settings (combined in settings/__init__.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ByteSize, Field, field_validator

MAX_REQUIREMENT = 200  # characters of one pip requirement spec


class BoardSettings(BaseModel):
    """Boards: how TensorBoards start, stop when idle, and heal, and the memory they may use."""

    tensorboard_bin: str | None = Field(
        default=None,
        description="A program to run as each board instead of tbhub's launcher (`python -m "
        "tbhub.supervisor.board_process`, TensorBoard with off-by-default plugins left out). "
        "It gets the launcher's arguments, --tbhub_disable_plugins first.",
    )
    # How boards start (issue 7): forked from a pre-imported zygote, or exec'd one by one.
    board_launcher: Literal["zygote", "exec"] = Field(
        default="zygote",
        description="zygote: fork boards from one process per data dir that has imported "
        "TensorBoard (a board program that does not run on tbhub's own Python is exec'd); "
        "exec: start a new process for each board.",
    )
    board_state_dir: Path | None = Field(
        default=None,
        description="Where the local backend keeps each board's state file and log (and labels "
        "its processes with this path). Replicas on one host that should adopt each other's "
        "boards point it at the same local directory. Defaults to <data_dir>/boards.",
    )
    board_plugins: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Extra TensorBoard plugins boards may load, as pip requirement specs in a "
        'JSON list (e.g. ["tensorboard-plugin-profile==2.24.2"]). `tbhub admin plugins '
        "install` installs them beside tbhub (<data_dir>/board-plugins) and into the board "
        "image; each stays off until a project turns it on (`tbhub admin board set --plugin`).",
    )
    idle_timeout: float = Field(
        default=900.0, gt=0, description="Seconds without a request before a board is stopped."
    )
    board_answer_cache_seconds: int = Field(
        default=1,
        ge=0,
        le=10,
        description="nginx keeps each board's answers (a 200 to a GET, under 8 MB, after the "
        "gate has judged the request) for this many seconds and gives them to every reader "
        "of that board who asks the same URL: many readers of one board cost it one answer "
        "a second instead of one each. Only once the board has finished its first load of "
        "its logdir: until then every request goes to the board, which lists more runs with "
        "each answer. After it, a board's data can look this much older than its files "
        "(its reload interval aside). 0: every request goes to the board.",
    )
    board_prerender: bool = Field(
        default=True,
        description="A project's page asks Chromium to prerender the board page (Speculation "
        'Rules), so that "Open board" shows a page already drawn: while the board serves or '
        "starts, and while it is stopped if it would start within the memory budget with no "
        "board stopped to make room (opening the project page then starts the board, which "
        "stops when idle if nobody opens it). The board's page then runs when the project "
        "page is opened, not only on the click (see the threat model); false: the click "
        "loads it (and starts a stopped board), as in other browsers.",
    )
    default_view_over_runs: int = Field(
        default=500,
        ge=0,
        le=10_000_000,
        description="A project with more runs than this opens on its default view (its "
        "recent, running and pinned runs) rather than a board over every run; the whole "
        "project stays one click away. 0: always the whole project.",
    )
    board_start_timeout: float = Field(
        default=120.0, gt=0, description="Seconds a board may take to become ready."
    )
    # Below the hook's read timeout in nginx (5 s): a held hook call must answer before it.
    board_start_hold: float = Field(
        default=1.5,
        ge=0,
        le=4,
        description="Seconds a browser's navigation to a starting board waits at the gate for "
        "it to serve, to open TensorBoard at once instead of the starting page (a board forked "
        "from the zygote serves in a few tenths of a second); after that, the starting page. "
        "0: the starting page at once. At most 4.",
    )
    board_stop_grace: float = Field(
        default=5.0, gt=0, description="Seconds to wait after each signal (INT, TERM) on stop."
    )
    reconcile_interval: float = Field(
        default=5.0, gt=0, description="Seconds between supervisor passes when nothing waits."
    )
    # Boards that heal themselves (supervisor/plan.py): memory limit, hung boards, budget.
    board_memory_limit: ByteSize = Field(
        default=ByteSize(2 * 1024**3),
        description="PSS a board's processes (TensorBoard and its data server) may use before "
        "it is replaced blue/green; units like 2GiB or 500MB. 0: no limit. Projects can "
        "override it (`tbhub admin board set`).",
    )
    board_memory_budget: ByteSize | None = Field(
        default=None,
        description="Sum of board PSS allowed on this host; starting a board beyond it first "
        "stops the least recently used idle boards. Defaults to half of the host's memory "
        "(or of the cgroup limit in a container). 0: no budget.",
    )
    board_memory_fresh_seconds: float = Field(
        default=300.0,
        ge=0,
        description="A board over its memory limit this soon after starting needs more than "
        "the limit allows: instead of restarting it, memory restarts back off (1, 2, 4 ... 60 "
        "minutes) and the status says so.",
    )
    board_hung_probes: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="Health probes in a row a ready board may fail or time out before it counts "
        "as hung and is replaced.",
    )
    board_probe_timeout: float = Field(
        default=2.0, gt=0, le=60, description="Seconds a board's health probe may take."
    )
    run_stalled_minutes: float = Field(
        default=30,
        gt=0,
        description="A running run whose event files got nothing new for this many minutes "
        "is shown as stalled.",
    )

    @field_validator("board_plugins")
    @classmethod
    def _check_plugins(cls, value: list[str]) -> list[str]:
        """Each entry a pip requirement spec (a name, extras, versions): no pip options, no
        URLs, nothing pip would read as anything else."""
        from packaging.requirements import InvalidRequirement, Requirement

        for entry in value:
            try:
                requirement = Requirement(entry)
            except InvalidRequirement:
                requirement = None
            if len(entry) > MAX_REQUIREMENT or requirement is None or requirement.url:
                raise ValueError(
                    f"TBHUB_BOARD_PLUGINS entry {entry[:80]!r} is not a pip requirement spec "
                    "like 'tensorboard-plugin-profile==2.24.2' (a name and versions, no URL, "
                    f"at most {MAX_REQUIREMENT} characters); fix or remove it"
                )
        return value
