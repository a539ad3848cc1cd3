"""Where cryptographic randomness comes from: the OS CSPRNG, or a seeded AES-CTR stream.

A :class:`RandomSource` built with ``seed=None`` returns ``secrets.token_bytes`` (the
production path).  With a seed it returns consecutive AES-CTR streams of
``SHA-256(seed)`` (one fresh nonce per call), which makes whole protocol runs
reproducible for tests; :meth:`RandomSource.child` derives an independent source per
party or purpose by hashing a label into the seed, so parties never share randomness.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import numpy as np

from securefl.crypto import prg
from securefl.errors import InputError


@dataclass
class RandomSource:
    """Cryptographic random bytes: OS CSPRNG if ``key`` is None, else AES-CTR under ``key``."""

    key: bytes | None = None
    calls: int = 0

    def bytes(self, count: int) -> bytes:
        """``count`` fresh random bytes."""
        if self.key is None:
            return secrets.token_bytes(count)
        self.calls += 1
        return prg.expand(self.key, count, np.uint8, nonce=self.calls).tobytes()

    def array(self, shape: int | tuple[int, ...], dtype: np.dtype | type = np.uint8) -> np.ndarray:
        """A fresh array of uniformly random integers of ``dtype``."""
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self.bytes(count * dtype.itemsize), dtype=dtype).reshape(shape).copy()

    def below(self, bound: int) -> int:
        """A uniform integer in ``[1, bound)`` (statistical distance below 2^-128)."""
        width = (bound.bit_length() + 7) // 8 + 16
        return 1 + int.from_bytes(self.bytes(width), "big") % (bound - 1)

    def child(self, label: str) -> "RandomSource":
        """An independent source for one party or purpose."""
        if self.key is None:
            return RandomSource()
        return RandomSource(hashlib.sha256(self.key + b"/" + label.encode()).digest()[:16])


def random_source(seed: bytes | int | None) -> RandomSource:
    """``None`` -> OS CSPRNG; bytes or a non-negative int -> a reproducible AES-CTR source."""
    if seed is None:
        return RandomSource()
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (bytes, int, np.integer)):
        raise InputError("seed", seed, "must be None, bytes or a non-negative int")
    if isinstance(seed, (int, np.integer)):
        if seed < 0:
            raise InputError("seed", seed, "must be non-negative")
        seed = int(seed).to_bytes(max(1, (int(seed).bit_length() + 7) // 8), "big")
    return RandomSource(hashlib.sha256(b"securefl seed/" + seed).digest()[:16])
