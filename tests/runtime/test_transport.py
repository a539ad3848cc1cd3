"""The transport layer in process: records, request sequencing, end-to-end client links,
secure aggregation as exchanges (several sums at once, bytes as the in-process protocol
meters them), party state round trips, client-state checkpoints.

The same halves run on Flower in ``tests/deploy``; here every property is checked in
milliseconds, including the attacks of a modified server.
"""

from __future__ import annotations

import secrets
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.crypto.channel import Frame, Message, frame_key, frame_mac
from securefl.crypto.fixed_point import ring_sum
from securefl.crypto.identity import new_federation
from securefl.crypto.secagg import ROUNDS, TAGS, SecAggClient, SecAggConfig, SecAggServer
from securefl.errors import DropoutError, InputError, ProtocolError
from securefl.fl.rng import client_generator
from securefl.runtime import links, secure_sum_steps, state_codec
from securefl.runtime.linkcheck import LinkCheckClient, LinkCheckServer
from securefl.runtime.summation import secure_sum
from securefl.runtime.transport import (
    CONFIG_VALUE_LIMIT,
    ClientHalf,
    InProcessTransport,
    NodeContext,
    Record,
    put_message,
    serve,
    take_message,
)

from .tampering import TamperingLinkCheck, expected_failures, reorder


def nodes(count: int, run_config: dict | None = None) -> list[NodeContext]:
    run = run_config or {}
    return [NodeContext(i, {"partition-id": i, "num-partitions": count}, run) for i in range(count)]


# ----------------------------------------------------------------------------- records


def test_config_refuses_bulk_bytes_and_objects():
    Record(config={"key": b"x" * CONFIG_VALUE_LIMIT}).check()
    with pytest.raises(InputError, match="must travel as an array"):
        Record(config={"frame": b"x" * (CONFIG_VALUE_LIMIT + 1)}).check()
    with pytest.raises(InputError, match="plain dtype"):
        Record(arrays={"a": np.array([object()])}).check()
    with pytest.raises(InputError, match="int, float, bool, str or bytes"):
        Record(config={"a": [1, 2]}).check()


def test_message_slots_round_trip_and_refuse_partial_messages():
    record = Record()
    message = Message(3, -1, "secagg/masked", (np.arange(4, dtype=np.uint64), np.ones((2, 2))))
    put_message(record, "up", message)
    back = take_message(record, "up")
    assert (back.sender, back.receiver, back.tag) == (3, -1, "secagg/masked")
    assert all(np.array_equal(a, b) for a, b in zip(back.arrays, message.arrays))
    del record.arrays["up/1"]
    with pytest.raises(ProtocolError, match="incomplete"):
        take_message(record, "up")


# ----------------------------------------------------------------------------- sequencing


class Counter(ClientHalf):
    """Counts requests in its state; raises on step 'boom' after touching the state."""

    program = "counter"

    def handle(self, step, request, state, node):
        state.config["count"] = int(state.config.get("count", 0)) + 1
        if step == "boom":
            raise ProtocolError("boom")
        return Record(config={"count": state.config["count"]})


def stamped(transport, client, step="tick"):
    return transport.stamp(client, step, Record())


def test_replayed_reordered_and_foreign_requests_are_refused():
    transport = InProcessTransport(Counter(), nodes(1))
    first, second = stamped(transport, 0), stamped(transport, 0)
    node = transport.nodes[0]
    _, state, _ = serve(Counter(), first, Record(), node)
    _, state, _ = serve(Counter(), second, state, node)
    with pytest.raises(ProtocolError, match="replayed or reordered"):
        serve(Counter(), second, state, node)          # replay
    with pytest.raises(ProtocolError, match="replayed or reordered"):
        serve(Counter(), first, state, node)           # an older request after a newer one
    other = InProcessTransport(Counter(), nodes(1))
    stamped(other, 0)
    with pytest.raises(ProtocolError, match="never opened"):
        serve(Counter(), stamped(other, 0), state, node)  # mid-session request of another session
    third = stamped(transport, 0)
    stamped(transport, 0)                              # a request that timed out: a gap is fine
    reply, _, _ = serve(Counter(), stamped(transport, 0), state, node)
    assert reply.config["count"] == 3 and third.config["_seq"] == 2


