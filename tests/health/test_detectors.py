"""The detectors alone (pure): what each default rule looks at, and the plateau (off by default)
once an owner turns it on."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tbhub.health.detectors import RunDetectors
from tbhub.health.rules import RuleSet, defaults
from tbhub.storage.event_reader import ScalarPoint


def detectors(**changes: dict[str, object]) -> RunDetectors:
    rules = defaults(30.0)
    for detector, change in changes.items():
        rules[detector] = replace(rules[detector], **change)  # type: ignore[arg-type]
    return RunDetectors(RuleSet(rules))


@pytest.mark.parametrize(
    ("tag", "looked_at"),
    [
        ("train/loss", {"nan", "divergence"}),  # HF Trainer
        ("Loss/train", {"nan", "divergence"}),  # torch tutorials
        ("epoch_loss", {"nan", "divergence"}),  # Keras (under train/ or validation/)
        ("train/epoch_loss", {"nan", "divergence"}),
        ("train_loss_step", {"nan", "divergence"}),  # Lightning
        ("val_loss", {"nan", "divergence"}),
        ("train/grad_norm", {"nan", "grad_explosion"}),  # HF Trainer
        ("grad_norm/total", {"nan", "grad_explosion"}),
        ("gradient_norm", {"nan", "grad_explosion"}),
        ("train/learning_rate", {"nan"}),
        ("lossless_ratio", {"nan"}),
        ("accuracy", {"nan"}),
    ],
)
def test_the_default_rules_look_at_the_tags_the_usual_writers_write(
    tag: str, looked_at: set[str]
) -> None:
    found = detectors()
    wanted = {"nan", "divergence", "grad_explosion", "plateau"}
    assert {d for d in wanted if found.matches(d, tag)} == looked_at


def test_a_loss_that_stops_improving_is_a_plateau_once_turned_on() -> None:
    curve = [ScalarPoint("loss", s, 0.0, max(1.0, 3.0 - s / 100)) for s in range(0, 2000, 10)]
    assert detectors().feed(curve) == []  # off by default
    [plateau] = detectors(plateau={"enabled": True, "window": 500}).feed(curve)
    assert plateau.detector == "plateau" and plateau.step == 700  # best (1.0) at step 200


def test_one_spike_is_not_a_divergence_but_a_climb_is() -> None:
    calm = [ScalarPoint("loss", s, 0.0, 1.0 + 0.05 * math.sin(s)) for s in range(100)]
    spike = [ScalarPoint("loss", 100, 0.0, 50.0)]
    after = [ScalarPoint("loss", s, 0.0, 1.0) for s in range(101, 110)]
    assert detectors().feed(calm + spike + after) == []
    climb = [ScalarPoint("loss", 100 + s, 0.0, 2.0**s) for s in range(1, 10)]
    [diverged, *_] = detectors().feed(calm + climb)
    assert diverged.detector == "divergence" and diverged.step == 103  # three in a row above
