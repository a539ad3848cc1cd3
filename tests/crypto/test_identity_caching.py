"""What the active protocol's cost cuts keep: a parsed roster key, a node's cached
credentials, batched verification, cached pair keys and the t relayed survivor-list
endorsements refuse exactly what the uncached, one-by-one checks refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from securefl.crypto.channel import SERVER, Message
from securefl.crypto.identity import (
    IDENTITY_FILE,
    ROSTER_FILE,
    ROSTER_FILE_KEY,
    Credentials,
    Identity,
    Roster,
    new_federation,
    node_credentials,
    write_federation,
)
from securefl.crypto.idsets import pack_ids, pack_subset, unpack_ids, unpack_subset
from securefl.crypto.pairkeys import TAG_BYTES, aggregate
from securefl.crypto.secagg import TAGS, SecAggClient, SecAggConfig, SecAggServer
from securefl.errors import DropoutError, InputError, ProtocolError

KEY = b"k" * 64
BINDING = {"protocol": "secagg/keys", "context": b"s" * 16}


def _sign(credentials: Credentials, cohort: bytes, key: bytes = KEY) -> bytes:
    return credentials.sign(cohort=cohort, key=key, **BINDING)


def test_a_cached_roster_key_still_refuses_a_substituted_key_or_sender():
    roster, credentials = new_federation("fed", 3)
    everyone = roster.everyone
    genuine = _sign(credentials[1], everyone)
    roster.verify(genuine, sender=1, cohort=everyone, key=KEY, **BINDING)  # client 1's key is now parsed
    impostor = Identity.generate(1)  # a key the server would put in client 1's place
    substitute = Roster("fed", {**roster.keys, 1: impostor.public})
    mallory = Credentials(impostor, substitute)
    for signature, sender in ((_sign(mallory, everyone), 1), (genuine, 2)):
        with pytest.raises(ProtocolError, match="does not verify"):
            roster.verify(signature, sender=sender, cohort=everyone, key=KEY, **BINDING)
    with pytest.raises(ProtocolError, match="does not verify"):  # the cache is per roster
        substitute.verify(genuine, sender=1, cohort=substitute.everyone, key=KEY, **BINDING)
    with pytest.raises(ProtocolError, match="not in roster"):
        roster.verify(genuine, sender=7, cohort=everyone, key=KEY, **BINDING)


def test_verify_all_checks_every_signature_not_just_the_first_t():
    roster, credentials = new_federation("fed", 4)
    everyone = roster.everyone
    signatures = [_sign(c, everyone) for c in credentials]
    roster.verify_all(signatures, senders=range(4), cohort=everyone, keys=[KEY] * 4, **BINDING)
    bad = signatures[:3] + [signatures[3][:-1] + bytes([signatures[3][-1] ^ 1])]
    with pytest.raises(ProtocolError, match="client 3's key does not verify"):
        roster.verify_all(bad, senders=range(4), cohort=everyone, keys=[KEY] * 4, **BINDING)
    with pytest.raises(ProtocolError, match="client 2 is unsigned"):
        roster.verify_all(signatures[:2] + [b""], senders=range(3), cohort=everyone, keys=[KEY] * 3, **BINDING)
    with pytest.raises(InputError, match="signatures"):
        roster.verify_all(signatures, senders=range(3), cohort=everyone, keys=[KEY] * 4, **BINDING)


def test_node_credentials_are_parsed_once_and_reread_when_a_file_changes(tmp_path):
    write_federation(tmp_path, "fed", 3)
    config = {IDENTITY_FILE: str(tmp_path / "client-0.key"), ROSTER_FILE_KEY: str(tmp_path / ROSTER_FILE)}
    first = node_credentials(config, 0)
    assert node_credentials(config, 0) is first  # same bytes: the parsed roster is reused
    genuine = Credentials(Identity.load(tmp_path / "client-1.key"), first.roster)
    signature = _sign(genuine, first.everyone)
    first.verify(signature, sender=1, cohort=first.everyone, key=KEY, **BINDING)
    mallory = Identity.generate(1)
    body = json.loads((tmp_path / ROSTER_FILE).read_text())
    body["clients"]["1"] = mallory.public.hex()
    (tmp_path / ROSTER_FILE).write_text(json.dumps(body))
    replaced = node_credentials(config, 0)
    assert replaced is not first and replaced.roster.keys[1] == mallory.public
    with pytest.raises(ProtocolError, match="does not verify"):  # the old key is not trusted any more
        replaced.verify(_sign(Credentials(genuine.identity, first.roster), replaced.everyone),
                        sender=1, cohort=replaced.everyone, key=KEY, **BINDING)
    with pytest.raises(ProtocolError, match="does not verify"):  # nor the new one by the old roster
        first.verify(_sign(Credentials(mallory, replaced.roster), first.everyone),
                     sender=1, cohort=first.everyone, key=KEY, **BINDING)


N, T, DIM = 5, 3, 8


def _endorsed_survivor_lists():
    """An honest n = 5, t = 3 run up to the consistency round: the clients and the server
    holding each client's tags on the full survivor list."""
    _, credentials = new_federation("fed", N)
    config = SecAggConfig(b"c" * 16, N, T, DIM, 64, members=tuple(range(N)), consistency=True)
    values = np.random.default_rng(0).integers(0, 2**63, (N, DIM), dtype=np.uint64)
    clients = [SecAggClient(u, config, values[u], credentials=credentials[u]) for u in range(N)]
    server = SecAggServer(config)
    for c in clients:
        server.handle(c.advertise())
    for _ in range(3):
        for message in server.close_round():
            server.handle(clients[message.receiver].handle(message))
    return clients, server


