"""tbhub's client for training jobs. Needs only httpx:

    from tbhub.client import Run

    with Run("vision", "resnet50", hparams={"lr": 0.1}) as run:
        writer = SummaryWriter(run.logdir)  # any TensorBoard writer, unchanged

Configured by TBHUB_URL and TBHUB_TOKEN, or the file `tbhub login` writes.
"""

from tbhub.client.http import ApiError, Client
from tbhub.client.run import Run

__all__ = ["ApiError", "Client", "Run"]
