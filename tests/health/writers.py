"""Real event files from the writers people train with, for the run-health tests.

The writers (torch's `SummaryWriter`, tensorboardX's, TensorBoard's own `summary.Writer`, the HF
Trainer with `report_to="tensorboard"`, Lightning's `TensorBoardLogger`) run unchanged in a
child process of their own, as a training job would: their imports are slow, they set warning
filters and threads of their own, and none of that belongs in the test process. This file is
both the test-side API and, run as a script, the child that writes.

Kinds of run:
- `healthy`: a loss that falls with heavy-tailed minibatch noise, a grad norm with noise and the
  occasional spike, a learning rate with warm-up and decay, an eval accuracy that rises and (on
  some runs) a validation loss that creeps up with overfitting. No detector may fire on these.
- `nan`: healthy up to `bad_step`, then the loss and grad norm are NaN from there on.
- `divergence`: healthy up to `bad_step`, then the loss climbs far above its recent level.
- `grad_explosion`: healthy up to `bad_step`, then the grad norm jumps a hundredfold and more.
- `stall`: healthy up to `bad_step`, then nothing more is written (the file is left as it is).

The HF Trainer trains a tiny BERT for real (its curves are whatever training gives); it writes
`healthy` runs and `nan` runs (a weight poisoned at `bad_step`: the Trainer's own NaN filter
keeps `train/loss` finite, so the NaN shows in `train/grad_norm`). Lightning writes `healthy`.
The other writers write the synthetic curves above, which are deterministic per `seed`.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SYNTHETIC_WRITERS = ("torch", "tensorboardX", "tensorboard")
WRITERS = (*SYNTHETIC_WRITERS, "hf_trainer", "lightning")
KINDS = ("healthy", "nan", "divergence", "grad_explosion", "stall")
WRITER_KINDS: dict[str, tuple[str, ...]] = {
    **{writer: KINDS for writer in SYNTHETIC_WRITERS},
    "hf_trainer": ("healthy", "nan"),
    "lightning": ("healthy",),
}

# The tag names the usual writers use; the synthetic writers pick one set per run.
HF_TAGS = {"loss": "train/loss", "grad": "train/grad_norm", "lr": "train/learning_rate"}
TAG_SETS: tuple[dict[str, str], ...] = (
    HF_TAGS,
    {"loss": "Loss/train", "grad": "grad_norm", "lr": "lr"},
    {"loss": "loss", "grad": "gradient_norm", "lr": "learning_rate"},
    {"loss": "train_loss", "grad": "grad_norm/total", "lr": "lr-AdamW"},
)
CHILD_TIMEOUT = 900.0
RESULT = "written: "


@dataclass(frozen=True)
class RunSpec:
    """What one run should contain; `bad_step` is where a bad kind turns bad."""

    name: str
    writer: str = "torch"
    kind: str = "healthy"
    steps: int = 200
    bad_step: int | None = None
    seed: int = 0
    tags: dict[str, str] = field(default_factory=lambda: dict(HF_TAGS))
    bad_value: str = "nan"  # for kind "nan": "nan", "inf" or "-inf"

    def __post_init__(self) -> None:
        if self.writer not in WRITERS:
            raise ValueError(f"unknown writer {self.writer!r}; one of {WRITERS}")
        if self.kind not in WRITER_KINDS[self.writer]:
            raise ValueError(f"{self.writer} writes only {WRITER_KINDS[self.writer]}")
        if self.kind != "healthy" and self.bad_step is None:
            object.__setattr__(self, "bad_step", self.steps * 2 // 3)


@dataclass(frozen=True)
class Written:
    """A run as written: where, by what, and the first logged step that is bad (None: healthy)."""

    run_dir: Path
    name: str
    writer: str
    kind: str
    last_step: int
    bad_step: int | None
    tags: dict[str, str]
    bad_time: float | None = None  # wall time at which the first bad record was flushed


def write_run(run_dir: Path, spec: RunSpec) -> Written:
    """Write one run into `run_dir` with a real writer (in a child process)."""
    return write_runs({run_dir: spec})[run_dir]


def write_runs(runs: dict[Path, RunSpec]) -> dict[Path, Written]:
    """Write many runs, one child process per writer (its imports are paid once)."""
    by_writer: dict[str, list[tuple[Path, RunSpec]]] = {}
    for run_dir, spec in runs.items():
        by_writer.setdefault(spec.writer, []).append((run_dir, spec))
    written: dict[Path, Written] = {}
    for batch in by_writer.values():
        payload = [{"run_dir": str(d), **asdict(s)} for d, s in batch]
        for line in _child(["batch", json.dumps(payload)]):
            result = json.loads(line)
            run_dir = Path(result.pop("run_dir"))
            written[run_dir] = Written(run_dir=run_dir, **result)
    return written


def _child(args: list[str]) -> list[str]:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT, env=_child_env())  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"writer child failed ({done.returncode}): {done.stderr[-3000:]}")
    # The writers print logs of their own (the HF Trainer prints dicts): results carry a mark.
    return [line[len(RESULT) :] for line in done.stdout.splitlines() if line.startswith(RESULT)]


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TBHUB_")}
    # One thread each: the machine is shared and tiny models gain nothing from more.
    return {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "0",
            "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1"}  # fmt: skip


class LiveRun:
    """A writer that keeps writing at `rate` steps a second in its own process, as training does,
    so a watcher sees the file grow. For a bad kind, `bad_time` is set once the first bad record
    is flushed (the start of a detection-latency measurement); `stall` stops writing at
    `bad_step` but keeps the process (and the open file) alive until `stop()`."""

    def __init__(self, run_dir: Path, spec: RunSpec, *, rate: float = 20.0) -> None:
        if spec.writer not in SYNTHETIC_WRITERS:
            raise ValueError("a live run uses one of the synthetic writers")
        self.run_dir = run_dir
        self.spec = spec
        payload = json.dumps({"run_dir": str(run_dir), "rate": rate, **asdict(spec)})
        self.process = subprocess.Popen([sys.executable, __file__, "live", payload],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=_child_env())  # fmt: skip
        self.bad_time: float | None = None
        self.last_step: int | None = None

    def wait_bad(self, timeout: float = 120.0) -> float:
        """Block until the first bad record is on disk; return its wall time."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while self.bad_time is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the live writer wrote no bad record in time")
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the live writer ended: {self.process.stderr.read()[-3000:]}")  # type: ignore[union-attr]
            if not line.startswith(RESULT):
                continue
            event = json.loads(line[len(RESULT) :])
            self.last_step = event["step"]
            if event.get("bad"):
                self.bad_time = float(event["time"])
        return self.bad_time

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> LiveRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the corpus of healthy runs ----------------------------------------------------------------

