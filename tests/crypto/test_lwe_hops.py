"""The LWE session cut into hops (securefl.crypto.lwe_hops): the matrix and the nominal
bytes of secure_hamming_matrix(..., backend="lwe"), and a relay's tampering refused."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto import lwe_hops, secure_hamming_matrix
from securefl.crypto.channel import SERVER, Message, frame_size
from securefl.crypto.hamming import own_block
from securefl.crypto.hamming_plain import hamming_matrix, pack_codes
from securefl.crypto.rand import RandomSource
from securefl.errors import InputError, ProtocolError

SESSION = b"lwe-hops"


def _run(codes, tamper=None, ring=False):
    """Every hop of every party, the server relaying; returns (matrix blocks, all messages)."""
    parties = list(range(len(codes)))
    sizes = {j: c.shape[0] for j, c in enumerate(codes)}
    states = {j: {} for j in parties}
    moved: list[Message] = []
    keys = [lwe_hops.start(states[j], index=j, codes=codes[j], session=SESSION, rng=RandomSource())
            for j in parties]
    moved += keys
    inbox = {j: [] for j in parties}
    for key in keys:
        for forward in lwe_hops.relay(parties, key):
            moved.append(forward)
            inbox[forward.receiver].append(forward)
    broadcasts = {j: lwe_hops.broadcast(states[j], inbox[j], index=j, codes=codes[j], sizes=sizes,
                                        session=SESSION, ring=ring) for j in parties}
    c_in = {j: [] for j in parties}
    h_in = {j: [] for j in parties}
    for j in parties:
        moved += broadcasts[j]
        for message in broadcasts[j]:
            for forward in lwe_hops.relay(parties, message):
                moved.append(forward)
                (c_in if "/C/" in forward.tag else h_in)[forward.receiver].append(forward)
    if tamper is not None:
        tamper(c_in, h_in)
    shares, answers = [], {j: [] for j in parties}
    for j in parties:
        sent, own = lwe_hops.evaluate(states[j], c_in[j], index=j, codes=codes[j], sizes=sizes,
                                      alive=parties, session=SESSION, ring=ring)
        for message in sent:
            moved.append(message)
            answers[message.receiver].append(message)
        shares += lwe_hops.share_messages(j, own)
    for j in parties:
        own = lwe_hops.finish(states[j], h_in[j], answers[j], index=j, codes=codes[j], sizes=sizes,
                              alive=parties, session=SESSION, ring=ring)
        shares += lwe_hops.share_messages(j, own)
    moved += shares
    moved += [Message(j, SERVER, f"lwe/own/{j}", (own_block(codes[j]),)) for j in parties]
    return shares, moved


def _codes(sizes, length, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2, (n, length)).astype(np.uint8) for n in sizes]


@pytest.mark.parametrize("backend", ["lwe", "rlwe"])
def test_hops_give_the_matrix_and_the_bytes_of_the_one_loop_session(backend):
    codes = _codes((5, 3, 4), 64)
    shares, moved = _run(codes, ring=backend == "rlwe")
    offsets = np.cumsum([0, *[c.shape[0] for c in codes]])
    matrix = np.zeros((offsets[-1],) * 2, dtype=np.int64)
    for message in shares:
        a, b = map(int, message.tag.rsplit("/", 1)[1].split("-"))
        matrix[offsets[a]:offsets[a + 1], offsets[b]:offsets[b + 1]] += message.arrays[0]
    matrix %= 1 << 16
    upper = np.triu(np.ones_like(matrix, dtype=bool), 1)
    for j in range(len(codes)):
        upper[offsets[j]:offsets[j + 1], offsets[j]:offsets[j + 1]] = False
    reference = secure_hamming_matrix(codes, backend=backend)
    np.testing.assert_array_equal(matrix[upper], reference.matrix[upper])
    np.testing.assert_array_equal(reference.matrix, hamming_matrix(pack_codes(np.concatenate(codes))))
    assert len(shares) == 2 * 3
    assert sum(frame_size(m) for m in moved) == reference.bytes_total


def _alter(c_in, h_in):
    block = c_in[1][0]
    arrays = [a.copy() for a in block.arrays]
    arrays[0][0, 0] ^= 1
    c_in[1][0] = Message(block.sender, block.receiver, block.tag, tuple(arrays))


def _replay(c_in, h_in):
    c_in[1].append(c_in[1][0])


def _misroute(c_in, h_in):
    # party 0 encrypts for 2 (pair_roles(0, 2)), not for 1: its block for 2 handed to 1
    block = next(m for m in c_in[2] if m.tag.startswith("lwe/C/0/"))
    c_in[1] = [Message(block.sender, 1, block.tag, block.arrays)] + [
        m for m in c_in[1] if not m.tag.startswith("lwe/C/0/")]


def _alter_hint(c_in, h_in):
    hint = h_in[0][0]
    arrays = [a.copy() for a in hint.arrays]
    arrays[1][0, 0] ^= 1
    h_in[0][0] = Message(hint.sender, hint.receiver, hint.tag, tuple(arrays))


@pytest.mark.parametrize("tamper, match", [(_alter, "does not verify"), (_replay, "block 0"),
                                           (_misroute, "unexpected or repeated"),
                                           (_alter_hint, "does not verify")])
def test_a_relay_altering_replaying_or_misrouting_a_broadcast_is_caught(tamper, match):
    with pytest.raises(ProtocolError, match=match):
        _run(_codes((2, 3, 2), 32, seed=1), tamper=tamper)


def test_a_session_above_the_statistical_bound_is_refused_before_any_work():
    codes = _codes((2,), 64)[0]
    state = {}
    lwe_hops.start(state, index=0, codes=codes, session=SESSION, rng=RandomSource())
    with pytest.raises(InputError, match="statistical bound"):
        lwe_hops.broadcast(state, [], index=0, codes=codes, sizes={0: 2, 1: 1 << 29}, session=SESSION)
