"""SHADE secure Hamming distance (Bringer, Chabanne, Patey 2013), batched GSHADE-style.

**Two parties.**  The OT sender ``a`` holds codes ``x_1..x_{n_a}``, the OT receiver ``b``
holds ``y_1..y_{n_b}`` (all ``L`` bits).  For every receiver point ``j`` and bit ``l``
one correlated OT runs with choice ``c = y_j[l]`` and a *vector* correlation over all of
``a``'s points, ``Delta_l[i] = 1 - 2 x_i[l]`` (mod 2^16): the sender gets a random
``m0 = p0`` and the receiver ``m_c = p0 + c Delta_l``, i.e. ``m_c[i] = p0[i] - x_i[l] + (x_i[l] XOR c)``.
Summing over ``l``::

    receiver share  R[i, j] = sum_l m_c[i]
    sender share    S[i, j] = |x_i| - sum_l p0[i]
    R + S = sum_l (x_i[l] XOR y_j[l]) = HD(x_i, y_j)   (mod 2^16, exact since L < 2^16)

So an ``n_a x n_b`` block costs ``n_b * L`` OTs whatever ``n_a`` is (GSHADE batching):
:func:`~securefl.crypto.shade_hops.shade_pair` (blocks),
:func:`~securefl.crypto.shade_hops.shade_one_vs_many` (``L`` OTs),
:func:`~securefl.crypto.shade_hops.shade_distance`, all running the hops of
:mod:`securefl.crypto.shade_hops` with the parties below.
The correlated OTs come from IKNP random OTs (:mod:`securefl.crypto.ot`): the two
128-bit outputs of OT ``(j, l)`` are expanded into ``n_a`` 16-bit lanes each,
``p0 = G(k0)``, ``p1 = G(k1)`` (fixed-key AES, :mod:`securefl.crypto.fixed_key`), and the
sender sends the correction ``u = p0 + Delta_l - p1``; the receiver, who holds ``G(k_c)``,
computes ``m_c = G(k_c) + c u``.  Cost: three expansions of ``2 n_a`` bytes per OT (two
by the sender, one by the receiver), and ``16 ceil(n_a / 8)`` bytes of correction plus
16 bytes of IKNP matrix per OT on the wire: about ``n_a n_b L 16`` bits per pair of
parties — 51 GB for n = 5000 split in two.  The OTs run in chunks of receiver points
(IKNP) and cache-sized tiles (expansion); the corrections of a pair cross the link as
one batch of authenticated frames (one hop), which the two parties hold in memory
(about 2 GB at 2 x 500 points, L = 4096).

**All pairs** (:func:`~securefl.crypto.shade_hops.shade_hamming_matrix`, the ``"shade"`` backend of
:func:`securefl.crypto.secure_hamming_matrix`).  For every pair ``a < b`` one party is
the OT sender, alternating by parity (:func:`~securefl.crypto.hamming.pair_roles`) so the traffic is spread evenly
over the parties; afterwards each of the two sends its share of the ``(a, b)`` block to
the server, and every party sends its own in-party block (computed locally in the
clear, it is its own data).  The server adds the shares and assembles the N x N matrix.

**Who learns what (semi-honest, as in FedProp).**  The server learns exactly the
matrix H (FedProp's Algorithm 3 hands it H), nothing else: each share it receives is
uniform on its own, and the pair of shares determines only HD.  Party ``b`` sees
``u``, which is pseudorandom because ``p_{1-c}`` is (the OT hides ``k_{1-c}``), and its
own random share; it learns nothing about ``x``.  Party ``a`` sees only the IKNP
matrix, which hides ``y`` (see :mod:`securefl.crypto.ot`), and its own random share.
Clients learn no distances.  A party that also colludes with the server learns the
other's share and hence HD — exactly what the server learns anyway.

**Client links need integrity, not confidentiality.**  Relayed through a semi-honest
server, the pair's frames add nothing to its view: the hello carries a public point and
public counters; the base-OT points ``(P_i^0, P_i^1)`` are pseudorandom whatever the
choices (DDH, :mod:`securefl.crypto.ot`); every session's IKNP matrix
``U = G(k^0) XOR G(k^1) XOR r`` reads a fresh window of the PRG streams and is
pseudorandom to anyone without the base-OT keys (CDH); and each correction
``u = p0 + Delta - p1`` is masked by ``p1 = G(H(q XOR s))``, which needs the sender's
``q``.  Replace every ``p1`` by a uniform vector (TCCR + PRG) and each ``u`` becomes
independent uniform noise; what is left of the server's view is the receiver's share
``R`` (uniform, masked by the ``p0`` of the first bit) and ``S = HD - R``.  A relay
that alters frames is stopped by the per-frame MAC under the link's own key K_ab, which
the two clients derive from their X25519 agreement and the server cannot compute
(:class:`~securefl.crypto.channel.LinkKeys`; the links of pairs run side by side share
the parties' key pairs).

**Across rounds** (``setups``, :class:`~securefl.crypto.ot.OTSetups`): a pair runs its
128 X25519 base OTs once per federation and direction and every later call is a new
session of the same IKNP extension (fresh PRG windows and TCCR tweaks, numbered sessions
that are never re-used: the argument is in :mod:`securefl.crypto.ot`), so a round's
fixed cost per pair is two small messages instead of the base OTs.

Tampering with any frame (correction, IKNP matrix, hello, base OT, shares) raises
:class:`~securefl.errors.ProtocolError` from the channel's MAC and sequence checks or
from shape checks here; a reconstructed distance above ``L`` is also rejected.

Why by hand: there is no Python SHADE/GSHADE.  AES comes from ``cryptography`` over
whole tiles; the per-lane arithmetic around it (feed-forward, correction, share sums)
is one fused compiled pass per tile (:mod:`securefl.crypto.kernels`), with no Python
loop per bit, OT or lane.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from securefl.crypto import kernels
from securefl.crypto.fixed_key import FixedKeyAES, block_buffer
from securefl.errors import ProtocolError

CHUNK_OTS = 1 << 16
"""OTs per IKNP chunk (whole receiver points): bounds the memory of the OT extension."""
TILE_BYTES = 1 << 18
"""Bytes of expanded OT messages per tile: the few tile buffers stay in the L2 cache."""
FRAME_BYTES = 1 << 22
"""Bytes of corrections per frame on the link (several tiles)."""


@dataclass
class _Expander:
    """Per-thread fixed-key AES with reusable tile buffers for the OT-message expansion.

    ``expand`` returns the two halves of ``G(seed)_k = pi(seed ^ k) ^ (seed ^ k)`` for
    ``k < blocks``: the inputs ``seed ^ k`` (one compiled pass) and their permutation
    ``pi(seed ^ k)`` (one AES call).  The feed-forward XOR is left to the SHADE kernels,
    which fuse it with the arithmetic that consumes the lanes.
    """

    blocks: int
    rows: int
    aes: FixedKeyAES = field(default_factory=FixedKeyAES)
    _inputs: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _outputs: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def expand(self, seeds: np.ndarray, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """``(pi(seed ^ k), seed ^ k)`` of ``(count, 2)`` uint64 seeds, each as ``(count, 8 * blocks)`` uint16 lanes."""
        if slot not in self._outputs:
            self._inputs[slot] = np.empty((self.rows, self.blocks, 2), dtype=np.uint64)
            self._outputs[slot] = block_buffer(self.rows * self.blocks)
        count = seeds.shape[0]
        inputs = self._inputs[slot][:count]
        kernels.expansion_inputs_into(np.ascontiguousarray(seeds), inputs)
        permuted = self.aes.permute_into(inputs, self._outputs[slot])
        lanes = 8 * self.blocks
        return permuted.view(np.uint16).reshape(count, lanes), inputs.view(np.uint16).reshape(count, lanes)


@dataclass
class ShadeSender:
    """OT-sender side of one SHADE pair: holds ``x`` (``(n_a, L)`` 0/1), never sees ``y``.

    For OT ``(j, l)`` its two (expanded) messages are ``p0`` and ``p0 + Delta_l`` with
    ``Delta_l[i] = 1 - 2 x_i[l]``; it sends ``u = p0 + Delta_l - p1`` and keeps
    ``sum_l p0``.  Its share of ``HD(x_i, y_j)`` is ``|x_i| - sum_l p0[i]`` (mod 2^16).
    """

    codes: np.ndarray
    receivers: int

    def __post_init__(self) -> None:
        count, length = self.codes.shape
        self.blocks = -(-count // 8)
        lanes = 8 * self.blocks
        self.correlation = np.zeros((length, lanes), dtype=np.uint16)
        self.correlation[:, :count] = (1 - 2 * self.codes.T.astype(np.int32)).astype(np.uint16)
        self.sums = np.zeros((self.receivers, lanes), dtype=np.uint16)

    def tile(
        self, expander: _Expander, seeds0: np.ndarray, seeds1: np.ndarray, first: int, out: np.ndarray
    ) -> np.ndarray:
        """Write the corrections ``u`` of the tile of OTs ``first, first + 1, ...`` into ``out``.

        OT ``g`` of the pair is receiver point ``g // L``, bit ``g % L``.
        """
        raw0, in0 = expander.expand(seeds0, 0)
        raw1, in1 = expander.expand(seeds1, 1)
        kernels.shade_sender_rows(raw0, in0, raw1, in1, self.correlation, first, out, self.sums)
        return out

    def share(self) -> np.ndarray:
        """``(n_a, n_b)`` uint16 share: ``|x_i| - sum_l p0``."""
        count = self.codes.shape[0]
        weights = self.codes.sum(axis=1, dtype=np.int64).astype(np.uint16)
        return (weights[:, None] - self.sums[:, :count].T).astype(np.uint16)


@dataclass
class ShadeReceiver:
    """OT-receiver side of one SHADE pair: holds ``y`` (``(n_b, L)`` 0/1), never sees ``x``.

    With choice ``c = y_j[l]`` it gets ``p_c`` and computes ``m_c = p_c + c u = p0 + c Delta_l``;
    its share of ``HD(x_i, y_j)`` is ``sum_l m_c[i]`` (mod 2^16).
    """

    codes: np.ndarray
    senders: int

    def __post_init__(self) -> None:
        self.lanes = 8 * -(-self.senders // 8)
        self.sums = np.zeros((self.codes.shape[0], self.lanes), dtype=np.uint16)
        self.choices = np.ascontiguousarray(self.codes.reshape(-1))

    def tile(self, expander: _Expander, seeds: np.ndarray, correction: np.ndarray, first: int) -> None:
        """Absorb the corrections ``u`` of the tile of OTs ``first, first + 1, ...``."""
        rows = seeds.shape[0]
        if correction.shape != (rows, self.lanes) or correction.dtype != np.uint16:
            raise ProtocolError(
                f"SHADE correction has shape {correction.shape} {correction.dtype}, expected {(rows, self.lanes)} uint16"
            )
        raw, inputs = expander.expand(seeds, 0)
        length = self.codes.shape[1]
        kernels.shade_receiver_rows(raw, inputs, np.ascontiguousarray(correction), self.choices, first, length, self.sums)

    def share(self) -> np.ndarray:
        """``(n_a, n_b)`` uint16 share: ``sum_l m_c``."""
        return np.ascontiguousarray(self.sums[:, : self.senders].T)
