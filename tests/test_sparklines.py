"""Sparklines: the SVG drawn from points (pure), the choice of curve, and the incremental
reader of a run's event files (files written by TensorBoard's own writer)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
from pytest import approx
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.scalar.summary_v2 import scalar_pb
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tbhub.domain.sparkline import HEIGHT, PAD, WIDTH, sparkline_points, sparkline_svg
from tbhub.storage.scalars import MAX_POINTS, ScalarCache, pick_curve


def coordinates(points: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in points.split())]


def test_points_span_the_box_with_higher_values_drawn_higher() -> None:
    drawn = coordinates(sparkline_points([(0, 1.0), (5, 3.0), (10, 2.0)]))
    assert drawn[0] == (PAD, HEIGHT - PAD)  # first step, lowest value: bottom left
    assert drawn[1] == (WIDTH / 2, PAD)  # middle step, highest value: top
    assert drawn[2] == (WIDTH - PAD, HEIGHT / 2)  # last step, middle value


def test_a_flat_curve_sits_in_the_middle_and_non_finite_values_are_left_out() -> None:
    drawn = coordinates(sparkline_points([(0, 2.0), (1, math.nan), (2, 2.0), (3, math.inf)]))
    assert [y for _, y in drawn] == [HEIGHT / 2, HEIGHT / 2]
    assert sparkline_points([(0, math.nan)]) == ""


def test_the_svg_titles_the_curve_and_escapes_its_name() -> None:
    svg = sparkline_svg([(0, 0.5), (9, 0.25)], name='<script>alert("x")</script>&loss')
    assert "<script>" not in svg
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;loss: 0.25 at step 9" in svg
    assert "<polyline" in svg
    empty = sparkline_svg([], name=None)
    assert "<title>no scalars yet</title>" in empty and "<polyline" not in empty


@pytest.mark.parametrize(
    ("names", "chosen"),
    [
        (["accuracy", "Loss/train", "loss"], "loss"),
        (["val/loss", "train/loss", "accuracy"], "train/loss"),
        (["accuracy", "eval/loss"], "eval/loss"),
        (["accuracy", "loss_val", "train_loss_avg"], "train_loss_avg"),
        (["accuracy", "lr"], "accuracy"),
        ([], None),
    ],
)
def test_the_sparkline_prefers_a_loss_curve(names: list[str], chosen: str | None) -> None:
    assert pick_curve({name: [(0, 1.0)] for name in names}) == chosen


# -- the reader --------------------------------------------------------------------------------


def write_events(logdir: Path, steps: range, tag: str = "loss") -> None:
    writer = EventFileWriter(str(logdir))
    try:
        for step in steps:
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(step) / 10)])
            writer.add_event(Event(wall_time=1.7e9 + step, step=step, summary=summary))
    finally:
        writer.close()


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    (tmp_path / "vision" / "run-1").mkdir(parents=True)
    return tmp_path


def test_a_file_that_grows_is_read_on_from_where_the_last_read_stopped(storage: Path) -> None:
    run = storage / "vision" / "run-1"
    write_events(run, range(0, 10))
    cache = ScalarCache(storage)
    assert cache.curves("vision", "run-1")["loss"] == [(s, approx(s / 10)) for s in range(10)]
    [event_file] = run.iterdir()
    whole = event_file.read_bytes()
    # Another writer's events appended in two pieces, the first ending mid-record.
    other = run / "extra"
    write_events(other, range(10, 20))
    [extra] = other.iterdir()
    more = extra.read_bytes()
    cut = len(more) - 7
    with open(event_file, "ab") as fh:
        fh.write(more[:cut])
    partial = cache.curves("vision", "run-1")["loss"]
    assert partial[:10] == [(s, approx(s / 10)) for s in range(10)]
    assert partial[-1][0] == 18  # step 19's record is cut short: not read yet
    with open(event_file, "ab") as fh:
        fh.write(more[cut:])
    os.utime(event_file)
    assert [s for s, _ in cache.curves("vision", "run-1")["loss"]] == list(range(20))
    assert len(whole) < event_file.stat().st_size


def test_a_small_budget_reads_a_large_file_over_several_calls(storage: Path) -> None:
    write_events(storage / "vision" / "run-1", range(200))
    cache = ScalarCache(storage, budget=1000)
    seen = [len(cache.curves("vision", "run-1").get("loss", [])) for _ in range(40)]
    assert seen[0] < 200 and seen == sorted(seen) and seen[-1] == 200


def test_tensor_scalars_and_subdirectory_curves_are_read(storage: Path) -> None:
    run = storage / "vision" / "run-1"
    writer = EventFileWriter(str(run / "train"))
    try:
        for step in range(3):
            summary = scalar_pb("loss", 1.0 / (step + 1))
            if step:  # TF2 writers send the plugin metadata with a tag's first value only
                summary.value[0].ClearField("metadata")
            writer.add_event(Event(step=step, summary=summary))
    finally:
        writer.close()
    curves = ScalarCache(storage).curves("vision", "run-1")
    assert [(s, round(v, 4)) for s, v in curves["train/loss"]] == [(0, 1.0), (1, 0.5), (2, 0.3333)]


def test_a_long_curve_keeps_its_shape_in_a_bounded_number_of_points(storage: Path) -> None:
    write_events(storage / "vision" / "run-1", range(3 * MAX_POINTS))
    points = ScalarCache(storage, budget=1 << 30).curves("vision", "run-1")["loss"]
    assert len(points) <= 2 * MAX_POINTS
    assert points[0][0] == 0 and points[-1][0] == 3 * MAX_POINTS - 1
    assert [s for s, _ in points] == sorted(s for s, _ in points)


def test_a_run_that_is_a_symlink_out_of_the_project_is_not_read(
    storage: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    write_events(outside, range(5))
    (storage / "vision" / "escape").symlink_to(outside)
    assert ScalarCache(storage).curves("vision", "escape") == {}
    assert ScalarCache(storage).curves("vision", "gone") == {}


def test_garbage_in_an_event_file_stops_the_read_there(storage: Path) -> None:
    run = storage / "vision" / "run-1"
    write_events(run, range(5))
    [event_file] = run.iterdir()
    with open(event_file, "ab") as fh:
        fh.write(b"\xff" * 64)
    cache = ScalarCache(storage)
    assert len(cache.curves("vision", "run-1")["loss"]) == 5
    assert len(cache.curves("vision", "run-1")["loss"]) == 5


def test_names_in_the_svg_never_break_out_of_its_title() -> None:
    svg = sparkline_svg([(1, 1.0), (2, 2.0)], name="</title><script>x</script>")
    assert re.fullmatch(r"<svg [^<]*><title>[^<]*</title><polyline [^<]*/></svg>", svg)
