"""Static pair keys and tags (securefl.crypto.pairkeys, Credentials.tags / check_aggregate):
the Edwards-to-Montgomery map agrees with X25519's own public key of the same scalar, a pair
key is shared by exactly its two clients, a tag convinces its recipient only, and an
aggregate (XOR) of tags only if every listed sender tagged its statement."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from securefl.crypto.identity import Credentials, Identity, Roster, new_federation
from securefl.crypto.pairkeys import TAG_BYTES, P, aggregate, exchange_private, montgomery_public
from securefl.errors import ProtocolError

COHORT = b"c" * 32
KEY = b"k" * 64


def test_the_map_gives_x25519s_public_key_of_the_ed25519_scalar():
    # RFC 8032's test 1 secret key, then random ones: two independent computations of one point
    seeds = [bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")]
    keys = [Ed25519PrivateKey.from_private_bytes(seeds[0])] + [Ed25519PrivateKey.generate()
                                                               for _ in range(20)]
    for key in keys:
        edwards = key.public_key().public_bytes_raw()
        assert montgomery_public(edwards) == exchange_private(key).public_key().public_bytes_raw()


def test_the_map_refuses_what_is_not_a_usable_point():
    for bad in ((1).to_bytes(32, "little"), P.to_bytes(32, "little"), b"\x01" * 31):
        with pytest.raises(ProtocolError):
            montgomery_public(bad)


def test_a_pair_key_is_shared_by_its_two_clients_and_bound_to_the_roster():
    roster, credentials = new_federation("fed", 3)
    a, b, c = credentials
    assert a.pair_key(1) == b.pair_key(0) != a.pair_key(2)
    assert b.pair_key(2) == c.pair_key(1) != a.pair_key(1)
    same_people = Roster("renamed", roster.keys)  # another federation id, the same keys
    moved = Credentials(Identity(0, a.identity.private), same_people)
    assert moved.pair_key(1) != a.pair_key(1)
    with pytest.raises(ProtocolError, match="no pair key"):
        a.pair_key(0)  # itself
    with pytest.raises(ProtocolError, match="no pair key"):
        a.pair_key(7)  # a stranger


def test_a_tag_convinces_its_recipient_only_and_binds_every_field():
    _, credentials = new_federation("fed", 4)
    sender, receiver, bystander, colluder = credentials
    binding = {"protocol": "secagg/keys", "context": b"s" * 16, "cohort": COHORT}
    to_receiver, to_bystander = sender.tags([1, 2], key=KEY, **binding)
    assert len(to_receiver) == TAG_BYTES and to_receiver != to_bystander
    # the aggregate of one tag is the tag itself
    receiver.check_aggregate(to_receiver, senders=[0], keys=[KEY], **binding)
    bystander.check_aggregate(to_bystander, senders=[0], keys=[KEY], **binding)
    with pytest.raises(ProtocolError, match="does not verify"):  # shown to another recipient
        bystander.check_aggregate(to_receiver, senders=[0], keys=[KEY], **binding)
    changes = ({"protocol": "secagg/survivors"}, {"context": b"t" * 16}, {"cohort": b"d" * 32})
    for change in changes:
        with pytest.raises(ProtocolError, match="does not verify"):
            receiver.check_aggregate(to_receiver, senders=[0], keys=[KEY], **{**binding, **change})
    with pytest.raises(ProtocolError, match="does not verify"):  # another key
        receiver.check_aggregate(to_receiver, senders=[0], keys=[b"K" * 64], **binding)
    with pytest.raises(ProtocolError, match="does not verify"):  # another sender
        receiver.check_aggregate(to_receiver, senders=[2], keys=[KEY], **binding)
    # a colluding member tags under its own pair keys only: presented as the sender's, refused
    forged = colluder.tags([1], key=b"K" * 64, **binding)[0]
    with pytest.raises(ProtocolError, match=r"clients \[0\] to client 1 does not verify"):
        receiver.check_aggregate(forged, senders=[0], keys=[b"K" * 64], **binding)
    with pytest.raises(ProtocolError, match="carry no 16-byte aggregate"):
        receiver.check_aggregate(b"", senders=[0], keys=[KEY], **binding)


def _xor(*tags: bytes) -> bytes:
    return aggregate(np.stack([np.frombuffer(t, np.uint8) for t in tags])).tobytes()


def test_the_aggregate_is_the_xor_and_needs_every_listed_senders_tag():
    """Katz-Lindell aggregation: the receiver accepts the XOR of the listed senders' tags to
    it and nothing a server can make without one of them -- with a colluding member's key
    in hand, and by listing a sender twice so that its tags would cancel."""
    _, credentials = new_federation("fed", 5)
    receiver, colluder = credentials[4], credentials[3]
    binding = {"protocol": "secagg/keys", "context": b"s" * 16, "cohort": COHORT}
    keys = [bytes([65 + s]) * 64 for s in range(4)]
    tags = [credentials[s].tags([4], key=keys[s], **binding)[0] for s in range(4)]
    assert _xor(*tags) == bytes(a ^ b ^ c ^ d for a, b, c, d in zip(*tags))
    receiver.check_aggregate(_xor(*tags), senders=[0, 1, 2, 3], keys=keys, **binding)
    receiver.check_aggregate(_xor(*tags), senders=[3, 1, 0, 2], keys=[keys[s] for s in (3, 1, 0, 2)],
                             **binding)  # order does not matter
    swapped = [keys[0], b"S" * 64, keys[2], keys[3]]  # the server substitutes sender 1's key
    with pytest.raises(ProtocolError, match="does not verify"):
        receiver.check_aggregate(_xor(*tags), senders=[0, 1, 2, 3], keys=swapped, **binding)
    # the colluder (3) retags its own key at will, but sender 1's tag on the substitute is not
    # in anyone's hands: no aggregate the server can compute verifies
    retagged = colluder.tags([4], key=keys[3], **binding)[0]
    with pytest.raises(ProtocolError, match="does not verify"):
        receiver.check_aggregate(_xor(tags[0], tags[2], retagged), senders=[0, 1, 2, 3],
                                 keys=swapped, **binding)
    with pytest.raises(ProtocolError, match="does not verify"):  # one tag left out
        receiver.check_aggregate(_xor(*tags[:3]), senders=[0, 1, 2, 3], keys=keys, **binding)
    # sender 1 listed twice with the same statement: its two tags would cancel, leaving an
    # aggregate the server can compute without sender 1 -- refused before any tag is computed
    with pytest.raises(ProtocolError, match="named twice"):
        receiver.check_aggregate(_xor(tags[0]), senders=[0, 1, 1], keys=[keys[0], keys[1], keys[1]],
                                 **binding)


def test_aggregate_refuses_what_is_not_a_stack_of_tags():
    assert aggregate(np.zeros((3, 0, TAG_BYTES), np.uint8)).shape == (3, TAG_BYTES)
    for bad in (np.zeros((2, 8), np.uint8), np.zeros((2, TAG_BYTES), np.int64),
                np.zeros(TAG_BYTES, np.uint8)):
        with pytest.raises(ProtocolError, match="uint8"):
            aggregate(bad)


def test_a_warm_executor_derives_the_pair_keys_its_forked_handlers_then_find(tmp_path):
    """What a SuperNode's warm executor does before it forks a process per message: parse
    the node's credentials from its --node-config and derive every pair key; a handler
    that reads the same files gets that very object, keys included."""
    from securefl.crypto.identity import (
        IDENTITY_FILE,
        ROSTER_FILE,
        ROSTER_FILE_KEY,
        node_credentials,
        write_federation,
    )
    from securefl.fl.flower.node import warm_credentials

    write_federation(tmp_path, "fed", 4)
    files = {IDENTITY_FILE: str(tmp_path / "client-2.key"), ROSTER_FILE_KEY: str(tmp_path / ROSTER_FILE)}
    text = f'partition-id=2 {IDENTITY_FILE}="{files[IDENTITY_FILE]}" {ROSTER_FILE_KEY}="{files[ROSTER_FILE_KEY]}"'
    assert warm_credentials(text) == 3
    held = node_credentials(files, 2)
    assert sorted(held._pair_keys) == [0, 1, 3]
    assert warm_credentials("partition-id=2") == 0  # no identity configured: nothing to warm
    assert warm_credentials(f'partition-id=2 {IDENTITY_FILE}="{tmp_path}/gone.key" '
                            f'{ROSTER_FILE_KEY}="{files[ROSTER_FILE_KEY]}"') == 0