def test_a_raising_handler_leaves_the_state_unchanged():
    transport = InProcessTransport(Counter(), nodes(2))
    assert transport.exchange("tick", {0: Record(), 1: Record()}).replies[0].config["count"] == 1
    failed = transport.exchange("boom", {0: Record()})
    assert failed.failed == {0: "ProtocolError: boom"} and not failed.replies
    assert transport.exchange("tick", {0: Record()}).replies[0].config["count"] == 2


class Echo(ClientHalf):
    """Replies with the array it got (step 'echo'), keeps it in its state; on 'scribble'
    writes into the request's array and then into the one its state kept."""

    program = "echo"

    def handle(self, step, request, state, node):
        if step == "scribble":
            target = request.arrays["x"] if "x" in request.arrays else state.arrays["kept"]
            target[0] = -1
            return Record()
        state.arrays["kept"] = request.arrays["x"]
        return Record({"x": request.arrays["x"]})


def test_a_half_cannot_write_into_memory_it_shares_with_the_server():
    sent = np.arange(4)
    transport = InProcessTransport(Echo(), nodes(1))
    reply = transport.exchange("echo", {0: Record({"x": sent})}).replies[0]
    sent[1] = 42  # the server reuses its buffer: what the client got and kept is unchanged
    assert reply.arrays["x"].tolist() == [0, 1, 2, 3]
    assert not reply.arrays["x"].flags.writeable
    failed = transport.exchange("scribble", {0: Record({"x": reply.arrays["x"]})}).failed
    assert "read-only" in failed[0]
    failed = transport.exchange("scribble", {0: Record()}).failed  # its own saved copy is writable
    assert failed == {}
    assert reply.arrays["x"].tolist() == [0, 1, 2, 3]


def test_dropouts_are_replies_that_never_come():
    transport = InProcessTransport(Counter(), nodes(3), dropouts={1: "second"})
    assert transport.exchange("first", {c: Record() for c in range(3)}).answered == (0, 1, 2)
    second = transport.exchange("second", {c: Record() for c in range(3)})
    assert second.answered == (0, 2) and second.dropped == (1,)
    assert transport.exchange("first", {c: Record() for c in range(3)}).dropped == (1,)


def test_client_generators_do_not_depend_on_the_order_clients_run_in():
    import torch

    forward = [torch.randn(3, generator=client_generator(7, 2, c)) for c in range(3)]
    backward = [torch.randn(3, generator=client_generator(7, 2, c)) for c in reversed(range(3))]
    assert all(torch.equal(a, b) for a, b in zip(forward, backward[::-1]))
    assert not torch.equal(forward[0], forward[1])
    assert not torch.equal(forward[0], torch.randn(3, generator=client_generator(7, 3, 0)))


# ----------------------------------------------------------------------------- links


def link_states(count: int) -> list[Record]:
    """Clients that opened their links to each other (one session, party c = client c)."""
    session = secrets.token_bytes(16)
    states = [Record(config={"_session": session}) for _ in range(count)]
    _, credentials = new_federation("links", count)
    for c in range(count):
        links.open_links(states[c], credentials[c], me=c, members=range(count))
    return states


def payloads(sender, receiver, count=2):
    return [Message(sender, receiver, f"t/{i}", (np.arange(5 + i, dtype=np.int32),))
            for i in range(count)]


def test_link_batches_arrive_intact_in_order_and_only_once():
    states = link_states(3)
    sent = [links.seal(states[0], payloads(0, 1), me=0, peer=1) for _ in range(2)]
    for batch in sent:
        received = links.open_batch(states[1], batch, me=1, peer=0)
        assert [m.tag for m in received] == ["t/0", "t/1"]
        assert np.array_equal(received[1].arrays[0], np.arange(6, dtype=np.int32))
    with pytest.raises(ProtocolError, match="another session"):
        links.open_batch(states[1], sent[0], me=1, peer=0)


def test_a_batch_frame_is_maced_under_a_one_time_key_from_the_link_key_itself():
    """The links' frames are MACed under HMAC-SHA256(K_jk, batch session || seq || j || k),
    K_jk the key both ends derived from the roster (no key agreement per batch)."""
    states = link_states(2)
    session = links.batch_session(links.transport_session(states[0]), 0, 1, 0)
    key = links._link_key(states[0], 0, 1)
    batch = links.seal(states[0], payloads(0, 1, count=1), me=0, peer=1)
    (tag_length,) = struct.unpack_from(">H", batch, 4)
    frame = Frame.from_bytes(memoryview(batch)[4 + 2 + tag_length + 8:])
    assert frame.mac == frame_mac(frame_key(key, session, 0, 0, 1), frame.header, frame.body)
    assert [m.tag for m in links.open_batch(states[1], batch, me=1, peer=0)] == ["t/0"]


