"""tbhub's client for training jobs. Needs only httpx:

from tbhub.client import Client
client = Client()  # TBHUB_URL / TBHUB_TOKEN, or the file `tbhub login` wrote
run = client.create_run("vision", "resnet50", hparams={"lr": 0.1})
"""

from tbhub.client.http import ApiError, Client

__all__ = ["ApiError", "Client"]