CORPUS_MIX = {"torch": 10, "tensorboardX": 9, "tensorboard": 7, "hf_trainer": 3, "lightning": 3}


def corpus_specs(mix: dict[str, int] = CORPUS_MIX) -> list[RunSpec]:
    """Healthy runs across writers, tag sets, lengths and noise (32 by default)."""
    specs: list[RunSpec] = []
    for writer, count in mix.items():
        for i in range(count):
            seed = 1000 + len(specs)
            if writer == "hf_trainer":
                spec = RunSpec(f"{writer}-{i}", writer, steps=40 + 10 * i, seed=seed)
            elif writer == "lightning":
                tags = {"loss": "train_loss", "grad": "grad_norm", "lr": "lr-SGD"}
                spec = RunSpec(f"{writer}-{i}", writer, steps=40 + 10 * i, seed=seed, tags=tags)
            else:
                rng = random.Random(seed)
                steps = rng.choice((120, 300, 600, 1500))
                tags = dict(TAG_SETS[len(specs) % len(TAG_SETS)])
                spec = RunSpec(f"{writer}-{i}", writer, steps=steps, seed=seed, tags=tags)
            specs.append(spec)
    return specs


def build_corpus(root: Path, mix: dict[str, int] = CORPUS_MIX) -> list[Written]:
    """The healthy corpus under `root` (one directory per run), built once: a second call (from
    another pytest-xdist worker, say) waits on a lock and reads the first one's index."""
    root.mkdir(parents=True, exist_ok=True)
    index = root / "corpus.json"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not index.exists():
            specs = corpus_specs(mix)
            written = write_runs({root / spec.name: spec for spec in specs})
            rows = [{**asdict(w), "run_dir": str(w.run_dir)} for w in written.values()]
            index.write_text(json.dumps(rows))
    rows = json.loads(index.read_text())
    return [Written(**{**row, "run_dir": Path(row["run_dir"])}) for row in rows]


