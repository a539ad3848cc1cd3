"""Attack scripts against secure aggregation: each runs the attack a privacy claim of
:mod:`securefl.crypto.secagg` rules out (or states as a limit) and checks the outcome.

The attacking server reads only what it receives (public keys, masked inputs, unmask
shares); colluding clients hand it their own state (the shares they hold).
"""

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from securefl.crypto import shamir
from securefl.crypto.channel import SERVER, Message
from securefl.crypto.fixed_point import ring_mask
from securefl.crypto.secagg import (
    _SK_LIMBS,
    KEY_BYTES,
    SEED_BYTES,
    TAGS,
    MaskExpander,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
    _kdf,
    _pair_info,
    collusion_tolerance,
    party_rng,
)
from securefl.errors import DropoutError, InputError, ProtocolError
from securefl.runtime.sum_backends import names
from securefl.runtime.summation import secure_sum

DIM = 16


def _run_to_masked_inputs(config, seed):
    """Rounds 0-2 honestly: clients, the server, and every client's masked input y_u."""
    rng = np.random.default_rng(seed)
    values = [rng.integers(0, 2**32, DIM, dtype=np.uint64).astype(np.uint32) for _ in range(config.clients)]
    clients = [SecAggClient(u, config, values[u], party_rng(seed, u)) for u in range(config.clients)]
    server = SecAggServer(config)
    for c in clients:
        server.handle(c.advertise())
    keys = {m.receiver: m for m in server.close_round()}
    for c in clients:
        server.handle(c.handle(keys[c.index]))
    ciphertexts = {m.receiver: m for m in server.close_round()}
    masked = {c.index: c.handle(ciphertexts[c.index]).arrays[0] for c in clients}
    return clients, server, masked, values


def _secret(rows: dict[int, np.ndarray], limbs: int, length: int) -> bytes | None:
    """Interpolate a secret from {point: share row}; None if it does not decode."""
    points = sorted(rows)
    words = shamir.reconstruct(points, np.stack([rows[p] for p in points]).astype(np.uint64))
    try:
        return shamir.elements_to_bytes(words.reshape(1, limbs), length)[0].tobytes()
    except InputError:
        return None


def _unmask(config, server, v, y_v, b_rows, s_rows_by_owner):
    """x_v from y_v, given shares of b_v and, for the masks, shares of s^SK of v itself
    (``s_rows_by_owner[v]``) or of every neighbour of v."""
    b_v = _secret(b_rows, len(b_rows[next(iter(b_rows))]), SEED_BYTES)
    if b_v is None:
        return None
    expander = MaskExpander(config.dim, config.dtype)
    x = np.array(y_v, copy=True)
    expander.add(x, b_v, -1)
    public = {u: X25519PublicKey.from_public_bytes(server._keys[u][KEY_BYTES:]) for u in server._keys}
    for u in config.neighbourhood(v):
        owner = v if v in s_rows_by_owner else u
        sk = _secret(s_rows_by_owner[owner], _SK_LIMBS, KEY_BYTES)
        if sk is None:
            return None
        other = u if owner == v else v
        shared = X25519PrivateKey.from_private_bytes(sk).exchange(public[other])
        expander.add(x, _kdf(shared, config.session, _pair_info(b"mask", v, u)), -1 if v < u else +1)
    return np.bitwise_and(x, ring_mask(config.modulus_bits))


def _answers(clients, lists, v, owners):
    """Send each client its own survivor list; collect shares of b_v and of s_u^SK (u in owners)."""
    b_rows, s_rows = {}, {u: {} for u in owners}
    for u, listed in lists.items():
        reply = clients[u].handle(Message(SERVER, u, TAGS["survivors"], (np.array(sorted(listed), np.int32),)))
        b_ids, b_shares, s_ids, s_shares = reply.arrays
        if v in b_ids.tolist():
            b_rows[u + 1] = b_shares[b_ids.tolist().index(v)]
        for owner in owners:
            if owner in s_ids.tolist():
                s_rows[owner][u + 1] = s_shares[s_ids.tolist().index(owner)]
    return b_rows, s_rows


# ------------------------------------------- finding 4: survivor lists and the threshold


def _two_halves_attack(threshold):
    """n = 4: clients 2, 3 are told everyone survived (they reveal b_3), clients 0, 1 that
    client 3 dropped (they reveal s_3^SK); client 3 never dropped."""
    config = SecAggConfig(party_rng(5, -2)(16), 4, threshold, DIM, 32)
    clients, server, masked, values = _run_to_masked_inputs(config, seed=5)
    lists = {0: {0, 1, 2}, 1: {0, 1, 2}, 2: {0, 1, 2, 3}, 3: {0, 1, 2, 3}}
    b_rows, s_rows = _answers(clients, lists, 3, owners=[3])
    return _unmask(config, server, 3, masked[3], b_rows, {3: s_rows[3]}), values[3]