def test_an_outbox_batch_is_the_batch_of_fresh_arrays_made_in_place():
    """Frames written into an Outbox's views are sealed where they lie: the batch is the
    outbox's own blob, byte for byte the batch of the same messages sealed from fresh arrays
    (same headers, MACs and counters), and it opens to the same arrays."""
    states = link_states(2)
    twin = states[0].copy()
    box = links.Outbox.layout(0, 1, "t/u", np.uint16, [(3, 8), (1, 8)])
    for i, array in enumerate(box.arrays):
        array[...] = np.arange(array.size, dtype=np.uint16).reshape(array.shape) + i
    messages = [Message(0, 1, "t/u", (array,)) for array in box.arrays]
    fresh = links.seal(twin, [Message(0, 1, "t/u", (a.copy(),)) for a in box.arrays], me=0, peer=1)
    sealed = links.seal(states[0], messages, me=0, peer=1, outbox=box)
    assert sealed is box.blob and np.array_equal(sealed, fresh)
    received = links.open_batch(states[1], sealed, me=1, peer=0)
    assert all(np.array_equal(m.arrays[0], a) for m, a in zip(received, box.arrays))
    copied = links.Outbox.layout(0, 1, "t/u", np.uint16, [(3, 8), (1, 8)])  # bodies elsewhere: copied in
    links.seal(twin, messages, me=0, peer=1, outbox=copied)
    assert np.array_equal(links.open_batch(states[1], copied.blob, me=1, peer=0)[1].arrays[0], box.arrays[1])
    with pytest.raises(InputError, match="outbox"):
        links.seal(states[0], messages[:1], me=0, peer=1, outbox=box)
    swapped = links.Outbox.layout(0, 1, "t/u", np.uint16, [(2, 8), (2, 8)])
    with pytest.raises(InputError, match="not where its layout puts it"):
        links.seal(states[0], [Message(0, 1, "t/u", (a,)) for a in swapped.arrays[::-1]], me=0, peer=1,
                   outbox=swapped)


@pytest.mark.parametrize("attack, match", [
    ("flip", "MAC check failed"),
    ("reorder", "out-of-order"),
    ("skip", "another session"),
    ("misroute", "another session|delivered on link|MAC"),
    ("truncate", "truncated|malformed"),
])
def test_a_relay_that_alters_a_batch_makes_the_receiver_raise(attack, match):
    states = link_states(3)
    batch = links.seal(states[0], payloads(0, 1), me=0, peer=1)
    if attack == "flip":
        batch = batch.copy()
        batch[-5] ^= 0x80
    elif attack == "reorder":
        batch = reorder(batch)
    elif attack == "skip":  # batch 0 withheld, batch 1 delivered
        batch = links.seal(states[0], payloads(0, 1), me=0, peer=1)
    elif attack == "truncate":
        batch = batch[:-7]
    receiver = 2 if attack == "misroute" else 1
    state_before = states[receiver].copy()
    with pytest.raises(ProtocolError, match=match):
        links.open_batch(states[receiver], batch, me=receiver, peer=0)
    assert states[receiver].config == state_before.config  # the receive counter did not move


def test_link_keys_come_from_the_roster_and_a_relabelled_member_list_is_refused():
    session = secrets.token_bytes(16)
    _, credentials = new_federation("links", 3)

    def opened(c, members, label="", at=session):
        state = Record(config={"_session": at})
        links.open_links(state, credentials[c], me=list(members).index(c), members=members,
                         label=label)
        return state

    a, b = opened(0, [0, 1, 2]), opened(1, [0, 1, 2])
    assert links._link_key(a, 0, 1) == links._link_key(b, 1, 0) != links._link_key(a, 0, 2)
    for other in (opened(1, [0, 1, 2], label="round 2"), opened(1, [0, 1, 2], at=b"x" * 16)):
        assert links._link_key(other, 1, 0) != links._link_key(a, 0, 1)  # per label and session
    for members, error in (([1, 0, 2], "with this client at party 0"), ([0, 0, 2], "distinct"),
                           ([0, 1, 7], "no pair key")):  # another at its place, twice, a stranger
        with pytest.raises(ProtocolError, match=error):
            links.open_links(Record(config={"_session": session}), credentials[0], me=0,
                             members=members)
    # the server tells client 0 that party 1 is client 2 (and client 1 the truth): refused
    relabelled = opened(0, [0, 2, 1])
    batch = links.seal(relabelled, payloads(0, 1), me=0, peer=1)
    with pytest.raises(ProtocolError, match="MAC check failed"):
        links.open_batch(b, batch, me=1, peer=0)


