"""What the active protocol's cost cuts keep: a parsed roster key, a node's cached
credentials, batched verification and the t relayed survivor-list signatures refuse
exactly what the uncached, one-by-one checks refused."""

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


def _signed_survivor_lists():
    """An honest n = 5, t = 3 run up to the consistency round: the clients, the server and
    each client's signature on the full survivor list."""
    roster, credentials = new_federation("fed", N)
    config = SecAggConfig(b"c" * 16, N, T, DIM, 64, cohort=roster.everyone, consistency=True)
    values = np.random.default_rng(0).integers(0, 2**63, (N, DIM), dtype=np.uint64)
    clients = [SecAggClient(u, config, values[u], credentials=credentials[u]) for u in range(N)]
    server = SecAggServer(config, tuple(range(N)))
    for c in clients:
        server.handle(c.advertise())
    for _ in range(3):
        for message in server.close_round():
            server.handle(clients[message.receiver].handle(message))
    return clients, server


def test_the_server_relays_t_survivor_signatures_and_a_bad_extra_one_is_refused():
    clients, server = _signed_survivor_lists()
    relayed = server.close_round()
    assert len(relayed) == N and all(m.arrays[0].tolist() == list(range(T)) for m in relayed)
    assert clients[0].handle(relayed[0]).tag == TAGS["unmask"]  # t signatures suffice
    signatures = relayed[0].arrays[1]
    forged = signatures[1].copy()  # client 1's signature, presented as client 3's
    extra = Message(SERVER, 4, TAGS["signatures"], (np.arange(T + 1, dtype=np.int32),
                                                   np.vstack([signatures[:T], forged[None]])))
    with pytest.raises(ProtocolError, match="client 3's key does not verify"):  # index 3's, forged
        clients[4].handle(extra)


def test_a_client_refuses_its_own_survivor_signature_altered_and_counts_only_what_is_shown():
    clients, server = _signed_survivor_lists()
    ids, signatures = server.close_round()[0].arrays
    altered = signatures.copy()
    altered[0, 5] ^= 1  # client 0's own signature
    with pytest.raises(ProtocolError, match="own survivor-list signature"):
        clients[0].handle(Message(SERVER, 0, TAGS["signatures"], (ids, altered)))
    with pytest.raises(DropoutError, match="only 2 clients signed"):
        clients[1].handle(Message(SERVER, 1, TAGS["signatures"], (ids[:2], signatures[:2])))


def test_a_client_verifies_each_peer_signature_it_is_shown_once_and_parses_each_key_once(monkeypatch):
    verified: list[list[int]] = []
    original = Roster.verify_all

    def counting(self, signatures, **kwargs):
        verified.append([int(s) for s in kwargs["senders"]])
        return original(self, signatures, **kwargs)

    monkeypatch.setattr(Roster, "verify_all", counting)
    clients, server = _signed_survivor_lists()
    assert verified[:N] == [[v for v in range(N) if v != u] for u in range(N)]  # keys: every peer
    verified.clear()
    for message in server.close_round():
        clients[message.receiver].handle(message)
    assert verified == [[v for v in range(T) if v != u] for u in range(N)]  # the t shown, not itself
    roster = clients[0].credentials.roster
    assert roster._verifier(1, "p") is roster._verifier(1, "p")
