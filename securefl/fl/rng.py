"""Simulation randomness owned by one method: a numpy Generator and a torch Generator,
both derived from the run's single ``seed``, with their states capturable so that a
resumed run reproduces an uninterrupted one bit for bit.

This is *simulation* randomness (sampling, shuffling, initialisation), known to anyone
who knows ``--seed``.  No secret comes from here: keys and masks come from the OS
CSPRNG, and the secrets that shape a method's outputs (LSH seeds, DP noise) from the
method's ``crypto_seed`` (:class:`securefl.methods.base.Method`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class SimulationRNG:
    numpy: np.random.Generator
    torch: torch.Generator

    @classmethod
    def from_seed(cls, seed: int) -> "SimulationRNG":
        generator = torch.Generator()
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
