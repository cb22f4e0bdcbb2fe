"""Runs whose training code writes hyperparameters and metrics, each with the real library:
torch's and tensorboardX's `SummaryWriter.add_hparams`, a tiny HF Trainer run with
`report_to="tensorboard"`, a tiny Lightning run with its `TensorBoardLogger`. Each is
written in a subprocess of its own (`python -m tests.health.hparams_writers KIND DIR`):
the libraries' global state stays out of the test process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WRITERS = ("torch", "tensorboardX", "hf_trainer", "lightning")


def write_run(kind: str, run_dir: Path) -> None:
    """Write the run `kind` into `run_dir` (a subprocess; raises when it fails)."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "tests.health.hparams_writers", kind, str(run_dir)],
                   check=True, env=env, timeout=300, capture_output=True)  # fmt: skip


def _torch(run_dir: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir))
    for step in range(3):
        writer.add_scalar("loss", 1.0 / (step + 1), step)
    writer.add_hparams({"lr": 0.1, "batch_size": 32, "optimizer": "adam"},
                       {"hparam/accuracy": 0.9, "hparam/loss": 0.25})  # fmt: skip
    writer.close()


def _tensorboardx(run_dir: Path) -> None:
    import tensorboardX

    writer = tensorboardX.SummaryWriter(str(run_dir))
    writer.add_scalar("loss", 0.5, 0)
    writer.add_hparams({"lr": 0.01, "optimizer": "sgd", "nesterov": True},
                       {"hparam/accuracy": 0.75})  # fmt: skip
    writer.close()


def _hf_trainer(run_dir: Path) -> None:
    import torch
    from transformers import Trainer, TrainingArguments

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            loss = torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), labels)
            return {"loss": loss}

    data = [{"x": torch.randn(4), "labels": torch.tensor(1.0)} for _ in range(8)]
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(run_dir)
    args = TrainingArguments(output_dir=str(run_dir / "out"), report_to=["tensorboard"],
                             max_steps=2, logging_steps=1, per_device_train_batch_size=4,
                             learning_rate=0.003, seed=7, use_cpu=True, save_strategy="no",
                             disable_tqdm=True)  # fmt: skip
    Trainer(model=Tiny(), args=args, train_dataset=data).train()


def _lightning(run_dir: Path) -> None:
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.loggers import TensorBoardLogger

    class Tiny(pl.LightningModule):
        def __init__(self, lr: float = 0.02, hidden: int = 8, activation: str = "relu") -> None:
            super().__init__()
            self.save_hyperparameters()
            self.linear = torch.nn.Linear(4, 1)

        def training_step(self, batch: torch.Tensor, _index: int) -> torch.Tensor:
            loss = self.linear(batch).pow(2).mean()
            self.log("hp_metric", 0.5)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    logger = TensorBoardLogger(save_dir=str(run_dir.parent), name="", version=run_dir.name)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=2, logger=logger, accelerator="cpu",
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, log_every_n_steps=1)  # fmt: skip
    loader = torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=4)
    trainer.fit(Tiny(lr=0.05, hidden=16), loader)


if __name__ == "__main__":
    target = Path(sys.argv[2])
    target.mkdir(parents=True, exist_ok=True)
    {"torch": _torch, "tensorboardX": _tensorboardx, "hf_trainer": _hf_trainer,
     "lightning": _lightning}[sys.argv[1]](target)  # fmt: skip