def healthy_corpus_fixture() -> Any:
    """A session-scoped pytest fixture `healthy_corpus` (import it into a conftest.py)."""
    import pytest

    @pytest.fixture(scope="session")
    def healthy_corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Written]:
        # Under pytest-xdist each worker's base temp is in the session's own one, which they
        # share; without it the base temp is the session's (its parent holds older sessions').
        base = tmp_path_factory.getbasetemp()
        shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
        return build_corpus(shared / "health-corpus")

    return healthy_corpus


# -- the child side: curves and writers (imports of torch & co. happen only here) --------------


@dataclass
class Point:
    step: int
    values: dict[str, float]  # role ("loss", "grad", "lr", "val_loss", "accuracy") -> value
    bad: bool = False


def synthetic_points(spec: RunSpec) -> Iterator[Point]:
    """Training-like curves, deterministic per seed, with the spec's fault from `bad_step`."""
    rng = random.Random(spec.seed)
    log_every = rng.choice((1, 1, 2, 5)) if spec.steps <= 600 else rng.choice((5, 10))
    floor = rng.uniform(0.05, 1.5)
    start = floor * rng.uniform(2.0, 8.0)
    tau = spec.steps * rng.uniform(0.1, 0.4)
    noise = rng.uniform(0.02, 0.12)
    grad_floor = rng.uniform(0.2, 3.0)
    grad_noise = rng.uniform(0.08, 0.3)
    peak_lr = 10 ** rng.uniform(-4.5, -2.0)
    warmup = int(spec.steps * rng.choice((0.0, 0.03, 0.1)))
    schedule = rng.choice(("cosine", "linear", "constant", "step"))
    overfits = rng.random() < 0.4
    eval_every = max(log_every, (spec.steps // 10) // log_every * log_every)
    level = start
    for step in range(0, spec.steps + 1, log_every):
        progress = step / spec.steps
        if step < warmup:
            lr = peak_lr * (step + 1) / warmup
        elif schedule == "cosine":
            lr = peak_lr * 0.5 * (1 + math.cos(math.pi * progress))
        elif schedule == "linear":
            lr = peak_lr * (1 - progress)
        elif schedule == "step":
            lr = peak_lr * 0.1 ** int(progress * 3)
        else:
            lr = peak_lr
        # Student-t noise (df 4): minibatches give heavier tails than a normal.
        t_noise = rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(4)) / 4)
        loss = (floor + (start - floor) * math.exp(-step / tau)) * math.exp(noise * t_noise)
        grad = grad_floor * (1 + 2 * math.exp(-step / tau) + 0.3 * progress)
        grad *= math.exp(rng.gauss(0, grad_noise))
        if rng.random() < 0.01:
            grad *= rng.uniform(1.5, 3.0)  # the occasional spiky batch
        values = {"loss": loss, "grad": grad, "lr": lr}
        if step % eval_every == 0:
            accuracy = 0.95 - 0.85 * math.exp(-step / tau) + rng.gauss(0, 0.01)
            drift = 1 + (0.3 * max(0.0, progress - 0.5) if overfits else 0.0)
            values["val_loss"] = (floor * 1.1 + (start - floor) * math.exp(-step / tau)) * drift
            values["accuracy"] = min(1.0, accuracy)
        bad = spec.bad_step is not None and step >= spec.bad_step
        if bad and spec.kind == "stall":
            return
        if bad and spec.kind == "nan":
            values["loss"] = values["grad"] = float(spec.bad_value)
        elif bad and spec.kind == "divergence":
            level *= 1.6  # doubles about every 1.5 logged points: 10x within 5
            values["loss"] = level * math.exp(noise * t_noise)
            values["grad"] *= 3
        elif bad and spec.kind == "grad_explosion":
            values["grad"] = grad_floor * 10 ** rng.uniform(2.5, 4.0)
            values["loss"] *= 1.2
        else:
            level = loss
        yield Point(step, values, bad)


