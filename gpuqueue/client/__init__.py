"""A Python client for the gpuqueue REST API, standard library only (urllib), so that a
pipeline can use it without Django. `gpuqueue.client.cli` is the `gpuqueue` command."""

from gpuqueue.client.api import ApiError, Client, load_config

__all__ = ["ApiError", "Client", "load_config"]