def test_threshold_at_most_half_is_refused_because_two_survivor_lists_unmask_a_live_client():
    with pytest.raises(InputError, match=r"threshold.*n/2 < t"):
        _two_halves_attack(threshold=2)  # old code: the attack returned x_3 exactly
    # t = 3 > n/2: two disjoint halves cannot both hold t shares; nothing is recovered.
    recovered, truth = _two_halves_attack(threshold=3)
    assert recovered is None or not np.array_equal(recovered, truth)


@pytest.mark.parametrize("n, t", [(4, 2), (3, 1), (2, 1), (6, 3), (7, 3), (5, 0), (5, 6), (3, True)])
def test_every_backend_refuses_thresholds_outside_half_to_n(n, t):
    for backend in names():
        with pytest.raises(InputError, match="threshold"):
            secure_sum([np.arange(3, dtype=np.int64)] * n, threshold=t, backend=backend)
        with pytest.raises(InputError, match="threshold"):
            SecAggConfig(bytes(16), n, t, 3, 16)


def test_clients_refuse_survivor_lists_naming_unknown_clients():
    config = SecAggConfig(party_rng(6, -2)(16), 4, 3, DIM, 32)
    clients, _, _, _ = _run_to_masked_inputs(config, seed=6)
    with pytest.raises(ProtocolError, match="outside"):
        clients[0].handle(Message(SERVER, 0, TAGS["survivors"], (np.array([0, 1, 9], np.int32),)))


# --------------------------------------------------- finding 3: SecAgg+ neighbour mode

N, T, K, V = 20, 11, 4, 0  # t' = ceil(11 * 5 / 20) = 3


def test_secagg_plus_three_colluding_neighbours_recover_an_input_outside_the_documented_guarantee():
    config = SecAggConfig(party_rng(7, -2)(16), N, T, DIM, 32, neighbours=K)
    assert config.neighbour_threshold == 3 and config.neighbourhood(V) == (1, 2, 18, 19)
    clients, server, masked, values = _run_to_masked_inputs(config, seed=7)
    colluders = (1, 2, 19)  # 3 clients, far fewer than t = 11
    held = {c + 1: clients[c]._held[V] for c in colluders}
    b_rows = {p: row[_SK_LIMBS:] for p, row in held.items()}
    s_rows = {V: {p: row[:_SK_LIMBS] for p, row in held.items()}}
    assert np.array_equal(_unmask(config, server, V, masked[V], b_rows, s_rows), values[V])
    # The documented guarantee excludes exactly this: in SecAgg+ mode no colluder is tolerated.
    assert len(colluders) > config.collusion_tolerance == 0
    # Old docstring: "any coalition smaller than t learns nothing" -- 3 < 11 contradicted it.


def test_complete_graph_tolerates_t_minus_one_colluders_where_secagg_plus_does_not():
    n, t = 7, 4
    config = SecAggConfig(party_rng(8, -2)(16), n, t, DIM, 32)
    assert config.collusion_tolerance == collusion_tolerance(n, t, None) == t - 1
    clients, server, masked, values = _run_to_masked_inputs(config, seed=8)
    colluders = (1, 2, 3)  # t - 1 holders of client 0's shares
    held = {c + 1: clients[c]._held[0] for c in colluders}
    b_rows = {p: row[_SK_LIMBS:] for p, row in held.items()}
    s_rows = {0: {p: row[:_SK_LIMBS] for p, row in held.items()}}
    recovered = _unmask(config, server, 0, masked[0], b_rows, s_rows)
    assert recovered is None or not np.array_equal(recovered, values[0])
    held[5] = clients[4]._held[0]  # one more (t in all) and the same script succeeds
    b_rows = {p: row[_SK_LIMBS:] for p, row in held.items()}
    s_rows = {0: {p: row[:_SK_LIMBS] for p, row in held.items()}}
    assert np.array_equal(_unmask(config, server, 0, masked[0], b_rows, s_rows), values[0])


def test_secagg_plus_refuses_survivor_sets_that_split_the_graph():
    # Dropping 18, 19, 3, 4 after sharing isolates {0, 1, 2}; every neighbourhood still has
    # t' = 3 live holders, so the old code finished and the server could compute
    # x_0 + x_1 + x_2 from the unmasked shares.
    inputs = [np.full(3, u, dtype=np.int64) for u in range(N)]
    dropouts = {u: "masked_input" for u in (18, 19, 3, 4)}
    for backend in ("secagg", "plaintext"):  # he has no neighbour graph (refuses neighbours=)
        with pytest.raises(DropoutError, match="not connected"):
            secure_sum(inputs, threshold=T, neighbours=K, dropouts=dropouts, backend=backend, seed=1)
    # A client checks the list itself: a server that announces the split set is refused.
    config = SecAggConfig(party_rng(9, -2)(16), N, T, DIM, 32, neighbours=K)
    clients, _, _, _ = _run_to_masked_inputs(config, seed=9)
    split = [u for u in range(N) if u not in dropouts]
    with pytest.raises(ProtocolError, match="splits"):
        clients[10].handle(Message(SERVER, 10, TAGS["survivors"], (np.array(split, np.int32),)))


