"""What the secure Hamming backends share: code checks, pair roles, the result.

:func:`securefl.protocols.secure_hamming_matrix` (:mod:`securefl.protocols.hamming`) runs one of
the backends (:mod:`securefl.crypto.shade`, :mod:`securefl.crypto.lwe`); each of them, and
the hops that cut them for relayed transports, needs the pieces below and nothing of the
entry point, so this module sits under all of them (no import circle).

* :func:`check_codes`: per-party ``(n_j, L)`` 0/1 codes, ``L < 2^16``;
* :func:`pair_roles`: which party of a pair is active (OT sender, LWE encryptor);
* the end both backends share: for every pair ``a < b`` each of the two sends the server
  its share of the ``(a, b)`` block (``n_a x n_b`` values in ``Z_(2^16)`` summing to
  ``HD``; each alone uniform), every party its own block (:func:`own_block`, its own data
  in the clear), and the server adds them
  (:func:`securefl.protocols.hamming.relay.assemble`) into a :class:`HammingResult`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from securefl.crypto.hamming_plain import hamming_matrix, pack_codes
from securefl.errors import InputError

SHARE_BITS = 16
"""Shares live in Z_(2^16): the code length L must be below 2^16."""


@dataclass
class HammingResult:
    """The N x N Hamming matrix the server reconstructs, and what it cost.

    ``matrix`` is int32 with the parties' blocks in party order; ``bytes_sent`` and
    ``bytes_received`` map a party index (``SERVER`` = -1 for the server) to bytes.
    ``cpu_seconds_by_party`` (where the backend measures it) is the process CPU time of
    each party's own steps, BLAS threads included; ``bytes_by_message`` the bytes sent
    per message kind.  SHADE also reports ``setup_seconds`` (the CPU seconds both parties of
    every pair spent on its IKNP setup hops, the hello to the first ``U``: base OTs where a
    pair had no setup yet, ``fresh_setups`` of them), ``pair_seconds`` (``"a-b"`` -> the two
    parties' CPU seconds on the pair's stream hops); ``cpu_seconds_by_phase`` (LWE
    backends) the CPU time of the products with the public matrix (``fixed``, once per
    party) and of the per-pair work (``per_pair``).
    """

    matrix: np.ndarray
    bytes_sent: dict[int, int]
    backend: str
    seconds: float
    ots: int = 0
    bytes_received: dict[int, int] = field(default_factory=dict)
    prg_bytes: int = 0
    offsets: tuple[int, ...] = ()
    cpu_seconds_by_party: dict[int, float] = field(default_factory=dict)
    bytes_by_message: dict[str, int] = field(default_factory=dict)
    setup_seconds: float = 0.0
    pair_seconds: dict[str, float] = field(default_factory=dict)
    fresh_setups: int = 0
    cpu_seconds_by_phase: dict[str, float] = field(default_factory=dict)

    @property
    def bytes_total(self) -> int:
        """Bytes that crossed the network."""
        return sum(self.bytes_sent.values())


def check_codes(codes: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Validate per-party ``(n_j, L)`` 0/1 code arrays; returns them as uint8 arrays."""
    if isinstance(codes, np.ndarray) and codes.ndim != 3:
        raise InputError("codes", codes, "must be a sequence of per-party (n_j, L) arrays")
    try:
        parties = list(codes)
    except TypeError:
        raise InputError("codes", codes, "must be a sequence of per-party (n_j, L) arrays") from None
    if not parties:
        raise InputError("codes", codes, "needs at least one party")
    checked: list[np.ndarray] = []
    length = None
    for index, party in enumerate(parties):
        name = f"codes[{index}]"
        array = np.asarray(party)
        if array.ndim != 2:
            raise InputError(name, array, f"must be a 2-D (n, L) array, got rank {array.ndim}")
        if array.dtype.kind not in "biu":
            raise InputError(name, array, f"must have a bool or integer dtype, got {array.dtype}")
        if array.shape[0] == 0:
            raise InputError(name, array, "party has no points")
        if array.shape[1] == 0:
            raise InputError(name, array, "code length L must be positive")
        if length is None:
            length = array.shape[1]
        elif array.shape[1] != length:
            raise InputError(name, array, f"code length {array.shape[1]} differs from L={length} of codes[0]")
        if array.dtype != np.bool_ and (array.min() < 0 or array.max() > 1):
            raise InputError(name, array, "codes must be binary (0/1)")
        checked.append(array.astype(np.uint8, copy=False))
    if length >= 1 << SHARE_BITS:
        raise InputError("codes", length, f"code length L must be below 2^{SHARE_BITS} (the share modulus)")
    return checked


def pair_roles(a: int, b: int) -> tuple[int, int]:
    """``(active, passive)`` roles of the pair ``a < b``: ``a`` is active when ``a + b`` is even.

    Active is SHADE's OT sender (which carries nearly all of the pair's traffic) and the
    LWE backend's encryptor.  A fixed rule such as "the lower index is active" loads
    party 0 with every pair and the last party with none; alternating by parity is a
    round-robin orientation: each party is active in about half of its pairs (exactly
    half of ``P - 1`` when that is even).
    """
    return (a, b) if (a + b) % 2 == 0 else (b, a)


def own_block(codes: np.ndarray) -> np.ndarray:
    """A party's in-party block of distances (its own data, in the clear), as uint16."""
    return hamming_matrix(pack_codes(codes)).astype(np.uint16)
