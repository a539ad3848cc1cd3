"""AES-128-CTR pseudo-random generator: short seeds -> numpy arrays of any dtype.

Every mask, pad and pseudo-random OT message in securefl is an AES-CTR keystream
``AES_seed(nonce || 0), AES_seed(nonce || 1), ...`` reinterpreted as the requested
dtype.  AES is a PRF under the standard assumption, so the output is computationally
indistinguishable from uniform for anyone who does not know the 128-bit seed.

Why by hand: ``cryptography`` gives AES but not the batching into numpy arrays with
reused buffers.  ``Cipher.update_into`` writes straight into a preallocated buffer and
is several times faster than ``update()`` plus fresh allocations, so the hot path
encrypts 1 MiB chunks of counter blocks directly into the caller's output.

Seeds come from the OS CSPRNG (:func:`random_seed`, :func:`random_seeds`); never from
numpy or Mersenne Twister.
"""

from __future__ import annotations

import secrets
import time

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from securefl.errors import InputError

SEED_BYTES = 16
"""Length of a PRG seed (an AES-128 key)."""

_CHUNK = 1 << 20
_BLOCKS_PER_CHUNK = _CHUNK // 16  # 2^16: chunk offsets never carry into the low 16 bits
_SLACK = 15  # update_into needs len(out) >= len(data) + block_size - 1
_LOW_COUNTERS = np.arange(_BLOCKS_PER_CHUNK, dtype=np.uint64).astype(">u8").view(np.uint64)


def random_seed() -> bytes:
    """A fresh 128-bit seed from the OS CSPRNG."""
    return secrets.token_bytes(SEED_BYTES)


def random_seeds(count: int) -> np.ndarray:
    """``count`` fresh seeds from the OS CSPRNG as a ``(count, 16)`` uint8 array."""
    if count < 0:
        raise InputError("count", count, "must be non-negative")
    return np.frombuffer(secrets.token_bytes(SEED_BYTES * count), dtype=np.uint8).reshape(
        count, SEED_BYTES
    )


def _check_seed(seed: bytes | np.ndarray) -> bytes:
    raw = bytes(seed) if not isinstance(seed, bytes) else seed
    if len(raw) != SEED_BYTES:
        raise InputError("seed", seed, f"must be {SEED_BYTES} bytes, got {len(raw)}")
    return raw


