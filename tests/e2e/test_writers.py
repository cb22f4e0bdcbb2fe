"""The writers people use, unchanged, write into a run that `tbhub.client.Run` registered;
the board (through nginx, with a read token) hands back exactly the values written.

Each writer runs in its own process, as a training job would, on one shared server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.e2e.jobs_hub import Hub, board_scalars

pytestmark = pytest.mark.e2e

PRELUDE = """
import json, os, tempfile
from tbhub.client import Run
VALUES = [0.5, 0.25, 1 / 3, 0.1, 2.0]

def report(run, expected):
    print(json.dumps({"id": run.id, "path": run.info["path"], "expected": expected}))
"""

SUMMARY_WRITER = """
        from {module} import SummaryWriter
        with Run("vision", "{name}") as run:
            writer = SummaryWriter(run.logdir)
            for step, value in enumerate(VALUES):
                writer.add_scalar("loss", value, step)
            writer.close()
            report(run, {{"loss": list(enumerate(VALUES))}})
"""
WRITERS = {
    "torch": SUMMARY_WRITER.format(module="torch.utils.tensorboard", name="torch-writer"),
    "tensorboardX": SUMMARY_WRITER.format(module="tensorboardX", name="tensorboardx-writer"),
    "tensorboard": """
        from tensorboard.summary import Writer
        with Run("vision", "tensorboard-writer") as run:
            writer = Writer(run.logdir)
            for step, value in enumerate(VALUES):
                writer.add_scalar("loss", value, step=step)
            writer.close()
            report(run, {"loss": list(enumerate(VALUES))})
    """,
    "lightning": """
        import torch
        import pytorch_lightning as pl
        from pytorch_lightning.loggers import TensorBoardLogger

        class Tiny(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)

            def training_step(self, batch, batch_idx):
                self.log("known", VALUES[batch_idx], on_step=True, on_epoch=False)
                return self.layer(batch[0]).sum()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        data = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.ones(len(VALUES), 2)), batch_size=1)
        with Run("vision", "lightning-logger") as run:
            logger = TensorBoardLogger(save_dir=run.logdir, name="", version="")
            trainer = pl.Trainer(max_epochs=1, logger=logger, log_every_n_steps=1,
                                 accelerator="cpu", devices=1, enable_checkpointing=False,
                                 enable_progress_bar=False, enable_model_summary=False)
            trainer.fit(Tiny(), data)
            report(run, {"known": list(enumerate(VALUES))})
    """,
    "transformers": """
        import torch
        from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                                  TrainingArguments)

        torch.manual_seed(0)
        config = BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1,
                            num_attention_heads=2, intermediate_size=16,
                            max_position_embeddings=16, num_labels=2)

        class Data(torch.utils.data.Dataset):
            def __len__(self):
                return 8

            def __getitem__(self, i):
                return {"input_ids": torch.tensor([1, 2, 3, i + 4]), "labels": torch.tensor(i % 2)}

        with Run("vision", "hf-trainer") as run, tempfile.TemporaryDirectory() as out:
            os.environ["TENSORBOARD_LOGGING_DIR"] = run.logdir  # transformers 5: not an argument
            args = TrainingArguments(output_dir=out, report_to=["tensorboard"],
                                     logging_steps=1, max_steps=3,
                                     per_device_train_batch_size=2, use_cpu=True,
                                     save_strategy="no", disable_tqdm=True)
            trainer = Trainer(model=BertForSequenceClassification(config), args=args,
                              train_dataset=Data())
            trainer.train()
            losses = [[h["step"], h["loss"]] for h in trainer.state.log_history if "loss" in h]
            report(run, {"train/loss": losses})
    """,
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_writer_s_scalars_come_back_exactly_from_the_board(hub: Hub, writer: str) -> None:
    script = PRELUDE + textwrap.dedent(WRITERS[writer])
    done = subprocess.run([sys.executable, "-c", script], env=hub.env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    written = json.loads(done.stdout.strip().splitlines()[-1])
    assert hub.run(written["id"])["status"] == "finished"
    for tag, points in written["expected"].items():
        expected = [(int(step), float(np.float32(value))) for step, value in points]
        assert len(expected) >= 3
        assert board_scalars(hub, written["path"], tag, len(expected)) == expected, (writer, tag)