def _endorsers(message: Message) -> list[int]:
    return unpack_subset(message.arrays[0], list(range(N)), "endorsers")


def _endorsement(server: SecAggServer, endorser: int, receiver: int) -> np.ndarray:
    """``endorser``'s consistency-round tag to ``receiver`` (its tags follow U3 = 0..N-1 with
    its own place left out)."""
    return server._consistency[endorser][receiver - (receiver > endorser)]


def test_the_server_relays_the_aggregate_of_t_minus_one_other_endorsements():
    clients, server = _endorsed_survivor_lists()
    relayed = server.close_round()
    # each client is shown the t - 1 lowest endorsers other than itself: it is the t-th
    assert [_endorsers(m) for m in relayed] == [[1, 2], [0, 2], [0, 1], [0, 1], [0, 1]]
    for u, message in enumerate(relayed):  # one 16-byte XOR of their tags to it, a bitmap byte
        assert message.arrays[0].nbytes == 1 and message.arrays[1].shape == (TAG_BYTES,)
        assert np.array_equal(message.arrays[1], aggregate(np.stack(
            [_endorsement(server, e, u) for e in _endorsers(message)])))
    assert clients[0].handle(relayed[0]).tag == TAGS["unmask"]  # t - 1 others and itself suffice


def test_an_endorser_named_without_its_tag_is_refused():
    """A server that names client 3 as a third endorser for client 4 cannot produce client
    3's tag: neither leaving it out of the XOR nor putting client 1's tag to client 4 in
    its place verifies."""
    for extra in (None, 1):
        clients, server = _endorsed_survivor_lists()
        shown = server.close_round()[4].arrays[1]
        forged = shown if extra is None else shown ^ _endorsement(server, extra, 4)
        message = Message(SERVER, 4, TAGS["endorsements"], (pack_subset([0, 1, 3], range(N)), forged))
        with pytest.raises(ProtocolError, match=r"clients \[0, 1, 3\] to client 4 does not verify"):
            clients[4].handle(message)


def test_a_client_refuses_its_own_endorsement_relayed_and_counts_only_what_is_shown():
    clients, server = _endorsed_survivor_lists()
    relayed = server.close_round()
    back = Message(SERVER, 0, TAGS["endorsements"], (pack_subset([0, 1, 2], range(N)),
                                                    relayed[0].arrays[1]))
    with pytest.raises(ProtocolError, match="own survivor-list endorsement was relayed back"):
        clients[0].handle(back)
    one = Message(SERVER, 1, TAGS["endorsements"], (pack_subset([0], range(N)),
                                                   _endorsement(server, 0, 1)))
    with pytest.raises(DropoutError, match="only 2 clients"):
        clients[1].handle(one)


