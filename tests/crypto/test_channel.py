"""Metered authenticated channel: round trips, byte counts, and every tampering -> ProtocolError."""

import copy

import numpy as np
import pytest

from securefl.crypto.channel import SERVER, Frame, Message, Network
from securefl.errors import InputError, ProtocolError


def sample_message(tag="round1", sender=0, receiver=1):
    return Message(sender, receiver, tag, (np.arange(6, dtype=np.int64).reshape(2, 3), np.ones(4, np.uint16)))


def test_round_trip_preserves_arrays_and_counts_bytes():
    network = Network()
    sent = sample_message()
    size = network.send(sent)
    got = network.receive(1, 0, "round1")
    assert got.tag == "round1" and (got.sender, got.receiver) == (0, 1)
    for a, b in zip(sent.arrays, got.arrays):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert size > 48 + 8 and network.bytes_sent() == {0: size, 1: 0}
    assert network.stats[1].bytes_received == size and network.bytes_total() == size


def test_server_party_and_empty_message():
    network = Network()
    got = network.deliver(Message(2, SERVER, "empty"))
    assert got.arrays == () and network.stats[SERVER].messages_received == 1


def test_wire_bytes_round_trip_through_from_bytes():
    network = Network()
    network.send(sample_message())
    queue = network.queue(0, 1)
    wire = bytes(queue.popleft())
    queue.append(Frame.from_bytes(wire))
    np.testing.assert_array_equal(network.receive(1, 0, "round1").arrays[0], np.arange(6).reshape(2, 3))


def _sent(network=None):
    network = network or Network()
    network.send(sample_message())
    return network, network.queue(0, 1)


def _flip(buffer: bytes, index: int) -> bytes:
    data = bytearray(buffer)
    data[index] ^= 1
    return bytes(data)


@pytest.mark.parametrize("where", ["header", "body", "mac"])
def test_tampered_frame_is_rejected(where):
    network, queue = _sent()
    frame = queue[0]
    if where == "header":
        frame.header = _flip(frame.header, len(frame.header) - 1)
    elif where == "body":
        frame.body = [memoryview(_flip(bytes(frame.body[0]), 3))] + frame.body[1:]
    else:
        frame.mac = _flip(frame.mac, 0)
    with pytest.raises(ProtocolError):
        network.receive(1, 0, "round1")


def test_truncated_frame_is_rejected():
    network, queue = _sent()
    wire = bytes(queue.popleft())
    for cut in (3, 20, len(wire) - 17, len(wire) - 1):
        with pytest.raises(ProtocolError):
            queue.appendleft(Frame.from_bytes(wire[:cut]))
            network.receive(1, 0, "round1")
        queue.clear()


def test_truncated_body_is_rejected():
    network, queue = _sent()
    queue[0].body = [queue[0].body[0][:-1]] + queue[0].body[1:]
    with pytest.raises(ProtocolError, match="body"):
        network.receive(1, 0, "round1")


def test_replayed_frame_is_rejected():
    network, queue = _sent()
    replay = copy.copy(queue[0])
    network.receive(1, 0, "round1")
    queue.append(replay)
    with pytest.raises(ProtocolError, match="replayed"):
        network.receive(1, 0, "round1")


def test_reordered_frames_are_rejected():
    network = Network()
    network.send(sample_message("a"))
    network.send(sample_message("b"))
    queue = network.queue(0, 1)
    queue.rotate(1)
    with pytest.raises(ProtocolError, match="out-of-order"):
        network.receive(1, 0, "b")


def test_wrong_round_tag_is_rejected():
    network, _ = _sent()
    with pytest.raises(ProtocolError, match="round"):
        network.receive(1, 0, "round2")


def test_misaddressed_frame_is_rejected():
    network, queue = _sent()
    network.queue(0, 2).append(queue.popleft())
    with pytest.raises(ProtocolError, match="addressed"):
        network.receive(2, 0, "round1")


def test_frame_from_another_session_is_rejected():
    other, queue = _sent()
    network = Network()
    network.queue(0, 1).append(queue.popleft())
    with pytest.raises(ProtocolError):
        network.receive(1, 0, "round1")


def test_forged_frame_with_wrong_key_is_rejected():
    attacker = Network(session=b"12345678")
    victim = Network(session=b"12345678")
    attacker.send(sample_message())
    victim.queue(0, 1).append(attacker.queue(0, 1).popleft())
    with pytest.raises(ProtocolError, match="MAC"):
        victim.receive(1, 0, "round1")


def test_missing_frame_is_rejected():
    with pytest.raises(ProtocolError, match="no message"):
        Network().receive(1, 0, "round1")


def test_bad_session_length():
    with pytest.raises(InputError, match="session"):
        Network(session=b"short")