def test_secagg_plus_inconsistent_survivor_lists_unmask_an_input_as_documented():
    """The stated limit: with SecAgg+ a server that lies about who dropped (each list
    connected and long enough) recovers x_0 without any colluding client."""
    config = SecAggConfig(party_rng(10, -2)(16), N, T, DIM, 32, neighbours=K)
    clients, server, masked, values = _run_to_masked_inputs(config, seed=10)
    everyone = set(range(N))
    told_dropped = {3: {1, 2}, 4: {2}, 17: {18, 19}, 16: {18}, 19: {1, 18}, 18: {19}, 1: {19, 2}, 2: {1}}
    lists = {u: everyone - told_dropped.get(u, set()) for u in range(N)}
    b_rows, s_rows = _answers(clients, lists, V, owners=config.neighbourhood(V))
    assert np.array_equal(_unmask(config, server, V, masked[V], b_rows, s_rows), values[V])


def _unmaskable_by_lists(n: int, t: int) -> bool:
    """Exhaustive search over every survivor list each client accepts (its own id, at
    least t entries): can a server collect t shares of b_0 and, for every mask of
    client 0, t shares of s_0^SK or of the partner's s_u^SK?  A holder w reveals b_u for
    every u on its list and s_u^SK for every u off it."""
    import itertools

    options = [
        [sum(1 << u for u in others) | 1 << w for r in range(t - 1, n) for others in itertools.combinations([u for u in range(n) if u != w], r)]
        for w in range(n)
    ]
    lists = np.array(list(itertools.product(*options)), dtype=np.int64)  # (assignments, n)
    bits = (lists[:, :, None] >> np.arange(n)) & 1  # bits[a, w, u]: w lists u
    listed = bits.sum(axis=1)
    omitted = n - listed  # a client always lists itself, so omissions come from others
    b_0 = listed[:, 0] >= t
    masks_0 = (omitted[:, 0] >= t) | np.all(omitted[:, 1:] >= t, axis=1)
    return bool(np.any(b_0 & masks_0))


def test_no_survivor_lists_unmask_one_input_once_t_exceeds_half():
    assert _unmaskable_by_lists(4, 2)  # the two-halves attack, found by the search
    assert not _unmaskable_by_lists(4, 3)
    assert not _unmaskable_by_lists(5, 3)


def test_stated_limit_inconsistent_lists_reveal_the_sum_of_fewer_than_t_survivors():
    """n = 10, t = 6: every client lists B = {0..3}; each of 4..9 is left off the lists of
    six holders, so the server gets b_v of B and s_u^SK of the rest: sum over B (4 < t)."""
    n, t = 10, 6
    config = SecAggConfig(party_rng(11, -2)(16), n, t, DIM, 32)
    clients, server, masked, values = _run_to_masked_inputs(config, seed=11)
    group, rest = [0, 1, 2, 3], list(range(4, 10))
    lists = {w: set(group) | {4 + (2 * w) % 6, 4 + (2 * w + 1) % 6} for w in group}
    lists.update({w: set(group) | {w, 4 + (w - 3) % 6} for w in rest})
    assert all(len(listed) >= t for listed in lists.values())
    b_rows, s_rows = {}, {}
    for w, listed in lists.items():
        b_ids, b_shares, s_ids, s_shares = clients[w].handle(
            Message(SERVER, w, TAGS["survivors"], (np.array(sorted(listed), np.int32),))
        ).arrays
        for ids, shares, out in ((b_ids, b_shares, b_rows), (s_ids, s_shares, s_rows)):
            for i, owner in enumerate(ids.tolist()):
                out.setdefault(owner, {})[w + 1] = shares[i]
    assert all(len(b_rows[v]) >= t for v in group) and all(len(s_rows[u]) >= t for u in rest)
    expander = MaskExpander(config.dim, config.dtype)
    public = {u: X25519PublicKey.from_public_bytes(server._keys[u][KEY_BYTES:]) for u in range(n)}
    total = np.zeros(DIM, dtype=np.uint32)
    for v in group:
        total += masked[v]
        expander.add(total, _secret(b_rows[v], len(b_rows[v][1]), SEED_BYTES), -1)
    for u in rest:
        private = X25519PrivateKey.from_private_bytes(_secret(s_rows[u], _SK_LIMBS, KEY_BYTES))
        for v in group:
            seed = _kdf(private.exchange(public[v]), config.session, _pair_info(b"mask", u, v))
            expander.add(total, seed, -1 if v < u else +1)
    assert np.array_equal(total, sum(values[v].astype(np.uint64) for v in group).astype(np.uint32))
