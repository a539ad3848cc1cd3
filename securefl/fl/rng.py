"""Simulation randomness: the server's (one method's) stream and each client's per round.

:class:`SimulationRNG` is a numpy Generator and a torch Generator.  A method owns one,
from the run's single ``seed``, for what the *server* draws (client sampling, helper
selection, server-side training), in a fixed order; its state is captured so that a
resumed run reproduces an uninterrupted one bit for bit.

:func:`client_rng` gives what a *client* draws in one round (batch order, augmentation,
dropout masks, input noise, episodes, mixup), independent of every other client's and of
the order in which clients run -- what running the clients as separate parties needs.
It is derived, never stored: with ``entropy = (seed, zigzag(round), client, tag(purpose))``,

    numpy Generator = PCG64(SeedSequence(entropy, spawn_key=(0,)))
    torch Generator = manual_seed(SeedSequence(entropy, spawn_key=(1,)).generate_state(1, uint64)[0] >> 1)

where ``zigzag(r) = 2r`` for ``r >= 0`` and ``-2r - 1`` for ``r < 0`` (warm-up rounds take
negative indices, so no two rounds share a stream) and ``tag(purpose)`` is the integer
whose big-endian bytes are the ASCII of ``purpose`` (lower-case letters, digits, ``-``).

This is *simulation* randomness (sampling, shuffling, initialisation), known to anyone
who knows ``--seed``.  No secret comes from here: keys and masks come from the OS
CSPRNG, and the secrets that shape a method's outputs (LSH seeds, DP noise) from the
method's ``crypto_seed`` (:class:`securefl.methods.base.Method`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from securefl.errors import InputError

_PURPOSE = re.compile(r"[a-z0-9][a-z0-9-]*\Z")


@dataclass
class SimulationRNG:
    numpy: np.random.Generator
    torch: torch.Generator

    @classmethod
    def from_seed(cls, seed: int, *, device: torch.device | None = None) -> "SimulationRNG":
        """The server's generators for ``seed``; the torch one lives on ``device`` (the
        CPU when ``None``), seeded with the same integer (:mod:`securefl.fl.device`)."""
        generator = _generator(device)
        generator.manual_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]))
        return cls(np.random.default_rng(seed), generator)

    def draw_seed(self) -> int:
        """A fresh 63-bit seed drawn from the numpy stream."""
        return int(self.numpy.integers(0, 2**63 - 1))

    def state_dict(self) -> dict[str, Any]:
        return {"numpy": self.numpy.bit_generator.state, "torch": self.torch.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.numpy.bit_generator.state = state["numpy"]
        self.torch.set_state(state["torch"])


def _zigzag(value: int) -> int:
    return 2 * value if value >= 0 else -2 * value - 1


def client_entropy(seed: int, round_index: int, client: int, purpose: str = "train") -> tuple[int, int, int, int]:
    """The SeedSequence entropy of :func:`client_rng` (see the module docstring)."""
    for name, value, least in (("seed", seed, 0), ("round_index", round_index, None), ("client", client, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or (least is not None and value < least):
            raise InputError(name, value, "must be an integer" + (" >= 0" if least is not None else ""))
    if not isinstance(purpose, str) or not _PURPOSE.match(purpose):
        raise InputError("purpose", purpose, "must be lower-case letters, digits and '-', starting with a letter or digit")
    return int(seed), _zigzag(int(round_index)), int(client), int.from_bytes(purpose.encode("ascii"), "big")


def _generator(device: torch.device | None) -> torch.Generator:
    """A fresh torch Generator on ``device``: exactly ``torch.Generator()`` on the CPU."""
    if device is None or torch.device(device).type == "cpu":
        return torch.Generator()
    return torch.Generator(device=device)


def client_rng(seed: int, round_index: int, client: int, *, purpose: str = "train",
               device: torch.device | None = None) -> SimulationRNG:
    """The numpy and torch Generators of ``client`` in round ``round_index`` (negative for
    warm-up rounds) of the run with simulation seed ``seed``, for ``purpose``; derived from
    ``(seed, round, client, purpose)`` alone, so independent of the order clients run in
    (derivation: the module docstring).  The torch Generator lives on ``device`` (the CPU
    when ``None``) with the same seed: a CUDA generator draws a different stream from the
    same seed, so only CPU runs reproduce CPU runs bit for bit."""
    entropy = client_entropy(seed, round_index, client, purpose)
    generator = _generator(device)
    torch_seed = np.random.SeedSequence(entropy, spawn_key=(1,)).generate_state(1, np.uint64)[0]
    generator.manual_seed(int(torch_seed >> np.uint64(1)))
    return SimulationRNG(np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(0,))), generator)


def client_generator(seed: int, round_index: int, client: int) -> torch.Generator:
    """The torch Generator of :func:`client_rng` ``(seed, round_index, client)``: what a
    client half draws from in one round, independent of the order clients run in."""
    return client_rng(seed, round_index, client).torch