def test_link_check_verifies_every_link_in_process():
    transport = InProcessTransport(LinkCheckClient(), nodes(4, {"rounds": 2, "frames": 3}))
    result = LinkCheckServer().run(transport, {"rounds": 2, "frames": 3})
    assert result["verified"] and len(result["links"]) == 2 * 4 * 3 and not result["failed"]


def test_tampering_server_is_caught_by_the_targeted_clients_only():
    run = {"rounds": 3, "frames": 2, "payload-bytes": 256}
    transport = InProcessTransport(LinkCheckClient(), nodes(3, run))
    result = TamperingLinkCheck().run(transport, run)
    assert not result["verified"]
    for key, text in expected_failures().items():
        assert text in result["failed"][key], (key, result["failed"])
    # links the server did not touch, into clients that had not been attacked, verified
    assert result["links"]["0/1->2"] and result["links"]["0/2->0"] and result["links"]["1/1->0"]
    assert not result["links"]["0/0->1"]


# ----------------------------------------------------------------------------- party state


@settings(max_examples=5, deadline=None)
@given(n=st.integers(2, 5), dim=st.integers(1, 20), seed=st.integers(0, 1000))
def test_secagg_parties_survive_a_round_trip_through_their_state_at_every_round(n, dim, seed):
    rng = np.random.default_rng(seed)
    values = [rng.integers(0, 2**32, dim, dtype=np.uint64) for _ in range(n)]
    config = secure_sum_steps.new_config(list(range(n)), threshold=n // 2 + 1, dim=dim)
    server = SecAggServer(config)
    _, credentials = new_federation("codec", n)
    skip = ("rng", "credentials")
    records = []
    for u in range(n):
        record = Record()
        party = SecAggClient(u, config, values[u], credentials=credentials[u])
        server.handle(party.advertise())
        state_codec.save(party, record, "p/", skip=skip)
        records.append(record.copy())
    for _ in range(len(secure_sum_steps.STEPS)):  # keys, ciphertexts, survivors, signatures
        outgoing = server.close_round()
        for message in outgoing:
            u = message.receiver
            party = state_codec.load(SecAggClient, records[u], "p/", rng=secrets.token_bytes,
                                     credentials=credentials[u])
            server.handle(party.handle(message))
            records[u] = Record()
            state_codec.save(party, records[u], "p/", skip=skip)
    server.close_round()
    assert np.array_equal(server.total, ring_sum(values, 64))


def test_state_codec_refuses_types_it_cannot_store():
    from dataclasses import dataclass

    @dataclass
    class Odd:
        handle: object

    with pytest.raises(InputError, match="no state encoding"):
        state_codec.save(Odd(object()), Record(), "x/")


# ----------------------------------------------------------------------------- secure sum


class Summand(ClientHalf):
    """Submits a fixed integer vector (from run config) to a secure sum."""

    program = "summand"

    def handle(self, step, request, state, node):
        reply = Record()
        if step == "input":
            config = SecAggConfig(
                bytes(request.config["session"]), int(request.config["n"]),
                int(request.config["t"]), int(request.config["dim"]), 64,
                members=secure_sum_steps.request_members(request, "cohort", int(request.config["n"])),
                consistency=True)
            value = np.asarray(node.run_config["values"][node.partition], dtype=np.uint64)
            secure_sum_steps.start(state, reply, index=int(request.config["index"]),
                                   config=config, encoded=value, credentials=node.credentials(),
                                   policy=node.policy())
        else:
            secure_sum_steps.answer(request, state, reply, credentials=node.credentials())
        return reply


STEP_OF_ROUND = {"advertise": "input", "share": "secagg/keys",
                 "masked_input": "secagg/ciphertexts", "unmask": "secagg/survivors"}


def summed(values, members, threshold, dropouts=None, intercept=None):
    run = {"values": values}
    transport = InProcessTransport(Summand(), nodes(len(values), run),
                                   dropouts={c: STEP_OF_ROUND[r] for c, r in (dropouts or {}).items()},
                                   intercept=intercept)
    config = secure_sum_steps.new_config(members, threshold=threshold, dim=len(values[0]))
    requests = {c: Record({"cohort": secure_sum_steps.packed_members(members)},
                          {"session": config.session, "n": len(members), "t": threshold,
                           "dim": len(values[0]), "index": i})
                for i, c in enumerate(members)}
    first = transport.exchange("input", requests)
    return secure_sum_steps.aggregate_steps(transport, config, members, first)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 6),
       drops=st.lists(st.sampled_from(ROUNDS), min_size=0, max_size=2))
