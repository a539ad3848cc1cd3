"""SHADE cut into hops (securefl.crypto.shade_hops): the shares' sum, the frames the cost model
counts, setups kept across rounds, and a refusal of out-of-place messages."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto import shade, shade_hops
from securefl.crypto.channel import Message, frame_size
from securefl.crypto.ot import RESUME, ReceiverSetup, setup_context
from securefl.crypto.rand import RandomSource
from securefl.errors import ProtocolError

CONTEXT = setup_context(b"federation", 7, 9)


class Party:
    """One party's setup across rounds (what a client keeps in its state)."""

    def __init__(self):
        self.setup = None


def _hops(x, y, s_party=None, r_party=None, sender=0, receiver=1, chunk_bytes=shade_hops.DEFAULT_CHUNK_BYTES):
    """The pair's hops; with ``chunk_bytes`` small, the pipelined stream of several exchanges."""
    messages, s_share, r_share, _ = _pipeline(x, y, s_party, r_party, sender, receiver, chunk_bytes)
    return messages, s_share, r_share


def _pipeline(x, y, s_party, r_party, sender, receiver, chunk_bytes):
    s_party, r_party = s_party or Party(), r_party or Party()
    s_state, r_state = {}, {}
    a = shade_hops.receiver_base(r_state, setup=r_party.setup, context=CONTEXT, sender=sender,
                                 receiver=receiver, rng=RandomSource())
    b, s_party.setup = shade_hops.sender_base(s_state, a, setup=s_party.setup, context=CONTEXT,
                                              rng=RandomSource())
    u, r_party.setup = shade_hops.receiver_extend(r_state, b, y, setup=r_party.setup, context=CONTEXT,
                                                  sender=sender, receiver=receiver, senders=x.shape[0],
                                                  chunk_bytes=chunk_bytes)
    messages, to_sender, to_receiver = [a, b, *u], u, []
    s_share = r_share = None
    exchanges = 0
    while r_share is None:  # one exchange: both sides act on what the last one carried
        exchanges += 1
        frames, share = shade_hops.sender_stream(s_state, lambda m=to_sender: m, x, setup=s_party.setup,
                                                 receivers=y.shape[0], sender=sender, receiver=receiver,
                                                 chunk_bytes=chunk_bytes)
        s_share = share if share is not None else s_share
        u, r_share = shade_hops.receiver_stream(r_state, lambda m=to_receiver: m, y, setup=r_party.setup,
                                                senders=x.shape[0], sender=sender, receiver=receiver)
        messages += [*frames, *u]
        to_sender, to_receiver = u, frames
    return messages, s_share, r_share, exchanges


def _codes(seed, na, nb, length):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 2, (na, length)).astype(np.uint8), rng.integers(0, 2, (nb, length)).astype(np.uint8))


