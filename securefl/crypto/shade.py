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
:func:`securefl.protocols.shade_pair` (blocks), :func:`~securefl.protocols.shade_one_vs_many`
(``L`` OTs), :func:`~securefl.protocols.shade_distance`.
The correlated OTs come from IKNP random OTs (:mod:`securefl.crypto.ot`): the two
128-bit outputs of OT ``(j, l)`` are expanded into ``n_a`` 16-bit lanes each,
``p0 = G(k0)``, ``p1 = G(k1)`` (fixed-key AES, :mod:`securefl.crypto.fixed_key`), and the
sender sends the correction ``u = p0 + Delta_l - p1``; the receiver, who holds ``G(k_c)``,
computes ``m_c = G(k_c) + c u``.  Cost: three expansions of ``2 n_a`` bytes per OT (two
by the sender, one by the receiver), and ``16 ceil(n_a / 8)`` bytes of correction plus
16 bytes of IKNP matrix per OT on the wire: about ``n_a n_b L 16`` bits per pair of
parties — 51 GB for n = 5000 split in two, so nothing holds a pair's corrections.

**One session, written once, cut into hops.**  A pair's session is cut into IKNP chunks of
whole receiver points (:func:`chunks`, ~``CHUNK_OTS`` OTs), each chunk into correction
frames of whole cache-sized tiles (:func:`framing`).  :class:`ReceiverSession` and
:class:`SenderSession` are the two parties' I/O-free steps over one chunk: the receiver's
IKNP matrix ``U`` (:meth:`ReceiverSession.matrix`), the sender's correction frames for it
(:meth:`SenderSession.seeds`, :meth:`SenderSession.frame`, written where the caller asks:
straight into the sealed batch of a transport) and the receiver absorbing them
(:meth:`ReceiverSession.absorb_frame`).  The setup negotiation before them is
:mod:`securefl.crypto.ot`'s.  The transport hops (:mod:`securefl.crypto.shade_hops`) run
these steps frame by frame in exchanges of at most ``chunk_bytes``, one batch per message
round; the one driver (:mod:`securefl.runtime.engine`) moves them, for one pair
(:func:`securefl.protocols.shade_pair`) as for the all-pairs matrix
(:func:`securefl.protocols.secure_hamming_matrix`), which FedProp and ``bench hamming`` run.

