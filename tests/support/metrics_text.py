"""Samples read from a /metrics answer with prometheus-client's own parser (tests and
benchmarks share it): the value of one series, or None when it is not there."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of series `name` whose labels include `labels`; None when absent."""
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and all(found.labels.get(k) == v for k, v in labels.items()):
                return float(found.value)
    return None