@pytest.mark.parametrize("na, nb, length", [(13, 9, 200), (3, 700, 100)])
def test_hops_give_the_distances_with_the_frames_of_the_cost_model(na, nb, length):
    """One correction of 2 x lanes bytes per OT (lanes = n_a rounded up to 8), cut into the
    frames of ``framing``, and one IKNP matrix per chunk."""
    x, y = _codes(na, na, nb, length)
    messages, s_share, r_share = _hops(x, y)
    distances = (x[:, None, :] != y[None, :, :]).sum(-1)
    np.testing.assert_array_equal((s_share + r_share).astype(np.int64), distances)
    corrections = [m.arrays[0] for m in messages if m.tag == "shade/u"]
    assert sum(u.nbytes for u in corrections) == nb * length * 2 * 8 * -(-na // 8)
    frame_rows = shade_hops.framing(na)[1]
    assert len(corrections) == sum(-(-(stop - start) * length // frame_rows)
                                   for _, start, stop in shade_hops.chunks(nb, length))
    assert len([m for m in messages if m.tag.startswith("iknp/U/")]) == len(shade_hops.chunks(nb, length))


def test_later_rounds_resume_the_setup_and_stay_exact():
    """Round 1 runs the base OTs; rounds 2 and 3 resume (no base-OT points) with new codes."""
    s_party, r_party = Party(), Party()
    for round_index in range(3):
        x, y = _codes(round_index, 11, 6, 130)
        messages, s_share, r_share = _hops(x, y, s_party, r_party)
        distances = (x[:, None, :] != y[None, :, :]).sum(-1)
        np.testing.assert_array_equal((s_share + r_share).astype(np.int64), distances)
        assert messages[1].tag == ("baseot/B" if round_index == 0 else RESUME)
        assert [m.tag for m in messages if m.tag.startswith("iknp/U/")] == [f"iknp/U/{round_index}/0"]
    assert s_party.setup.next_session == r_party.setup.next_session == 3


def test_a_party_that_lost_its_setup_falls_back_to_fresh_base_ots():
    s_party, r_party = Party(), Party()
    x, y = _codes(1, 4, 5, 64)
    _hops(x, y, s_party, r_party)
    r_party.setup = None
    messages, s_share, r_share = _hops(x, y, s_party, r_party)
    assert messages[1].tag == "baseot/B"
    np.testing.assert_array_equal((s_share + r_share).astype(np.int64), (x[:, None] != y[None]).sum(-1))
    assert s_party.setup.setup_id == r_party.setup.setup_id and s_party.setup.next_session == 1


def test_a_replayed_hello_is_refused_by_the_sender():
    s_party, r_party = Party(), Party()
    x, y = _codes(2, 4, 5, 64)
    _hops(x, y, s_party, r_party)
    hello = shade_hops.receiver_base({}, setup=r_party.setup, context=CONTEXT, sender=0, receiver=1,
                                     rng=RandomSource())
    shade_hops.sender_base({}, hello, setup=s_party.setup, context=CONTEXT, rng=RandomSource())
    with pytest.raises(ProtocolError, match="session 1 replayed or out of order"):
        shade_hops.sender_base({}, hello, setup=s_party.setup, context=CONTEXT, rng=RandomSource())


def test_matrices_of_another_session_are_refused():
    """The sender accepted session 1; U matrices the receiver made for session 2 do not pass."""
    s_party, r_party = Party(), Party()
    x, y = _codes(3, 4, 5, 64)
    _hops(x, y, s_party, r_party)
    s_state, r_state = {}, {}
    hello = shade_hops.receiver_base(r_state, setup=r_party.setup, context=CONTEXT, sender=0, receiver=1,
                                     rng=RandomSource())
    answer, _ = shade_hops.sender_base(s_state, hello, setup=s_party.setup, context=CONTEXT, rng=RandomSource())
    r_party.setup.next_session += 1  # a receiver whose counter ran ahead of its hello
    stale = r_party.setup.extension(2)
    wrong, _ = stale.extend(y.reshape(-1), 0, sender=0, receiver=1)
    shade_hops.receiver_extend(r_state, answer, y, setup=r_party.setup, context=CONTEXT, sender=0,
                               receiver=1, senders=3, chunk_bytes=1 << 20)
    with pytest.raises(ProtocolError, match="iknp/U/1/0"):
        shade_hops.sender_stream(s_state, lambda: [wrong], x, setup=s_party.setup, receivers=5, sender=0,
                                 receiver=1, chunk_bytes=1 << 20)


def test_out_of_place_messages_are_refused():
    x, y = _codes(1, 4, 5, 64)
    s_party, r_party = Party(), Party()
    s_state, r_state = {}, {}
    a = shade_hops.receiver_base(r_state, setup=None, context=CONTEXT, sender=0, receiver=1, rng=RandomSource())
    extend = {"setup": None, "context": CONTEXT, "sender": 0, "receiver": 1, "senders": 4, "chunk_bytes": 1 << 20}
    with pytest.raises(ProtocolError, match="iknp/resume.*baseot/B"):
        shade_hops.receiver_extend(r_state, a, y, **extend)
    with pytest.raises(ProtocolError, match="before the hello"):
        shade_hops.receiver_extend({}, a, y, **extend)
    b, s_party.setup = shade_hops.sender_base(s_state, a, setup=None, context=CONTEXT, rng=RandomSource())
    u, r_party.setup = shade_hops.receiver_extend(r_state, b, y, **extend)
    stream = {"receivers": 5, "sender": 0, "receiver": 1, "chunk_bytes": 1 << 20}
    with pytest.raises(ProtocolError, match="IKNP matrices"):
        shade_hops.sender_stream(dict(s_state), lambda: [*u, *u], x, setup=s_party.setup, **stream)
    with pytest.raises(ProtocolError, match="not the one this session was opened on"):
        shade_hops.sender_stream(dict(s_state), lambda: u, x, setup=None, **stream)
    corrections, _ = shade_hops.sender_stream(s_state, lambda: u, x, setup=s_party.setup, **stream)
    finish = {"setup": r_party.setup, "senders": 4, "sender": 0, "receiver": 1}
    assert shade_hops.receiver_stream(r_state, list, y, **finish) == ([], None)  # exchange 0: nothing due
    extra = Message(0, 1, "shade/u", (corrections[0].arrays[0],))
    with pytest.raises(ProtocolError, match="correction frames, expected"):
        shade_hops.receiver_stream(dict(r_state), lambda: [*corrections, extra], y, **finish)
    with pytest.raises(ProtocolError, match="correction frames, expected"):
        shade_hops.receiver_stream(dict(r_state), list, y, **finish)


def test_a_resume_naming_another_setup_or_session_is_refused():
    s_party, r_party = Party(), Party()
    x, y = _codes(4, 4, 5, 64)
    _hops(x, y, s_party, r_party)
    r_state = {}
    hello = shade_hops.receiver_base(r_state, setup=r_party.setup, context=CONTEXT, sender=0, receiver=1,
                                     rng=RandomSource())
    answer, _ = shade_hops.sender_base({}, hello, setup=s_party.setup, context=CONTEXT, rng=RandomSource())
    other_id = Message(answer.sender, answer.receiver, RESUME, (np.zeros(16, np.uint8) + 1, answer.arrays[1]))
    with pytest.raises(ProtocolError, match="not offered"):
        shade_hops.receiver_extend(dict(r_state), other_id, y, setup=r_party.setup, context=CONTEXT,
                                   sender=0, receiver=1, senders=4, chunk_bytes=1 << 20)
    other_session = Message(answer.sender, answer.receiver, RESUME,
                            (answer.arrays[0], np.array([7], np.uint64)))
    with pytest.raises(ProtocolError, match="names session 7"):
        shade_hops.receiver_extend(dict(r_state), other_session, y, setup=r_party.setup, context=CONTEXT,
                                   sender=0, receiver=1, senders=4, chunk_bytes=1 << 20)


def test_a_small_chunk_bytes_streams_the_same_shares_in_bounded_messages():
    """(3 x 40 codes, L = 4096: three IKNP chunks.)  At chunk_bytes of one chunk's frames the
    pair runs three exchanges of corrections (four stream exchanges against two); the distances and the
    frames' sizes are those of one exchange, and no exchange's corrections exceed chunk_bytes."""
    x, y = _codes(11, 3, 40, 4096)
    one, s_one, r_one, exchanges_one = _pipeline(x, y, None, None, 0, 1, shade_hops.DEFAULT_CHUNK_BYTES)
    per_chunk = 16 * 4096 * 16  # 16 receiver points x L OTs x (2 bytes x 8 lanes)
    plan = shade_hops.schedule(3, 40, 4096, per_chunk)
    assert [len(e) for e in plan] == [1, 1, 1]
    many, s_many, r_many, exchanges_many = _pipeline(x, y, None, None, 0, 1, per_chunk)
    assert (exchanges_one, exchanges_many) == (2, 4)
    distances = (x[:, None, :] != y[None, :, :]).sum(-1)
    for s_share, r_share in ((s_one, r_one), (s_many, r_many)):  # fresh base OTs: the shares differ
        np.testing.assert_array_equal((s_share + r_share).astype(np.int64), distances)
    assert sorted(frame_size(m) for m in one) == sorted(frame_size(m) for m in many)
    assert [m.arrays[0].nbytes for m in many if m.tag == "shade/u"] == [per_chunk, per_chunk, 8 * 4096 * 16]


def _extended(y, per_chunk):
    """A fresh pair's base OTs and the receiver's first IKNP hop at ``per_chunk``: the
    sender's setup and state and the receiver's matrices ``u``."""
    s_party, r_party, s_state, r_state = Party(), Party(), {}, {}
    a = shade_hops.receiver_base(r_state, setup=None, context=CONTEXT, sender=0, receiver=1, rng=RandomSource())
    b, s_party.setup = shade_hops.sender_base(s_state, a, setup=None, context=CONTEXT, rng=RandomSource())
    u, r_party.setup = shade_hops.receiver_extend(r_state, b, y, setup=None, context=CONTEXT, sender=0,
                                                  receiver=1, senders=3, chunk_bytes=per_chunk)
    return s_party.setup, s_state, u


def test_a_stream_refuses_a_changed_chunk_bytes_and_a_missing_batch():
    x, y = _codes(12, 3, 40, 4096)
    per_chunk = 16 * 4096 * 16
    setup, s_state, u = _extended(y, per_chunk)
    stream = {"setup": setup, "receivers": 40, "sender": 0, "receiver": 1, "chunk_bytes": per_chunk}
    shade_hops.sender_stream(s_state, lambda: u, x, **stream)
    with pytest.raises(ProtocolError, match="chunk_bytes"):
        shade_hops.sender_stream(dict(s_state), lambda: u, x, **{**stream, "chunk_bytes": 2 * per_chunk})
    with pytest.raises(ProtocolError, match="IKNP matrices"):  # chunk 1's U never came
        shade_hops.sender_stream(dict(s_state), list, x, **stream)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "64"])