**All pairs** (the ``"shade"`` backend of :func:`securefl.protocols.secure_hamming_matrix`).  For every pair ``a < b`` one party is
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
other's share and hence HD — exactly what the server learns anyway.  Against a client that
*deviates* (a malicious OT sender cheating in the base OTs, a malicious receiver without
KOS's consistency check) SHADE makes no claim: :mod:`securefl.crypto.ot` says what each
can learn; a deviating server alone is stopped by the links, keyed from the roster identities.

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
(:mod:`securefl.runtime.links`).

**Across rounds** (``setups``, :class:`~securefl.crypto.ot.OTSetups`): a pair runs its
128 X25519 base OTs once per federation and direction and every later call is a new
session of the same IKNP extension (fresh PRG windows and TCCR tweaks, numbered sessions
that are never re-used: the argument is in :mod:`securefl.crypto.ot`), so a round's
fixed cost per pair is two small messages instead of the base OTs.

Tampering with any frame (correction, IKNP matrix, hello, base OT, shares) raises
:class:`~securefl.errors.ProtocolError` from the channel's MAC and sequence checks or
from shape checks here; a reconstructed distance above ``L`` is also rejected.

Why by hand: there is no Python SHADE/GSHADE.  The expansion's AES runs inside the
compiled loop that consumes it where the CPU has AES-NI (:mod:`securefl.crypto.aesni`:
feed-forward, correction and share sums per OT row in one pass, no tile of AES outputs in
memory, one compiled call per frame), else ``cryptography`` encrypts whole tiles and one compiled pass per tile does
the per-lane arithmetic (:mod:`securefl.crypto.kernels`); the two give the same frames and
shares, and neither has a Python loop per bit, OT or lane.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from securefl.crypto import aesni, kernels
from securefl.crypto.channel import Message
from securefl.crypto.fixed_key import FIXED_ROUND_KEYS, FixedKeyAES, block_buffer
from securefl.crypto.ot import (
    KAPPA,
    IKNPReceiver,
    IKNPSender,
)
from securefl.errors import InputError, ProtocolError

CHUNK_OTS = 1 << 16
"""OTs per IKNP chunk (whole receiver points): bounds the memory of the OT extension."""
TILE_BYTES = 1 << 18
"""Bytes of expanded OT messages per tile: the few tile buffers stay in the L2 cache."""
FRAME_BYTES = 1 << 22
"""Bytes of corrections per frame on the link (several tiles)."""


@dataclass
class _Expander:
    """Per-thread means of the OT-message expansion ``G(seed)_k = pi(seed ^ k) ^ (seed ^ k)``.

    Where compiled AES-NI is :func:`~securefl.crypto.aesni.available` (``fused``), the SHADE
    kernels expand each OT's seeds themselves, block by block, under :attr:`keys` (the fixed
    key's schedule), and nothing here is used but the keys.  Otherwise ``expand`` returns
    the two halves of ``G`` for a tile: the inputs ``seed ^ k`` (one compiled pass) and their
    permutation ``pi(seed ^ k)`` (one OpenSSL call), the feed-forward XOR left to the kernels
    that consume the lanes; its buffers, byte views and lane views are made once per slot and
    tile height, not per tile.  Both give the same lanes.
    """

    blocks: int
    rows: int
    fused: bool = field(default_factory=lambda: aesni.available())
    keys: np.ndarray = field(default_factory=lambda: FIXED_ROUND_KEYS, repr=False)
    aes: FixedKeyAES = field(default_factory=FixedKeyAES)
    _views: dict[tuple[int, int], tuple[np.ndarray, memoryview, memoryview, np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False)
    _buffers: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def rows_per_call(self, frame_rows: int) -> int:
        """OTs per kernel call for a frame of ``frame_rows``: all of them where the expansion
        is fused (the kernels keep no tile of AES outputs to bound), else a tile (:attr:`rows`)."""
        return frame_rows if self.fused else self.rows

    def _slot(self, slot: int, count: int) -> tuple[np.ndarray, memoryview, memoryview, np.ndarray, np.ndarray]:
        if slot not in self._buffers:
            self._buffers[slot] = (np.empty((self.rows, self.blocks, 2), dtype=np.uint64),
                                   block_buffer(self.rows * self.blocks))
        inputs, outputs = self._buffers[slot]
        inputs = inputs[:count]
        lanes = 8 * self.blocks
        view = (inputs, memoryview(inputs).cast("B"), memoryview(outputs).cast("B"),
                outputs[: 2 * count * self.blocks].view(np.uint16).reshape(count, lanes),
                inputs.view(np.uint16).reshape(count, lanes))
        self._views[slot, count] = view
        return view

    def expand(self, seeds: np.ndarray, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """``(pi(seed ^ k), seed ^ k)`` of C-contiguous ``(count, 2)`` uint64 seeds, each as
        ``(count, 8 * blocks)`` uint16 lanes (views of the slot's buffers, valid until its next call)."""
        count = seeds.shape[0]
        view = self._views.get((slot, count))
        inputs, source, target, permuted, lanes = view if view is not None else self._slot(slot, count)
        kernels.expansion_inputs_into(seeds, inputs)
        self.aes.update_into(source, target)
        return permuted, lanes


@dataclass
class ShadeSender:
    """OT-sender side of one SHADE pair: holds ``x`` (``(n_a, L)`` 0/1), never sees ``y``.

    For OT ``(j, l)`` its two (expanded) messages are ``p0`` and ``p0 + Delta_l`` with
    ``Delta_l[i] = 1 - 2 x_i[l]``; it sends ``u = p0 + Delta_l - p1`` and keeps
    ``sum_l p0``.  Its share of ``HD(x_i, y_j)`` is ``|x_i| - sum_l p0[i]`` (mod 2^16).
    """

    codes: np.ndarray
    receivers: int
    correlation: np.ndarray | None = field(default=None, repr=False)
    """``(L, lanes)`` uint16 ``Delta_l``, lanes past ``n_a`` zero: built from ``codes`` unless
    given (the stream hops keep it between exchanges instead of building it in each)."""

    def __post_init__(self) -> None:
        count, length = self.codes.shape
        self.blocks = -(-count // 8)
        lanes = 8 * self.blocks
        if self.correlation is None:
            self.correlation = np.zeros((length, lanes), dtype=np.uint16)
            correlation = self.correlation[:, :count]
            correlation[...] = self.codes.T  # 1 - 2 x mod 2^16 in place
            correlation *= np.uint16(0xFFFE)
            correlation += np.uint16(1)
        elif self.correlation.shape != (length, lanes) or self.correlation.dtype != np.uint16:
            raise ProtocolError(f"SHADE: kept correlation {self.correlation.shape} {self.correlation.dtype}, "
                                f"expected {(length, lanes)} uint16")
        self.sums = np.zeros((self.receivers, lanes), dtype=np.uint16)

    def tile(
        self, expander: _Expander, seeds0: np.ndarray, seeds1: np.ndarray, first: int, out: np.ndarray
    ) -> np.ndarray:
        """Write the corrections ``u`` of the OTs ``first, first + 1, ...`` (a tile; a whole
        frame where the expansion is fused) into ``out``.

        OT ``g`` of the pair is receiver point ``g // L``, bit ``g % L``.
        """
        if expander.fused:
            kernels.shade_sender_fused(seeds0, seeds1, expander.keys, self.correlation, first, out, self.sums)
            return out
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
        """Absorb the corrections ``u`` of the OTs ``first, first + 1, ...`` (a tile; a whole
        frame where the expansion is fused)."""
        rows = seeds.shape[0]
        if correction.shape != (rows, self.lanes) or correction.dtype != np.uint16:
            raise ProtocolError(
                f"SHADE correction has shape {correction.shape} {correction.dtype}, expected {(rows, self.lanes)} uint16"
            )
        length = self.codes.shape[1]
        if expander.fused:
            kernels.shade_receiver_fused(seeds, expander.keys, correction, self.choices, first, length, self.sums)
            return
        raw, inputs = expander.expand(seeds, 0)
        kernels.shade_receiver_rows(raw, inputs, correction, self.choices, first, length, self.sums)

    def share(self) -> np.ndarray:
        """``(n_a, n_b)`` uint16 share: ``sum_l m_c``."""
        return np.ascontiguousarray(self.sums[:, : self.senders].T)


def chunks(receivers: int, length: int) -> list[tuple[int, int, int]]:
    """``(chunk, first point, stop point)``: the IKNP chunks of a session whose receiver holds
    ``receivers`` codes of ``length`` bits (whole receiver points, about ``CHUNK_OTS`` OTs each)."""
    per_chunk = max(1, CHUNK_OTS // length)
    return [(index, start, min(start + per_chunk, receivers))
            for index, start in enumerate(range(0, receivers, per_chunk))]


def framing(senders: int) -> tuple[int, int]:
    """``(tile_rows, frame_rows)`` of a session whose sender holds ``senders`` codes: OTs per
    expansion tile (``TILE_BYTES``) and per correction frame (whole tiles, ~``FRAME_BYTES``)."""
    blocks = -(-senders // 8)
    tile_rows = min(max(TILE_BYTES // (16 * blocks), 1), 4096)
    return tile_rows, tile_rows * max(1, FRAME_BYTES // (16 * blocks * tile_rows))


def prg_bytes(count: int, senders: int) -> int:
    """AES output bytes of one chunk of ``count`` OTs against ``senders`` codes: the row PRGs
    (``3 x 128`` rows), the TCCR hashes (three, two AES calls each) and the three expansions."""
    return 3 * KAPPA * (-(-count // 64) * 8) + 6 * 16 * count + 3 * count * 16 * -(-senders // 8)


@dataclass
class SenderWorker:
    """The OT sender's means for one hop: its extension and its expansion tile buffers."""

    extension: IKNPSender
    expander: _Expander


@dataclass
class ReceiverWorker:
    """The OT receiver's means for one hop: its extension and its tile buffers (made at the
    first correction)."""

    extension: IKNPReceiver
    expander: _Expander | None = None


@dataclass
class SenderSession:
    """The OT sender's side of one SHADE session, I/O-free, one chunk at a time.

    For chunk ``c`` :meth:`seeds` takes the receiver's IKNP matrix ``U`` and gives the chunk's
    random-OT seeds, from which :meth:`frame` makes each correction frame ``shade/u``
    (:func:`framing`); :meth:`share` is its share once every chunk is done.  The transport
    hops (:mod:`securefl.crypto.shade_hops`) spread the frames over bounded exchanges.
    """

    codes: np.ndarray
    receivers: int
    extension: IKNPSender
    sender: int
    receiver: int
    correlation: np.ndarray | None = field(default=None, repr=False)
    """:attr:`ShadeSender.correlation` kept from an earlier exchange, if any."""

    def __post_init__(self) -> None:
        self.party = ShadeSender(codes=self.codes, receivers=self.receivers, correlation=self.correlation)
        self.plan = chunks(self.receivers, self.codes.shape[1])
        self.tile_rows, self.frame_rows = framing(self.codes.shape[0])

    def worker(self) -> SenderWorker:
        """The means of one hop (the setup's AES contexts, fresh tile buffers)."""
        return SenderWorker(self.extension, _Expander(blocks=self.party.blocks, rows=self.tile_rows))

    def frames(self, index: int) -> int:
        """How many correction frames chunk ``index`` has."""
        _, start, stop = self.plan[index]
        return -(-(stop - start) * self.codes.shape[1] // self.frame_rows)

    def frame_shape(self, index: int, number: int) -> tuple[int, int]:
        """``(rows, lanes)`` of correction frame ``number`` of chunk ``index`` (uint16)."""
        _, start, stop = self.plan[index]
        count = (stop - start) * self.codes.shape[1]
        return min(self.frame_rows, count - number * self.frame_rows), 8 * self.party.blocks

    def seeds(self, index: int, message: Message, worker: SenderWorker) -> tuple[np.ndarray, np.ndarray]:
        """The two random-OT seeds of every OT of chunk ``index``, given its IKNP matrix ``message``."""
        chunk, start, stop = self.plan[index]
        q = worker.extension.extend(message, chunk, (stop - start) * self.codes.shape[1])
        return worker.extension.random_ot(q, chunk)

    def frame(self, index: int, number: int, seeds: tuple[np.ndarray, np.ndarray],
              worker: SenderWorker, out: np.ndarray | None = None) -> Message:
        """Correction frame ``number`` of chunk ``index`` from the chunk's :meth:`seeds`,
        written into ``out`` (a uint16 array of :meth:`frame_shape`; ``None``: a fresh one)."""
        _, start, stop = self.plan[index]
        length = self.codes.shape[1]
        count, base = (stop - start) * length, start * length
        frame_start = number * self.frame_rows
        shape = self.frame_shape(index, number)
        if out is None:
            out = np.empty(shape, np.uint16)
        elif out.shape != shape or out.dtype != np.uint16:
            raise InputError("out", out.shape, f"must be a {shape} uint16 array")
        seeds0, seeds1 = seeds
        step = worker.expander.rows_per_call(shape[0])
        for offset in range(0, shape[0], step):
            lo, hi = frame_start + offset, min(frame_start + offset + step, count)
            self.party.tile(worker.expander, seeds0[lo:hi], seeds1[lo:hi], base + lo,
                            out=out[offset: offset + hi - lo])
        return Message(self.sender, self.receiver, "shade/u", (out,))

    def share(self) -> np.ndarray:
        """The sender's ``(n_a, n_b)`` uint16 share."""
        return self.party.share()


@dataclass
class ReceiverSession:
    """The OT receiver's side of one SHADE session, I/O-free, one chunk at a time.

    :meth:`matrix` is chunk ``c``'s IKNP matrix ``U``; :meth:`seeds` the chunk's chosen
    random-OT seeds ``H(t_j, w_j)``, computed from the setup alone: ``t = PRG(k^0)`` does not
    depend on the choices, so they are the same whenever (and however often) they are
    computed, and the transport hops (:mod:`securefl.crypto.shade_hops`) compute them when
    the chunk's corrections arrive rather than keeping them between exchanges;
    :meth:`absorb_frame` takes one correction frame into a :class:`ShadeReceiver`.
    """

    codes: np.ndarray
    extension: IKNPReceiver
    sender: int
    receiver: int

    def __post_init__(self) -> None:
        self.choices = np.ascontiguousarray(self.codes.reshape(-1))
        self.plan = chunks(self.codes.shape[0], self.codes.shape[1])

    def worker(self) -> ReceiverWorker:
        """The means of one hop (the setup's AES contexts)."""
        return ReceiverWorker(self.extension)

    def matrix(self, index: int, worker: ReceiverWorker) -> Message:
        """The IKNP matrix ``U`` of chunk ``index``."""
        chunk, start, stop = self.plan[index]
        length = self.codes.shape[1]
        choices = self.choices[start * length: stop * length]
        return worker.extension.matrix(choices, chunk, sender=self.sender, receiver=self.receiver)

    def seeds(self, index: int, worker: ReceiverWorker) -> np.ndarray:
        """The chosen random-OT seeds ``H(t_j, w_j)`` of chunk ``index``, ``t`` from the setup's
        row PRG (:meth:`~securefl.crypto.ot.IKNPReceiver.t_blocks`): the same values whenever
        they are computed."""
        chunk, start, stop = self.plan[index]
        t = worker.extension.t_blocks(chunk, (stop - start) * self.codes.shape[1])
        return worker.extension.random_ot(t, chunk)

    def absorb_frame(self, index: int, number: int, seeds: np.ndarray, message: Message,
                     party: ShadeReceiver, worker: ReceiverWorker) -> None:
        """Absorb correction frame ``number`` of chunk ``index`` (a malformed frame raises
        :class:`ProtocolError`) given the chunk's :meth:`seeds`."""
        _, start, stop = self.plan[index]
        length = self.codes.shape[1]
        count, base = (stop - start) * length, start * length
        tile_rows, frame_rows = framing(party.senders)
        blocks = -(-party.senders // 8)
        if worker.expander is None or worker.expander.blocks != blocks:
            worker.expander = _Expander(blocks=blocks, rows=tile_rows)
        frame_start = number * frame_rows
        if message.tag != "shade/u":
            raise ProtocolError(f"SHADE: expected 'shade/u', got {message.tag!r}")
        rows = min(frame_rows, count - frame_start)
        if rows <= 0 or len(message.arrays) != 1 or message.arrays[0].shape[0] != rows:
            raise ProtocolError(f"SHADE correction frame must be one array of {rows} rows")
        received = message.arrays[0]
        step = worker.expander.rows_per_call(rows)
        for offset in range(0, rows, step):
            lo, hi = frame_start + offset, min(frame_start + offset + step, count)
            party.tile(worker.expander, seeds[lo:hi], received[offset: offset + hi - lo], base + lo)
