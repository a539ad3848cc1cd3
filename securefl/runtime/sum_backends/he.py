"""Backend ``he``: BFV homomorphic aggregation under a key the clients share and the server
lacks (:mod:`securefl.crypto.he`; TenSEAL).

Simulated in process only: it runs no transport exchanges yet, so a deployment refuses it
(:attr:`HE.deployable` is False; :func:`securefl.fl.uploads.refuse_simulated_backend`) and
the simulator runs :func:`securefl.crypto.he.run_he` with every party in this process.
Another trust model than ``secagg``: one client colluding with the server reads every
input; it finishes with any dropouts once ``threshold`` inputs arrived and a client is left
to deal and to decrypt (``needs_unmaskers`` is False).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from securefl.crypto.channel import SERVER
from securefl.crypto.he import MAX_CLIENTS, run_he
from securefl.crypto.identity import Credentials
from securefl.crypto.secagg import SurvivorPlan
from securefl.runtime.sum_backends.base import SimulatedSum, SumBackend


class HE(SumBackend):
    """Homomorphic aggregation, simulated in process (module docstring)."""

    name: ClassVar[str] = "he"
    deployable: ClassVar[bool] = False
    max_clients: ClassVar[int | None] = MAX_CLIENTS
    needs_unmaskers: ClassVar[bool] = False

    def simulate(self, encoded: Sequence[np.ndarray], *, plan: SurvivorPlan, modulus_bits: int,
                 session: bytes, seed: bytes | None = None,
                 credentials: Sequence[Credentials] | None = None) -> SimulatedSum:
        """:func:`~securefl.crypto.he.run_he` (its session drawn from ``seed`` as
        :func:`~securefl.runtime.secure_sum` draws ``session``); ``extra`` names the dealer
        and the decryptor and their costs, and the key distribution's bytes."""
        outcome = run_he(encoded, plan=plan, modulus_bits=modulus_bits, seed=seed,
                         credentials=credentials)
        stats = outcome.network.stats
        extra = {
            "dealer": outcome.dealer,
            "dealer_cpu_seconds": float(outcome.client_cpu_seconds[outcome.dealer]),
            "dealer_bytes_sent": int(stats[outcome.dealer].bytes_sent),
            "decryptor": outcome.decryptor,
            "decryptor_cpu_seconds": float(outcome.client_cpu_seconds[outcome.decryptor]),
            "decryptor_bytes_received": int(stats[outcome.decryptor].bytes_received),
            "key_distribution_bytes": outcome.key_bytes,
        }
        received = {party: s.bytes_received for party, s in stats.items()}
        received.setdefault(SERVER, 0)
        return SimulatedSum(outcome.total, outcome.survivors, dict(outcome.bytes_sent), received,
                            outcome.server_seconds, outcome.server_cpu_seconds,
                            outcome.client_seconds, outcome.client_cpu_seconds, extra)