class SyntheticWriter:
    """One of the synthetic writers, opened on a run directory."""

    def __init__(self, writer: str, run_dir: Path) -> None:
        self.kind = writer
        run_dir.mkdir(parents=True, exist_ok=True)
        if writer == "torch":
            from torch.utils.tensorboard import SummaryWriter

            self.writer: Any = SummaryWriter(str(run_dir))
        elif writer == "tensorboardX":
            from tensorboardX import SummaryWriter as XWriter

            self.writer = XWriter(str(run_dir))
        else:
            from tensorboard.summary import Writer

            self.writer = Writer(str(run_dir))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        if self.kind == "tensorboard":
            self.writer.add_scalar(tag, value, step=step)
        else:
            self.writer.add_scalar(tag, value, step)

    def write(self, point: Point, tags: dict[str, str]) -> None:
        names = {**tags, "val_loss": "eval/loss", "accuracy": "eval/accuracy"}
        for role, value in point.values.items():
            self.add_scalar(names[role], value, point.step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def write_synthetic(run_dir: Path, spec: RunSpec) -> dict[str, Any]:
    writer = SyntheticWriter(spec.writer, run_dir)
    last_step, first_bad = 0, None
    for point in synthetic_points(spec):
        writer.write(point, spec.tags)
        last_step = point.step
        if point.bad and first_bad is None:
            first_bad = point.step
    writer.close()
    if spec.kind == "stall":
        first_bad = last_step
    return {"last_step": last_step, "bad_step": first_bad}


def write_live(run_dir: Path, spec: RunSpec, rate: float) -> None:
    writer = SyntheticWriter(spec.writer, run_dir)
    for point in synthetic_points(spec):
        writer.write(point, spec.tags)
        writer.flush()
        event: dict[str, Any] = {"step": point.step, "bad": point.bad, "time": time.time()}
        print(RESULT + json.dumps(event), flush=True)
        time.sleep(1 / rate)
    writer.flush()
    if spec.kind == "stall":
        event = {"step": spec.bad_step or 0, "bad": True, "time": time.time()}
        print(RESULT + json.dumps(event), flush=True)
    while True:  # a stalled job (or one done writing) is still alive until stopped
        time.sleep(3600)


def write_hf_trainer(run_dir: Path, spec: RunSpec) -> dict[str, Any]:
    """A tiny BERT trained for real by the HF Trainer on a learnable toy task."""
    import torch
    import transformers as hf

    torch.manual_seed(spec.seed)
    shape: dict[str, Any] = dict(vocab_size=32, hidden_size=16, num_hidden_layers=1,
                                 num_labels=2, num_attention_heads=2, intermediate_size=32,
                                 max_position_embeddings=16)  # fmt: skip
    config = hf.BertConfig(**shape)

    class Data(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
        def __init__(self) -> None:
            generator = torch.Generator().manual_seed(spec.seed)
            self.tokens = torch.randint(4, 32, (256, 6), generator=generator)
            # Some label noise, so the loss settles above zero as real losses do.
            self.flip = torch.rand(256, generator=generator) < 0.1

        def __len__(self) -> int:
            return len(self.tokens)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            label = (self.tokens[i, 0] % 2) ^ self.flip[i].long()
            return {"input_ids": self.tokens[i], "labels": label}

    class Poison(hf.TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if spec.kind == "nan" and state.global_step == spec.bad_step:
                with torch.no_grad():
                    kw["model"].classifier.weight[0, 0] = float("nan")

    os.environ["TENSORBOARD_LOGGING_DIR"] = str(run_dir)  # transformers 5: not an argument
    with tempfile.TemporaryDirectory() as out:
        args = hf.TrainingArguments(output_dir=out, report_to=["tensorboard"], logging_steps=1,
                                 max_steps=spec.steps, per_device_train_batch_size=8,
                                 learning_rate=3e-3, warmup_steps=max(1, spec.steps // 10),
                                 use_cpu=True, save_strategy="no", disable_tqdm=True,
                                 seed=spec.seed, dataloader_num_workers=0)  # fmt: skip
        trainer = hf.Trainer(model=hf.BertForSequenceClassification(config), args=args,
                          train_dataset=Data(), callbacks=[Poison()])  # fmt: skip
        trainer.train()
    bad = None
    for entry in trainer.state.log_history:
        if "grad_norm" in entry and not math.isfinite(entry["grad_norm"]) and bad is None:
            bad = int(entry["step"])
    return {"last_step": int(trainer.state.global_step), "bad_step": bad, "tags": HF_TAGS}


def write_lightning(run_dir: Path, spec: RunSpec) -> dict[str, Any]:
    """A small regression trained for real by Lightning, logging loss, grad norm and lr."""
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.loggers import TensorBoardLogger

    torch.manual_seed(spec.seed)
    inputs = torch.randn(512, 8)
    targets = inputs @ torch.randn(8, 1) + 0.3 * torch.randn(512, 1)
    tags = spec.tags

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                             torch.nn.Linear(16, 1))  # fmt: skip

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log(tags["loss"], loss, on_step=True, on_epoch=False)
            return loss

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            grads = [p.grad.norm() for p in self.parameters() if p.grad is not None]
            self.log(tags["grad"], torch.stack(grads).norm(), on_step=True, on_epoch=False)
            self.log(tags["lr"], optimizer.param_groups[0]["lr"], on_step=True, on_epoch=False)

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
            decay = torch.optim.lr_scheduler.StepLR(optimizer, step_size=max(1, spec.steps // 3))
            schedule = {"scheduler": decay, "interval": "step"}
            return {"optimizer": optimizer, "lr_scheduler": schedule}

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs, targets),
                                       batch_size=16, shuffle=True)  # fmt: skip
    logger = TensorBoardLogger(save_dir=str(run_dir), name="", version="")
    trainer = pl.Trainer(max_steps=spec.steps, logger=logger, log_every_n_steps=1,
                         accelerator="cpu", devices=1, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(Regression(), data)
    return {"last_step": int(trainer.global_step), "bad_step": None}


def _write_one(run_dir: Path, spec: RunSpec) -> dict[str, Any]:
    if spec.writer == "hf_trainer":
        result = write_hf_trainer(run_dir, spec)
    elif spec.writer == "lightning":
        result = write_lightning(run_dir, spec)
    else:
        result = write_synthetic(run_dir, spec)
    return {"run_dir": str(run_dir), "name": spec.name, "writer": spec.writer,
            "kind": spec.kind, "tags": spec.tags, **result}  # fmt: skip


def _spec(row: dict[str, Any]) -> tuple[Path, RunSpec]:
    row = dict(row)
    run_dir = Path(row.pop("run_dir"))
    row.pop("rate", None)
    return run_dir, RunSpec(**row)


def _main(argv: Sequence[str]) -> None:
    import warnings

    warnings.simplefilter("ignore")
    if argv[0] == "batch":
        for row in json.loads(argv[1]):
            run_dir, spec = _spec(row)
            print(RESULT + json.dumps(_write_one(run_dir, spec)), flush=True)
    elif argv[0] == "live":
        row = json.loads(argv[1])
        run_dir, spec = _spec(row)
        write_live(run_dir, spec, float(row["rate"]))


if __name__ == "__main__":
    _main(sys.argv[1:])
