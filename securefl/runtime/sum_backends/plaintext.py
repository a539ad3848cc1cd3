"""Backend ``plaintext``: the oracle of every secure backend; it protects nothing.

The same fixed-point ring vectors, the same dropout semantics (a client in the sum iff it
sent its masked input, :attr:`~securefl.crypto.secagg.SurvivorPlan.summed`; too few at any
round: :class:`~securefl.errors.DropoutError`) and the same sum in Z_(2^k), without masks:
each summed client "sends" its encoded vector.  It is the ``secure="plaintext"`` mode of
every method (on a transport the clients upload in the clear and the server runs this sum).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from securefl.crypto.channel import SERVER
from securefl.crypto.fixed_point import ring_sum
from securefl.crypto.identity import Credentials
from securefl.crypto.secagg import SurvivorPlan
from securefl.runtime.sum_backends.base import SimulatedSum, SumBackend


class Plaintext(SumBackend):
    """The plaintext oracle (module docstring)."""

    name: ClassVar[str] = "plaintext"
    secure: ClassVar[bool] = False
    deployable: ClassVar[bool] = False
    neighbours: ClassVar[bool] = True

    def simulate(self, encoded: Sequence[np.ndarray], *, plan: SurvivorPlan, modulus_bits: int,
                 session: bytes, seed: bytes | None = None,
                 credentials: Sequence[Credentials] | None = None) -> SimulatedSum:
        """The ring sum over ``plan.summed`` once ``plan.check()`` passes."""
        plan.check()
        start, start_cpu = time.perf_counter(), time.thread_time()
        total = ring_sum([encoded[i] for i in plan.summed], modulus_bits)
        seconds, cpu = time.perf_counter() - start, time.thread_time() - start_cpu
        sent = {SERVER: 0, **{i: int(encoded[i].nbytes) for i in plan.summed}}
        received = {SERVER: sum(sent.values())}
        n = len(encoded)
        return SimulatedSum(total, tuple(plan.summed), sent, received, seconds, cpu,
                            np.zeros(n), np.zeros(n))
