"""LSH: hyperplanes from the agreed seed, codes, cosine estimate, seed agreement views."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto.channel import SERVER, Network
from securefl.errors import InputError, ProtocolError
from securefl.protocols.lsh import (
    SeedAgreementClient,
    agree_seed,
    cosine_from_hamming,
    hyperplanes,
    lsh_codes,
)


def _pairs(
    rng: np.random.Generator, count: int, dim: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = rng.normal(size=(count, dim))
    b = a * rng.choice([-1.0, 1.0], size=(count, 1)) + rng.normal(size=(count, dim)) * rng.uniform(
        0, 3, (count, 1)
    )
    true = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return a, b, true


def _mae(L: int, seed: bytes) -> float:
    a, b, true = _pairs(np.random.default_rng(1), 400, 32)
    planes = hyperplanes(seed, 32, L)
    hamming = (lsh_codes(a, planes) != lsh_codes(b, planes)).sum(axis=1)
    return float(np.abs(cosine_from_hamming(hamming, L) - true).mean())


def test_cosine_estimate_error_small_at_4096_and_shrinking_with_L():
    seed = bytes(range(16))
    errors = [_mae(L, seed) for L in (64, 256, 1024, 4096)]
    assert errors[-1] <= 0.05
    assert errors[0] > errors[1] > errors[2] > errors[3]
    # the angle estimate's standard deviation falls like 1/sqrt(L): 64x the bits, ~8x less error
    assert errors[0] / errors[-1] > 4


def test_hyperplanes_deterministic_gaussian_and_seed_dependent():
    planes = hyperplanes(b"\x01" * 16, 50, 400)
    assert planes.shape == (50, 400)
    np.testing.assert_array_equal(planes, hyperplanes(b"\x01" * 16, 50, 400))
    assert not np.array_equal(planes, hyperplanes(b"\x02" * 16, 50, 400))
    assert abs(planes.mean()) < 0.02 and abs(planes.std() - 1.0) < 0.02
    # odd count uses half a Box-Muller pair
    assert hyperplanes(b"\x01" * 16, 3, 3).shape == (3, 3)


def test_codes_are_sign_bits_and_scale_invariant():
    rng = np.random.default_rng(0)
    planes = hyperplanes(b"\x03" * 16, 8, 64)
    x = rng.normal(size=(20, 8))
    codes = lsh_codes(x, planes)
    assert codes.dtype == np.uint8 and set(np.unique(codes)) <= {0, 1}
    np.testing.assert_array_equal(codes, (x @ planes >= 0).astype(np.uint8))
    np.testing.assert_array_equal(codes, lsh_codes(7.5 * x, planes))
    np.testing.assert_array_equal(codes, 1 - lsh_codes(-x, planes) | (x @ planes == 0))


def test_bad_inputs_name_the_parameter():
    planes = hyperplanes(b"\x03" * 16, 8, 64)
    with pytest.raises(InputError, match="planes"):
        lsh_codes(np.ones((3, 5)), planes)
    with pytest.raises(InputError, match="features"):
        lsh_codes(np.array([[np.nan] * 8]), planes)
    with pytest.raises(InputError, match="seed"):
        hyperplanes(b"short", 8, 64)
    with pytest.raises(InputError, match="L"):
        hyperplanes(b"\x00" * 16, 8, 0)
    with pytest.raises(InputError, match="hamming"):
        cosine_from_hamming(np.array([65]), 64)


class _Recorder(Network):
    """A network that keeps every delivered message (to inspect views)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.log = []

    def receive(self, receiver, sender, tag):
        message = super().receive(receiver, sender, tag)
        self.log.append(message)
        return message


def test_seed_agreement_common_seed_server_sees_only_keys_and_ciphertexts():
    network = _Recorder()
    clients = [SeedAgreementClient(party=j, session=network.session) for j in range(4)]
    agree_seed(clients, network)
    seeds = {c.lsh_seed for c in clients}
    assert len(seeds) == 1 and len(next(iter(seeds))) == 16
    to_server = [m for m in network.log if m.receiver == SERVER]
    assert to_server
    secret = next(iter(seeds))
    shares = [c.share for c in clients]
    for message in to_server:
        for array in message.arrays:
            raw = array.tobytes()
            assert secret not in raw
            assert not any(share in raw for share in shares)


def test_seed_agreement_deterministic_with_seed_and_fresh_without():
    def run(seed):
        network = Network(session=b"\x00" * 8)
        clients = [
            SeedAgreementClient(party=j, session=network.session, seed=seed) for j in range(3)
        ]
        agree_seed(clients, network)
        return clients[0].lsh_seed

    assert run(5) == run(5)
    assert run(5) != run(6)
    assert run(None) != run(None)


def test_tampered_share_is_rejected():
    network = Network()
    clients = [SeedAgreementClient(party=j, session=network.session) for j in range(2)]
    from securefl.protocols.lsh import SeedAgreementServer

    server = SeedAgreementServer()
    keys = server.broadcast_keys([c.advertise() for c in clients])
    shares = [clients[m.receiver].send_shares(m) for m in keys]
    relayed = server.relay_shares(shares)
    recipients, blobs = relayed[0].arrays
    blobs = blobs.copy()
    blobs[0, -1] ^= 1
    from securefl.crypto.channel import Message

    with pytest.raises(ProtocolError):
        clients[0].receive_shares(
            Message(relayed[0].sender, 0, relayed[0].tag, (recipients, blobs))
        )