def test_chunk_bytes_must_be_a_positive_int(bad):
    from securefl.errors import InputError
    with pytest.raises(InputError, match="chunk_bytes"):
        shade_hops.check_chunk_bytes(bad)


def test_sides_told_different_chunk_bytes_stop_with_a_protocol_error():
    """The relay tells the receiver one chunk's frames and the sender two: the sender's own
    schedule wants two matrices where one came."""
    x, y = _codes(13, 3, 40, 4096)
    per_chunk = 16 * 4096 * 16
    setup, s_state, u = _extended(y, per_chunk)
    with pytest.raises(ProtocolError, match="1 IKNP matrices, expected 2"):
        shade_hops.sender_stream(s_state, lambda: u, x, setup=setup, receivers=40, sender=0,
                                 receiver=1, chunk_bytes=2 * per_chunk)


def _cold(state, setup):
    """What a freshly forked process gets back: copies of the state's arrays and of the setup's."""
    arrays = {key: np.array(value, copy=True) for key, value in setup.to_arrays().items()}
    return {key: np.array(value, copy=True) for key, value in state.items()}, ReceiverSetup.from_arrays(arrays)


def test_the_receiver_keeps_no_seeds_and_a_cold_receiver_answers_byte_for_byte():
    """(3 x 40 codes, L = 4096, chunk_bytes one chunk's frames: a chunk's ``U`` crosses an
    exchange before its frames.)  After hop 3 and between stream exchanges the receiver's
    state is its setup id, session, cursor and sums, no seeds; a receiver rebuilt from that
    state and its setup's arrays at every exchange sends the same bytes and the same share."""
    x, y = _codes(14, 3, 40, 4096)
    per_chunk = 16 * 4096 * 16
    s_party, r_party, s_state, r_state = Party(), Party(), {}, {}
    a = shade_hops.receiver_base(r_state, setup=None, context=CONTEXT, sender=0, receiver=1, rng=RandomSource())
    b, s_party.setup = shade_hops.sender_base(s_state, a, setup=None, context=CONTEXT, rng=RandomSource())
    to_sender, r_party.setup = shade_hops.receiver_extend(r_state, b, y, setup=None, context=CONTEXT, sender=0,
                                                          receiver=1, senders=3, chunk_bytes=per_chunk)
    kept = {"setup", "session", "cursor", "sums"}
    assert set(r_state) == kept and r_state["sums"].nbytes == 40 * 8 * 2  # n_b x lanes uint16
    to_receiver, s_share, r_share, cold_share = [], None, None, None
    finish = {"senders": 3, "sender": 0, "receiver": 1}
    while r_share is None:
        frames, share = shade_hops.sender_stream(s_state, lambda m=to_sender: m, x, setup=s_party.setup,
                                                 receivers=40, sender=0, receiver=1, chunk_bytes=per_chunk)
        s_share = share if share is not None else s_share
        cold_state, cold_setup = _cold(r_state, r_party.setup)
        cold_u, cold_share = shade_hops.receiver_stream(cold_state, lambda m=to_receiver: m, y,
                                                        setup=cold_setup, **finish)
        to_sender, r_share = shade_hops.receiver_stream(r_state, lambda m=to_receiver: m, y,
                                                        setup=r_party.setup, **finish)
        assert set(r_state) in (kept, {"done"}) and set(cold_state) == set(r_state)
        assert [m.tag for m in cold_u] == [m.tag for m in to_sender]
        assert all(c.arrays[0].tobytes() == w.arrays[0].tobytes() for c, w in zip(cold_u, to_sender))
        to_receiver = frames
    assert cold_share.tobytes() == r_share.tobytes()
    np.testing.assert_array_equal((s_share + r_share).astype(np.int64), (x[:, None] != y[None]).sum(-1))