def test_the_endorser_bitmap_names_each_endorser_once_and_only_members_of_the_receivers_list():
    cases = ((np.array([0b11000000, 0], np.uint8), lambda tag: tag, "endorsers"),  # a byte too many
             (np.array([0b11000001], np.uint8), lambda tag: tag, "padding bit"),  # beyond U3
             (pack_subset([0, 1], range(N)), lambda tag: np.stack([tag, tag]), "aggregate"))
    for bitmap, shape, error in cases:
        clients, server = _endorsed_survivor_lists()  # a refused message ends the client's run
        tag = server.close_round()[3].arrays[1]
        with pytest.raises(ProtocolError, match=error):
            clients[3].handle(Message(SERVER, 3, TAGS["endorsements"], (bitmap, shape(tag))))


def _keys_round():
    """n = 5 clients that advertised tagged keys, and the server's keys messages."""
    _, credentials = new_federation("fed", N)
    config = SecAggConfig(b"k" * 16, N, T, DIM, 64, members=tuple(range(N)), consistency=True)
    clients = [SecAggClient(u, config, np.zeros(DIM, np.uint64), credentials=credentials[u])
               for u in range(N)]
    server = SecAggServer(config)
    advertised = [c.advertise() for c in clients]
    for message in advertised:
        server.handle(message)
    return clients, advertised, server.close_round()


def test_the_keys_message_relays_the_aggregate_of_the_peers_tags_to_the_receiver():
    clients, advertised, keys = _keys_round()
    for u, message in enumerate(keys):
        ids, _, tag = message.arrays
        # v's tags follow the member order with v's own place left out
        assert np.array_equal(tag, aggregate(np.stack([advertised[v].arrays[1][u - (u > v)]
                                                       for v in range(N) if v != u])))
    assert all(a.arrays[1].shape == (N - 1, TAG_BYTES) for a in advertised)
    assert clients[2].handle(keys[2]).tag == TAGS["shares"]
    to_2 = np.stack([advertised[v].arrays[1][2 - (2 > v)] for v in range(N) if v != 2])
    cases = ((lambda tag, other: other, "does not verify"),  # the aggregate to another receiver
             (lambda tag, other: aggregate(to_2[1:]), "does not verify"),  # one peer's tag left out
             (lambda tag, other: to_2, r"one \(16,\) uint8 aggregate"))  # the tags, not their XOR
    for forge, error in cases:
        clients, advertised, keys = _keys_round()  # a refused message ends the client's run
        ids, listed, tag = keys[2].arrays
        forged = (ids, listed, forge(tag, keys[3].arrays[2]))
        with pytest.raises(ProtocolError, match=error):
            clients[2].handle(Message(SERVER, 2, TAGS["keys"], forged))


def test_pack_ids_takes_the_shorter_encoding_and_round_trips():
    for ids in ([0, 1, 2, 3, 4], list(range(500)), [3, 1, 2], [7, 2**40], [5, 10**6]):
        packed = pack_ids(ids)
        assert unpack_ids(packed, "ids") == ids
        assert packed.nbytes <= 4 * len(ids) or packed.dtype == np.int64
    assert pack_ids(list(range(500))).nbytes == 63 and pack_ids([5, 10**6]).dtype == np.int32
    with pytest.raises(ProtocolError, match="distinct"):
        unpack_ids(np.array([1, 1], np.int32), "ids")


def test_a_client_checks_each_peer_tag_it_is_shown_once_and_derives_each_pair_key_once(monkeypatch):
    checked: list[list[int]] = []
    original = Credentials.check_aggregate

    def counting(self, tag, **kwargs):
        checked.append([int(s) for s in kwargs["senders"]])
        return original(self, tag, **kwargs)

    monkeypatch.setattr(Credentials, "check_aggregate", counting)
    clients, server = _endorsed_survivor_lists()
    assert checked[:N] == [[v for v in range(N) if v != u] for u in range(N)]  # keys: every peer
    checked.clear()
    for message in server.close_round():
        clients[message.receiver].handle(message)
    assert checked == [[v for v in range(T) if v != u][:T - 1] for u in range(N)]  # t - 1, never itself
    credentials = clients[0].credentials
    assert sorted(credentials._pair_keys) == [1, 2, 3, 4]  # derived once per peer, then kept
    assert credentials.pair_key(1) is credentials.pair_key(1)
