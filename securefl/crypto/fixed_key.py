"""Fixed-key AES hashing and expansion: the random-permutation model of Guo et al. 2020.

Let ``pi = AES_K0`` for a fixed, public key ``K0`` (SHA-256 of a domain string).  In the
random-permutation model (Guo, Katz, Wang, Yu, "Efficient and secure multiparty
computation from fixed-key block ciphers", S&P 2020) ``pi`` is a public random
permutation that everyone, the adversary included, can evaluate in both directions.

* **TCCR hash** ``H(x, i) = pi(pi(x) XOR i) XOR pi(x)`` (Guo et al.) is tweakable
  circular correlation robust: for a secret uniform ``s`` and distinct tweaks ``i``,
  the values ``H(x_i XOR b_i * s, i)`` are pseudorandom even when the ``x_i`` are known.
  IKNP OT extension needs exactly this to turn ``q_j`` and ``q_j XOR s`` into two
  independent-looking 128-bit OT outputs; the tweak is the global OT index, so no two
  OTs ever hash the same input under the same tweak.
* **Expansion** of a secret uniform 128-bit seed ``r`` into ``B`` blocks:
  ``G(r)_k = pi(r XOR k) XOR (r XOR k)`` for ``k = 0 .. B-1`` (Matyas–Meyer–Oseas /
  Davies–Meyer feed-forward).  ``pi(x) XOR x`` is correlation robust for a secret
  uniform ``r`` and distinct public offsets ``k`` (Guo et al.), so the blocks are
  jointly pseudorandom; the feed-forward is what stops anyone from running ``pi``
  backwards from an output to the seed.  Seeds of different OTs are independent
  outputs of the TCCR hash, so inputs of different OTs collide only with probability
  ``(#blocks)^2 / 2^128``.

Why by hand: a fresh AES key schedule per OT through ``cryptography`` costs ~6 us,
which for tens of millions of OTs would dominate everything; one fixed-key ECB
encryptor over large reused buffers runs at ~9 GB/s (AES-NI) and releases the GIL.

Blocks are handled as ``(..., 2)`` uint64 arrays (little-endian 128-bit values).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from securefl.crypto import aesni
from securefl.crypto.kernels import xor_tweak_into
from securefl.errors import InputError

FIXED_KEY = hashlib.sha256(b"securefl fixed-key AES permutation v1").digest()[:16]
"""The public key of the permutation pi (no secret: its security comes from the model)."""
FIXED_ROUND_KEYS = aesni.round_keys(FIXED_KEY)
"""The fixed key's AES schedule, for the compiled paths (:mod:`securefl.crypto.aesni`)."""

_SLACK_BLOCKS = 1  # update_into wants len(out) >= len(in) + 15 bytes


@dataclass
class FixedKeyAES:
    """The public permutation ``pi`` with reusable scratch space (one per thread).

    The ``cryptography`` ECB context is created on first use; an instance must not be
    shared between threads that run at the same time.
    """

    _encryptor: object | None = field(default=None, repr=False)
    _scratch: np.ndarray | None = field(default=None, repr=False)
    _tccr_scratch: np.ndarray | None = field(default=None, repr=False)

    def _context(self):
        if self._encryptor is None:
            self._encryptor = Cipher(algorithms.AES(FIXED_KEY), modes.ECB()).encryptor()
        return self._encryptor

    def _buffer(self, blocks: int) -> np.ndarray:
        if self._scratch is None or self._scratch.shape[0] < blocks + _SLACK_BLOCKS:
            self._scratch = np.empty((blocks + _SLACK_BLOCKS, 2), dtype=np.uint64)
        return self._scratch

    def permute_into(self, blocks: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Write ``pi(blocks)`` into the first blocks of ``out`` and return that view.

        ``blocks`` is C-contiguous uint64 with a last axis of 2; ``out`` is a
        C-contiguous uint64 array with at least one block more than ``blocks`` (OpenSSL
        wants 15 spare bytes), e.g. from :func:`block_buffer`.
        """
        count = blocks.size // 2
        if out.size < 2 * (count + _SLACK_BLOCKS):
            raise InputError("out", out, f"needs room for {count + _SLACK_BLOCKS} blocks")
        self._context().update_into(memoryview(blocks).cast("B"), memoryview(out).cast("B"))
        return out.reshape(-1)[: 2 * count].reshape(blocks.shape)

    def update_into(self, source: memoryview, target: memoryview) -> None:
        """``pi`` of the blocks in byte view ``source`` into byte view ``target`` (at least 16
        bytes longer): :meth:`permute_into` without its checks and views, for callers that
        made both views once and reuse them on every tile."""
        self._context().update_into(source, target)

    def permute(self, blocks: np.ndarray) -> np.ndarray:
        """``pi(blocks)`` as a new ``(..., 2)`` uint64 array."""
        blocks = np.ascontiguousarray(blocks, dtype=np.uint64)
        count = blocks.size // 2
        scratch = self._buffer(count)
        self._context().update_into(memoryview(blocks).cast("B"), memoryview(scratch).cast("B"))
        return scratch[:count].reshape(blocks.shape).copy()

    def tccr(
        self, x: np.ndarray, tweaks: np.ndarray, out: np.ndarray | None = None, *, high: int = 0
    ) -> np.ndarray:
        """``H(x_i, tweak_i) = pi(pi(x_i) XOR tweak_i) XOR pi(x_i)`` for ``(m, 2)`` blocks.

        The 128-bit tweak of row ``i`` is ``high * 2^64 + tweaks[i]``: ``tweaks`` (``(m,)``)
        enter the low 64 bits, the scalar ``high`` the high 64 bits (OT extension puts its
        session number there, :mod:`securefl.crypto.ot`).  Scratch space is reused between
        calls; ``out`` (``(m, 2)`` uint64) receives the result if given.
        """
        if not isinstance(high, (int, np.integer)) or not 0 <= int(high) < 1 << 64:
            raise InputError("high", high, "must be an integer in [0, 2^64)")
        x = np.ascontiguousarray(x, dtype=np.uint64)
        if x.ndim != 2 or x.shape[1] != 2:
            raise InputError("x", x, "must be an (m, 2) uint64 array of 128-bit blocks")
        tweaks = np.asarray(tweaks, dtype=np.uint64)
        if tweaks.shape != (x.shape[0],):
            raise InputError("tweaks", tweaks, f"must have shape ({x.shape[0]},)")
        count = x.shape[0]
        if out is None:
            out = np.empty((count, 2), dtype=np.uint64)
        elif out.shape != (count, 2) or out.dtype != np.uint64:
            raise InputError("out", out, f"must be a ({count}, 2) uint64 array")
        if self._tccr_scratch is None or self._tccr_scratch.size < 4 * (count + _SLACK_BLOCKS):
            self._tccr_scratch = np.empty(4 * (count + _SLACK_BLOCKS), dtype=np.uint64)
        half = 2 * (count + _SLACK_BLOCKS)
        first = self.permute_into(x, self._tccr_scratch[:half])
        mixed = self._tccr_scratch[half:].reshape(-1)[: 2 * count].reshape(count, 2)
        xor_tweak_into(first, tweaks, np.uint64(high), mixed)
        second = self.permute_into(mixed, self._buffer(count).reshape(-1))
        return np.bitwise_xor(second, first, out=out)


def block_buffer(count: int) -> np.ndarray:
    """A flat uint64 buffer for ``count`` blocks plus the spare block ``permute_into`` needs."""
    return np.empty(2 * (count + _SLACK_BLOCKS), dtype=np.uint64)
