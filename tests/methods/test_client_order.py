"""Order independence: a round's result does not depend on the order in which its clients
compute (what running them as separate parties needs; docs/method-halves.md, checklist step 1).

Each method runs its warm-up (if any) and two rounds twice, once with the clients of every
round computing in the given order and once in reverse (``Method._client_order``); the
models, optimiser and RNG states and the pseudo-label digests must be bit-identical.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from securefl.methods import METHOD_NAMES, build_method, hyper_parameters

TINY = {"clients_per_round": 3, "local_epochs": 1, "batch_size": 8, "lr": 0.05, "warmup_rounds": 1,
        "L": 256, "rounds": 5, "n_unlabeled": 10, "helpers": 2, "pretrain_epochs": 1,
        "server_batch_size": 20, "threshold": 0.0, "confidence": 0.3, "helper_interval": 1}
"""Small settings every method accepts a subset of (FedAnchor's ``threshold=0`` puts every
point in its fix set, so that every client trains; fedavg-pl's 0 is its default; FedMatch's
``confidence=0.3`` and ``helper_interval=1`` give its clients confident points and helpers in
round 1)."""


def _run(name, federation, order):
    hyper = {k: v for k, v in TINY.items() if k in hyper_parameters(name)}
    method = build_method(name, secure="plaintext", seed=3, **hyper)
    if order == "reversed":
        method._client_order = lambda clients: [int(k) for k in reversed(list(clients))]
    method.setup(federation.for_training())
    digests = [method.run_round(r).pseudo_label_digest for r in range(2)]
    return method.state_dict(), digests


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(_equal(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a))
    return a == b


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_a_round_does_not_depend_on_the_order_its_clients_run_in(name, tiny_digits, tiny_digits_server):
    federation = tiny_digits_server if name == "fedanchor" else tiny_digits
    given, given_digests = _run(name, federation, "given")
    backward, backward_digests = _run(name, federation, "reversed")
    assert given_digests == backward_digests
    assert given.keys() == backward.keys()
    for key in given:
        assert _equal(given[key], backward[key]), key