def test_the_sender_builds_its_correlation_once_per_pair_and_refuses_a_wrong_one(monkeypatch):
    """Over a stream of several exchanges the sender builds ``Delta`` from its codes at the
    first and reads it from its state at the others (the shares stay exact); a kept
    correlation of the wrong shape is refused, not used."""
    builds = []
    original = shade.ShadeSender.__post_init__

    def counting(self):
        builds.append(self.correlation is None)
        original(self)

    monkeypatch.setattr(shade.ShadeSender, "__post_init__", counting)
    x, y = _codes(12, 3, 40, 4096)
    _, s_share, r_share, exchanges = _pipeline(x, y, None, None, 0, 1, 16 * 4096 * 16)
    assert exchanges == 4 and builds == [True, False, False]  # three sender exchanges, one build
    np.testing.assert_array_equal((s_share + r_share).astype(np.int64), (x[:, None, :] != y[None, :, :]).sum(-1))
    monkeypatch.setattr(shade.ShadeSender, "__post_init__", original)
    with pytest.raises(ProtocolError, match="correlation"):
        shade.ShadeSender(codes=x, receivers=40, correlation=np.zeros((4096, 16), np.uint16))
    built = shade.ShadeSender(codes=x, receivers=40).correlation
    np.testing.assert_array_equal(built[:, :3], (1 - 2 * x.T.astype(np.int64)) % (1 << 16))
    assert not built[:, 3:].any()