def test_secure_sum_over_a_transport_equals_the_in_process_protocol(seed, n, drops):
    rng = np.random.default_rng(seed)
    values = [rng.integers(0, 2**20, 6, dtype=np.uint64) for _ in range(n)]
    majority = n // 2 + 1  # secure_sum's rule n/2 < t
    dropouts = {int(c): r for c, r in zip(rng.permutation(n), drops[: n - majority])}
    threshold = n - len(dropouts)
    reference = secure_sum(values, threshold=threshold, backend="plaintext", dropouts=dropouts)
    outcome = summed(values, list(range(n)), threshold, dropouts)
    assert outcome.survivors == reference.survivors
    assert np.array_equal(outcome.total.astype(np.uint64), reference.total.astype(np.uint64))
    for client, round_name in dropouts.items():
        assert client in outcome.dropped[round_name]


def test_secure_sum_over_a_transport_refuses_too_many_dropouts():
    values = [np.arange(3, dtype=np.uint64)] * 4
    with pytest.raises(DropoutError):
        summed(values, [0, 1, 2, 3], 3, {0: "masked_input", 1: "share"})


def test_a_tampered_share_ciphertext_makes_its_receiver_raise_and_drop():
    values = [np.full(4, c + 1, dtype=np.uint64) for c in range(4)]

    def tamper(client, request):
        if client == 2 and request.config["_step"] == "secagg/ciphertexts":
            blob = request.arrays["secagg/sum/in/1"].copy()
            blob[0, 20] ^= 1
            request.arrays["secagg/sum/in/1"] = blob
        return request

    outcome = summed(values, [0, 1, 2, 3], 3, intercept=tamper)
    assert "ProtocolError" in outcome.failed[2] and "AES-GCM" in outcome.failed[2]
    assert outcome.survivors == (0, 1, 3)
    assert list(outcome.total) == [1 + 2 + 4] * 4


def test_a_server_sending_a_later_rounds_message_is_refused_by_the_client():
    values = [np.full(3, c + 1, dtype=np.uint64) for c in range(3)]

    def skip_ahead(client, request):
        if client == 0 and request.config["_step"] == "secagg/keys":
            put_message(request, secure_sum_steps.slot_down(),
                        Message(-1, 0, TAGS["survivors"], (np.arange(3, dtype=np.int32),)))
        return request

    outcome = summed(values, [0, 1, 2], 2, intercept=skip_ahead)
    assert "ProtocolError" in outcome.failed[0] and "expected round" in outcome.failed[0]
    assert outcome.survivors == (1, 2) and list(outcome.total) == [5, 5, 5]


class MultiSummand(ClientHalf):
    """Submits values[k] and 10 * values[k] to two secure sums in the same exchanges."""

    program = "multi-summand"

    def handle(self, step, request, state, node):
        reply = Record()
        if step != "input":
            secure_sum_steps.answer(request, state, reply, credentials=node.credentials())
            return reply
        value = np.asarray(node.run_config["values"][node.partition], dtype=np.uint64)
        for name, factor in (("small", 1), ("large", 10)):
            config = SecAggConfig(bytes(request.config[f"session/{name}"]), int(request.config["n"]),
                                  int(request.config["t"]), value.size, 64,
                                  members=secure_sum_steps.request_members(request, "cohort", int(request.config["n"])),
                consistency=True)
            secure_sum_steps.start(state, reply, index=int(request.config["index"]), config=config,
                                   encoded=value * np.uint64(factor), name=name,
                                   credentials=node.credentials(), policy=node.policy())
        return reply


