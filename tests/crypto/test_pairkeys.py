"""Static pair keys and tags (securefl.crypto.pairkeys, Credentials.tags / check_tags): the
Edwards-to-Montgomery map agrees with X25519's own public key of the same scalar, a pair key
is shared by exactly its two clients, and a tag convinces its recipient only."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from securefl.crypto.identity import Credentials, Identity, Roster, new_federation
from securefl.crypto.pairkeys import TAG_BYTES, P, exchange_private, montgomery_public
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
    receiver.check_tags([to_receiver], senders=[0], keys=[KEY], **binding)
    bystander.check_tags([to_bystander], senders=[0], keys=[KEY], **binding)
    with pytest.raises(ProtocolError, match="does not verify"):  # shown to another recipient
        bystander.check_tags([to_receiver], senders=[0], keys=[KEY], **binding)
    changes = ({"protocol": "secagg/survivors"}, {"context": b"t" * 16}, {"cohort": b"d" * 32})
    for change in changes:
        with pytest.raises(ProtocolError, match="does not verify"):
            receiver.check_tags([to_receiver], senders=[0], keys=[KEY], **{**binding, **change})
    with pytest.raises(ProtocolError, match="does not verify"):  # another key
        receiver.check_tags([to_receiver], senders=[0], keys=[b"K" * 64], **binding)
    with pytest.raises(ProtocolError, match="does not verify"):  # another sender
        receiver.check_tags([to_receiver], senders=[2], keys=[KEY], **binding)
    # a colluding member tags under its own pair keys only: presented as the sender's, refused
    forged = colluder.tags([1], key=b"K" * 64, **binding)[0]
    with pytest.raises(ProtocolError, match="client 0's tag"):
        receiver.check_tags([forged], senders=[0], keys=[b"K" * 64], **binding)
    with pytest.raises(ProtocolError, match="carries no tag"):
        receiver.check_tags([b""], senders=[0], keys=[KEY], **binding)


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
