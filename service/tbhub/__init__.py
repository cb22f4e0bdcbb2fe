"""tbhub: a self-hosted, multi-user TensorBoard service."""

__version__ = "0.1.0"
