"""Hyperparameters and metrics the training code wrote into its event files, as the one
incremental reader (storage/event_reader.py) meets them; bounded per run.

- `add_hparams` of torch's and tensorboardX's `SummaryWriter`, and Lightning's
  `TensorBoardLogger` (`hp_metric`), write the hparams plugin's summaries: a session start
  (`_hparams_/session_start_info`: the hyperparameters) and an experiment
  (`_hparams_/experiment`: the names of the metrics, whose values are the scalars of those
  tags in the same directory; the last value read is the metric's).
- The HF Trainer (`report_to="tensorboard"`) writes its `TrainingArguments` as JSON text
  under the tag `args`; its plain values (numbers, text, booleans) are taken as
  hyperparameters, below any the hparams plugin gives for the same key.

tbhub's own hparams file (storage/hparams_file.py) is never read for these: what it holds
was registered with tbhub already.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

HPARAMS_PLUGIN = "hparams"
TEXT_PLUGIN = "text"
ARGS_TAGS = frozenset({"args/text_summary", "args"})  # torch/tensorboardX's add_text, TF's
MAX_KEYS = 256  # hyperparameters kept per run; further keys are dropped
MAX_METRICS = 64  # metrics kept per run
KEY_MAX = 128  # longer keys are dropped
TEXT_MAX = 255  # longer text values are cut
ARGS_MAX_BYTES = 256 << 10  # an `args` text longer than this is not read

LoggedValue = bool | float | str
_FLOAT32 = struct.Struct("<f")


def _short(value: float) -> float:
    """A number that is a 32-bit float (what a scalar summary holds) as its shortest
    decimal: 0.9, not 0.8999999761581421."""
    try:
        if _FLOAT32.unpack(_FLOAT32.pack(value))[0] != value:
            return value
    except OverflowError:
        return value
    for digits in range(6, 10):
        short = float(f"{value:.{digits}g}")
        if _FLOAT32.unpack(_FLOAT32.pack(short))[0] == value:
            return short
    return value


def _plain(value: Any) -> LoggedValue | None:
    """A value as kept: a finite number, a boolean or text (cut); None for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return value[:TEXT_MAX]
    return None


@dataclass
class LoggedParams:
    """One run's hyperparameters and metrics as its training code wrote them so far."""

    hparams: dict[str, LoggedValue] = field(default_factory=dict)
    args: dict[str, LoggedValue] = field(default_factory=dict)  # the HF Trainer's
    metric_curves: dict[str, str] = field(default_factory=dict)  # curve -> metric name
    metrics: dict[str, float] = field(default_factory=dict)
    changed: bool = False

    def plugin_data(self, prefix: str, content: bytes) -> None:
        """An hparams plugin summary's content, from the directory `prefix` of the run."""
        from google.protobuf.message import DecodeError
        from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

        try:
            data = HParamsPluginData.FromString(content)
        except DecodeError:
            return
        which = data.WhichOneof("data")
        if which == "session_start_info":
            for key, value in data.session_start_info.hparams.items():
                kind = value.WhichOneof("kind")
                plain = _plain(getattr(value, kind)) if kind else None
                plain = _short(plain) if type(plain) is float else plain
                if plain is not None:
                    self._put(self.hparams, key, plain)
        elif which == "experiment":
            for info in data.experiment.metric_infos:
                name = info.name
                curve = prefix + (f"{name.group}/" if name.group else "") + name.tag
                if (
                    0 < len(name.tag) <= KEY_MAX
                    and curve not in self.metric_curves
                    and len(self.metric_curves) < MAX_METRICS
                ):
                    self.metric_curves[curve] = name.tag

    def args_text(self, texts: Iterable[bytes]) -> None:
        """The HF Trainer's `args` text summary: a JSON object of its arguments."""
        for raw in texts:
            if len(raw) > ARGS_MAX_BYTES:
                continue
            try:
                found = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(found, dict):
                for key, value in found.items():
                    plain = _plain(value)
                    if plain is not None and isinstance(key, str):
                        self._put(self.args, key, plain)

    def scalars(self, points: Iterable[tuple[str, int, float, float]]) -> None:
        """Scalars read: the last finite value of each metric's curve is the metric."""
        curves = self.metric_curves
        for curve, _, _, value in points:
            name = curves.get(curve)
            if name is not None and math.isfinite(value):
                value = _short(value)
                if self.metrics.get(name) != value:
                    self.metrics[name] = value
                    self.changed = True

    def _put(self, into: dict[str, LoggedValue], key: str, value: LoggedValue) -> None:
        if not 0 < len(key) <= KEY_MAX or into.get(key) == value:
            return
        if key in into or len(self.hparams) + len(self.args) < MAX_KEYS:
            into[key] = value
            self.changed = True

    def merged(self) -> tuple[dict[str, LoggedValue], dict[str, float]]:
        """(hyperparameters, metrics): the hparams plugin's over the HF Trainer's `args`."""
        return {**self.args, **self.hparams}, dict(self.metrics)