def test_several_sums_share_the_exchanges_and_count_bytes_as_the_in_process_protocol():
    values = [np.arange(5, dtype=np.uint64) + c for c in range(4)]
    members = [0, 1, 2, 3]
    transport = InProcessTransport(MultiSummand(), nodes(4, {"values": values}),
                                   dropouts={2: "secagg/ciphertexts"})
    configs = {name: secure_sum_steps.new_config(members, threshold=3, dim=5)
               for name in ("small", "large")}
    requests = {c: Record({"cohort": secure_sum_steps.packed_members(members)},
                          {"n": 4, "t": 3, "index": i,
                           **{f"session/{n}": cfg.session for n, cfg in configs.items()}})
                for i, c in enumerate(members)}
    first = transport.exchange("input", requests)
    outcome = secure_sum_steps.aggregate_steps(transport, configs, members, first)
    assert transport.stats.exchanges == 5                      # one input step + four for both sums
    survivors = (0, 1, 3)
    assert outcome.sums["small"].survivors == outcome.sums["large"].survivors == survivors
    assert list(outcome.sums["small"].total) == list(sum(values[c] for c in survivors))
    assert list(outcome.sums["large"].total) == list(10 * sum(values[c] for c in survivors))
    assert outcome.dropped == {"advertise": (), "share": (), "masked_input": (2,), "unmask": ()}
    with pytest.raises(InputError, match="several"):
        _ = outcome.total
    # the frames each client sent in a sum: the bytes secure_sum's own network meters
    reference = secure_sum(values, threshold=3, backend="secagg", dropouts={2: "masked_input"})
    for client in members:
        assert outcome.sums["small"].bytes_sent[client] == reference.bytes_sent[client]


def test_client_states_survive_a_checkpoint_into_a_new_session():
    transport = InProcessTransport(Counter(), nodes(2))
    for _ in range(2):
        transport.exchange("tick", {0: Record(), 1: Record()})
    transport.states[1].arrays["links/private"] = np.ones(32, np.uint8)   # session secrets
    transport.states[1].config["secagg/sum/party/stage#"] = "scalar"
    saved = transport.client_states()
    assert saved[0].config == {"count": 2} and saved[1].config == {"count": 2}
    assert not saved[1].arrays  # no link key, no party, no session stamp is checkpointed
    resumed = InProcessTransport(Counter(), nodes(2))
    assert resumed.session != transport.session
    resumed.adopt(saved)
    assert resumed.exchange("tick", {0: Record(), 1: Record()}).replies[0].config["count"] == 3
    fresh = InProcessTransport(Counter(), nodes(2))          # without adopting: a new client
    assert fresh.exchange("tick", {0: Record()}).replies[0].config["count"] == 1
    with pytest.raises(InputError, match="not among the clients"):
        fresh.adopt({5: Record()})


def test_the_order_hook_runs_clients_in_its_order_and_must_permute_them():
    seen = []

    class Recorder(Counter):
        def handle(self, step, request, state, node):
            seen.append(node.partition)
            return super().handle(step, request, state, node)

    transport = InProcessTransport(Recorder(), nodes(3), order=lambda clients: list(reversed(clients)))
    transport.exchange("tick", {c: Record() for c in range(3)})
    assert seen == [2, 1, 0]
    broken = InProcessTransport(Recorder(), nodes(3), order=lambda clients: clients[:1])
    with pytest.raises(InputError, match="permutation"):
        broken.exchange("tick", {c: Record() for c in range(3)})


def test_a_server_tampering_with_method_traffic_is_caught_by_the_targeted_clients():
    from securefl.experiments.config import load_config
    from securefl.experiments.deployment import ExperimentClient, program_config

    from .tampering import TamperingMethod, method_failures

    config = load_config(None, settings=["partition.num_clients=3", "partition.samples_per_client=30",
                                         "hyper.local_epochs=1"], methods=["fedavg-labeled"], rounds=3)
    run = program_config(config, "fedavg-labeled", secure="real")
    transport = InProcessTransport(ExperimentClient(), nodes(3, run))
    result = TamperingMethod().run(transport, run)
    for record in result["rounds"]:
        client, text = method_failures()[record["round"]]
        failed = record["participation"]["failed"]
        assert list(failed) == [client] and "ProtocolError" in failed[client] and text in failed[client]
        assert record["participation"]["survivors"] == sorted({0, 1, 2} - {int(client)})
