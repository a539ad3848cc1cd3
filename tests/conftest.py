"""Suite-wide fixtures."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tests that use torch run it single-threaded (deterministic, fair on shared cores).

    torch is touched only if a test module already imported it, so the crypto and protocol
    tests never load it."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