def keystream_into(seed: bytes | np.ndarray, out: np.ndarray, *, nonce: int = 0) -> np.ndarray:
    """Fill the C-contiguous array ``out`` with the AES-CTR keystream of ``seed``.

    The counter block is ``nonce (8 bytes, big-endian) || counter (8 bytes, big-endian)``,
    exactly the keystream of ``modes.CTR(nonce || 0^64)``.  ``nonce`` selects an
    independent stream under the same seed, so one seed can feed several domains.

    Implementation: counter blocks for a 1 MiB chunk are laid out once (the block
    index pre-byteswapped) and encrypted with AES-ECB straight into ``out``; per chunk
    only the high bits of the counter change (one vectorised OR).  This measured ~1.4x
    faster than OpenSSL's CTR mode through ``cryptography`` on the project machine.
    """
    key = _check_seed(seed)
    if not out.flags.c_contiguous:
        raise InputError("out", out, "must be C-contiguous")
    if not 0 <= nonce < 1 << 64:
        raise InputError("nonce", nonce, "must fit in 64 bits")
    flat = out.reshape(-1).view(np.uint8)
    total = flat.size
    if total == 0:
        return out
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    used = min(_BLOCKS_PER_CHUNK, -(-total // 16))
    blocks = np.empty((used, 2), dtype=np.uint64)
    blocks[:, 0] = _be_word(nonce)
    block_bytes = memoryview(blocks).cast("B")
    view = memoryview(flat)
    body = total - total % _CHUNK
    scratch: bytearray | None = None
    for chunk, offset in enumerate(range(0, body, _CHUNK)):
        np.bitwise_or(_LOW_COUNTERS, _be_word(chunk * _BLOCKS_PER_CHUNK), out=blocks[:, 1])
        end = offset + _CHUNK
        if end + _SLACK <= total:
            encryptor.update_into(block_bytes, view[offset : end + _SLACK])
        else:
            scratch = scratch if scratch is not None else bytearray(_CHUNK + _SLACK)
            encryptor.update_into(block_bytes, scratch)
            view[offset:end] = memoryview(scratch)[:_CHUNK]
    tail = total - body
    if tail:
        padded = -(-tail // 16)
        np.bitwise_or(
            _LOW_COUNTERS[:padded],
            _be_word((body // _CHUNK) * _BLOCKS_PER_CHUNK),
            out=blocks[:padded, 1],
        )
        view[body:] = encryptor.update(block_bytes[: 16 * padded])[:tail]
    return out


def counter_blocks(count: int, *, nonce: int = 0) -> np.ndarray:
    """The AES-CTR counter blocks ``nonce || 0 .. count - 1`` (both halves big-endian) as a
    ``(count, 2)`` uint64 array: encrypting them under a seed with AES-ECB gives the first
    ``count`` blocks of that seed's keystream (:func:`keystream_into` with this ``nonce``)."""
    if not 0 <= nonce < 1 << 64:
        raise InputError("nonce", nonce, "must fit in 64 bits")
    blocks = np.empty((count, 2), dtype=">u8")
    blocks[:, 0] = nonce
    blocks[:, 1] = np.arange(count, dtype=np.uint64)
    return blocks.view(np.uint64)


def _be_word(value: int) -> np.uint64:
    """The native uint64 whose memory holds ``value`` as 8 big-endian bytes."""
    return np.frombuffer(value.to_bytes(8, "big"), dtype=np.uint64)[0]


def expand(
    seed: bytes | np.ndarray,
    shape: int | tuple[int, ...],
    dtype: np.dtype | type = np.uint8,
    *,
    nonce: int = 0,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Expand one 16-byte seed into a pseudo-random array of ``shape`` and ``dtype``.

    Integer dtypes come out uniform over their full range (e.g. ``uint64`` is uniform
    in ``Z_(2^64)``).  Pass ``out`` to reuse a buffer on a hot path.
    """
    dtype = np.dtype(dtype)
    if dtype.kind not in "uib":
        raise InputError("dtype", dtype, "must be an integer or bool dtype")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(s < 0 for s in shape):
        raise InputError("shape", shape, "dimensions must be non-negative")
    if out is None:
        out = np.empty(shape, dtype=dtype)
    elif out.shape != shape or out.dtype != dtype:
        raise InputError("out", out, f"must have shape {shape} and dtype {dtype}")
    return keystream_into(seed, out, nonce=nonce)


def expand_many(
    seeds: np.ndarray,
    count: int,
    dtype: np.dtype | type = np.uint8,
    *,
    nonce: int = 0,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Expand each row of a ``(k, 16)`` uint8 seed array into ``count`` elements.

    Returns a ``(k, count)`` array whose row ``i`` equals ``expand(seeds[i], count, dtype)``.
    """
    seeds = np.asarray(seeds)
    if seeds.ndim != 2 or seeds.shape[1] != SEED_BYTES or seeds.dtype != np.uint8:
        raise InputError("seeds", seeds, f"must be a (k, {SEED_BYTES}) uint8 array")
    dtype = np.dtype(dtype)
    if out is None:
        out = np.empty((seeds.shape[0], count), dtype=dtype)
    elif out.shape != (seeds.shape[0], count) or out.dtype != dtype:
        raise InputError("out", out, f"must have shape {(seeds.shape[0], count)} and dtype {dtype}")
    for row, seed in enumerate(seeds):
        keystream_into(seed.tobytes(), out[row], nonce=nonce)
    return out


def measure_throughput(nbytes: int = 1 << 28, repeats: int = 3) -> float:
    """AES-CTR keystream throughput of this machine in GB/s (best of ``repeats``)."""
    buffer = np.empty(nbytes, dtype=np.uint8)
    seed = random_seed()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        keystream_into(seed, buffer)
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9
