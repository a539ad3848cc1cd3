"""Secrets in real mode come from the OS CSPRNG, not from the simulation seed (issue 11, 8).

Before the fix FedProp drew every LSH seed share from its simulation RNG, and ProtoFSSL
its DP noise: anyone who knew ``--seed`` (default 0) knew the hyperplanes and the noise.
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.errors import InputError
from securefl.methods import build_method, hyper_parameters
from securefl.methods.base import plaintext_crypto_seed
from securefl.protocols.crossclient import CrossClientLPClient

FAST = {"warmup_rounds": 1, "L": 64, "clients_per_round": 3, "local_epochs": 1, "batch_size": 8}


@pytest.fixture
def lsh_seeds(monkeypatch):
    """Record the LSH seed the clients agree on in every CrossClientLP run (as party 0,
    the first selected client, hashes with it at its own node)."""
    seen: list[bytes] = []
    original = CrossClientLPClient.hash_features

    def recording(self, seed, L):
        if self.party == 0:
            seen.append(seed)
        return original(self, seed, L)

    monkeypatch.setattr(CrossClientLPClient, "hash_features", recording)
    return seen


def _fedprop_round(federation, **kwargs):
    method = build_method("fedprop", seed=0, **FAST, **kwargs)
    method.setup(federation)
    return method.run_round(0)


def test_real_mode_hyperplanes_are_not_predictable_from_the_simulation_seed(tiny_digits, lsh_seeds):
    first = _fedprop_round(tiny_digits, secure="real")
    second = _fedprop_round(tiny_digits, secure="real")
    attacker = _fedprop_round(tiny_digits, secure="plaintext")  # knows --seed 0, replays it
    real_a, real_b, replayed = lsh_seeds
    assert real_a != real_b, "two real runs with --seed 0 used the same LSH hyperplanes"
    assert replayed not in (real_a, real_b), "the simulation seed reveals the real hyperplanes"
    assert first.pseudo_label_digest and second.pseudo_label_digest and attacker.pseudo_label_digest


def test_one_crypto_seed_gives_real_and_plaintext_the_same_hyperplanes(tiny_digits, lsh_seeds):
    real = _fedprop_round(tiny_digits, secure="real", crypto_seed=2**100 + 3)
    plain = _fedprop_round(tiny_digits, secure="plaintext", crypto_seed=2**100 + 3)
    other = _fedprop_round(tiny_digits, secure="plaintext", crypto_seed=4)
    assert lsh_seeds[0] == lsh_seeds[1] != lsh_seeds[2]
    assert real.pseudo_label_digest == plain.pseudo_label_digest


def test_plaintext_alone_is_reproducible_from_the_simulation_seed(tiny_digits, lsh_seeds):
    _fedprop_round(tiny_digits, secure="plaintext")
    _fedprop_round(tiny_digits, secure="plaintext", crypto_seed=plaintext_crypto_seed(0))
    assert lsh_seeds[0] == lsh_seeds[1]
    method = build_method("fedprop", secure="plaintext", seed=3)
    assert method.crypto_seed_for("lsh", 5) == build_method(
        "fedprop", secure="plaintext", seed=3, crypto_seed=plaintext_crypto_seed(3)
    ).crypto_seed_for("lsh", 5)
    assert build_method("fedprop", secure="real", seed=3).crypto_seed_for("lsh", 5) is None


def _noised_prototypes(federation, secure, **kwargs):
    method = build_method("protofssl", secure=secure, seed=5, clients_per_round=3, helpers=2,
                          local_epochs=2, n_unlabeled=10, noise_std=0.5, **kwargs)
    method.setup(federation)
    method.run_round(0)
    return {k: p.vectors for k, p in method.store.previous.items()}


def test_real_mode_dp_noise_is_fresh_and_one_crypto_seed_reproduces_it(tiny_digits):
    first = _noised_prototypes(tiny_digits, "real")
    second = _noised_prototypes(tiny_digits, "real")
    assert first.keys() == second.keys()
    assert all(not np.array_equal(first[k], second[k]) for k in first)
    real = _noised_prototypes(tiny_digits, "real", crypto_seed=11)
    plain = _noised_prototypes(tiny_digits, "plaintext", crypto_seed=11)
    assert all(np.array_equal(real[k], plain[k]) for k in real)


def test_crypto_seed_labels_never_collide_and_the_keywords_are_checked():
    method = build_method("protofssl", secure="plaintext", crypto_seed=1)
    seeds = {method.crypto_seed_for("prototype-noise", r, c) for r in range(20) for c in range(20)}
    assert len(seeds) == 400 and method.crypto_seed_for("lsh", 0) not in seeds
    assert "crypto_seed" not in hyper_parameters("fedprop")
    assert "sum_backend" not in hyper_parameters("protofssl")
    with pytest.raises(InputError, match="crypto_seed"):
        build_method("fedprop", crypto_seed=-1)
    with pytest.raises(InputError, match="sum_backend"):
        build_method("fedanchor", sum_backend="paillier")
