"""FedProp's hyper-parameters (:mod:`securefl.methods.hyper`): CrossClientLP's on top of the
FedAvg family's pseudo-labelling ones, for fedprop and fedprop-mt.
"""

from __future__ import annotations

from dataclasses import dataclass

from securefl.crypto.shade_hops import DEFAULT_CHUNK_BYTES
from securefl.methods.fedavg.hyper import MeanTeacherHyper, PseudoLabelHyper
from securefl.methods.hyper import NON_NEGATIVE, choice, flag, hp, integer, number
from securefl.protocols.crossclient import HAMMING_BACKENDS


@dataclass(frozen=True)
class CrossClientLPHyper(PseudoLabelHyper):
    """fedprop and fedprop-mt: CrossClientLP's ``k``, ``alpha``, LSH length ``L`` in
    [1, 2^16), the secure Hamming backend, SHADE's ``chunk_bytes`` (the most bytes a pair's
    message carries per peer, a positive int), and the optional label-mass gate (FedProp
    Algorithm 2 / 3)."""

    k: int = hp(10, integer(1))
    alpha: float = hp(0.99, number(0.0, 1.0, low_open=True, high_open=True))
    L: int = hp(4096, integer(1, 1 << 16))
    hamming_backend: str = hp("auto", choice(tuple(HAMMING_BACKENDS)))
    chunk_bytes: int = hp(DEFAULT_CHUNK_BYTES, integer(1))
    min_label_mass: float = hp(0.0, NON_NEGATIVE)
    mass_weighting: bool = hp(False, flag)


@dataclass(frozen=True)
class FedPropHyper(CrossClientLPHyper):
    """fedprop: CrossClientLP's fields and ``warmup_in_budget`` (the warm-up rounds counted
    inside the round budget; FedProp only, off: the paper's schedule)."""

    warmup_in_budget: bool = hp(False, flag)


@dataclass(frozen=True)
class FedPropMTHyper(CrossClientLPHyper, MeanTeacherHyper):
    """fedprop-mt: FedProp's fields and the mean teacher's."""
