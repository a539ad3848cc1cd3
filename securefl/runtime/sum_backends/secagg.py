"""Backend ``secagg``: pairwise masking with double masking and dropout recovery
(Bonawitz et al. 2017, :mod:`securefl.crypto.secagg`), authenticated, with the consistency
round; its exchanges are :mod:`securefl.runtime.secure_sum_steps`.

A client contributes round 0 (its tagged keys) in the reply of the step that produced its
vector and answers ``secagg/keys``, ``secagg/ciphertexts``, ``secagg/survivors`` and
``secagg/endorsements``; the server collects with
:func:`~securefl.runtime.secure_sum_steps.aggregate_steps`.  Who learns what: the server, each
sum over its survivors and who dropped; a coalition of fewer than t clients with the
server, nothing else (complete graph; SecAgg+ in the simulator only covers the server
alone).  The unauthenticated semi-honest variant (``SumSpec.cohort`` empty) is run only
by the simulator, for cost comparisons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from securefl.crypto.identity import Credentials
from securefl.crypto.secagg import SecAggConfig
from securefl.runtime import secure_sum_steps
from securefl.runtime.policy import PrivacyPolicy
from securefl.runtime.sum_backends.base import CONTRIBUTE, SumBackend, SumOutcome, SumSpec
from securefl.runtime.transport import Exchange, Record, Transport


def config_of(spec: SumSpec) -> SecAggConfig:
    """The :class:`SecAggConfig` of ``spec``: authenticated with the consistency round when
    it names a cohort, else the semi-honest variant."""
    return SecAggConfig(spec.session, spec.members, spec.threshold, spec.dim, spec.modulus_bits,
                        spec.neighbours, members=spec.cohort, consistency=bool(spec.cohort))


class SecAgg(SumBackend):
    """Pairwise-masked secure aggregation (module docstring)."""

    name: ClassVar[str] = "secagg"
    neighbours: ClassVar[bool] = True
    client_steps: ClassVar[tuple[str, ...]] = secure_sum_steps.STEPS
    round_steps: ClassVar[tuple[str, ...]] = (CONTRIBUTE, *secure_sum_steps.STEPS[:3])

    def contribute(self, state: Record, reply: Record, *, name: str, spec: SumSpec, index: int,
                   encoded: np.ndarray, credentials: Credentials | None, policy: PrivacyPolicy,
                   seed: bytes | None = None) -> None:
        secure_sum_steps.start(state, reply, index=index, config=config_of(spec), encoded=encoded,
                               credentials=credentials, policy=policy, name=name, seed=seed)

    def answer(self, request: Record, state: Record, reply: Record, *,
               credentials: Credentials | None, seed: bytes | None = None) -> None:
        secure_sum_steps.answer(request, state, reply, credentials=credentials, seed=seed)

    def clear(self, state: Record) -> None:
        secure_sum_steps.clear(state)

    def new_spec(self, members: Sequence[int], *, threshold: int, dim: int,
                 modulus_bits: int) -> SumSpec:
        config = secure_sum_steps.new_config(members, threshold=threshold, dim=dim,
                                             modulus_bits=modulus_bits)
        return SumSpec(config.session, config.clients, config.threshold, dim, modulus_bits,
                       config.members)

    def collect(self, transport: Transport, specs: Mapping[str, SumSpec],
                members: Mapping[str, Sequence[int]], first: Exchange, *,
                timeout: float | None = None) -> SumOutcome:
        outcome = secure_sum_steps.aggregate_steps(
            transport, {name: config_of(spec) for name, spec in specs.items()}, members, first,
            timeout=timeout)
        return SumOutcome(outcome.sums, outcome.failed, outcome.server_seconds,
                          outcome.clock.wall, outcome.clock.cpu, outcome.exchanges)
