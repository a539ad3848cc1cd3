"""Shared tiny federations for method tests (engineers D and E).

``tiny_digits``: scikit-learn digits (no download), 5 clients x 40 points, IID, 20 % of
each client's points labeled (8 labels per client).  ``tiny_digits_server``: the same
split with the label budget (40 labels) held by the server as an anchor set and every
client unlabeled.  ``tiny_hyper``: small, fast hyper-parameters every FedAvg-style
method accepts.  All are session-scoped and must not be mutated.

:func:`play` runs rounds of a set-up method and scores it on the test set after each, as
the runner does (methods never see the test set: they are set up on
``federation.for_training()``).
"""

from __future__ import annotations

import pytest

from securefl.data import load_dataset, partition

TINY_CLIENTS = 5
TINY_POINTS = 40


def play(method, federation, rounds, *, start=0):
    """Rounds ``start..rounds-1`` of ``method``: ``(round results, test accuracies)``."""
    results, accuracies = [], []
    for r in range(start, rounds):
        results.append(method.run_round(r))
        accuracies.append(method.score(federation.test.x, federation.test.y))
    return results, accuracies


@pytest.fixture(scope="session")
def digits():
    return load_dataset("digits")


@pytest.fixture(scope="session")
def tiny_digits(digits):
    return partition(digits, scheme="iid", num_clients=TINY_CLIENTS, seed=0,
                     labeled_fraction=0.2, samples_per_client=TINY_POINTS)


@pytest.fixture(scope="session")
def tiny_digits_server(digits):
    return partition(digits, scheme="iid", num_clients=TINY_CLIENTS, seed=0,
                     labeled_fraction=0.2, samples_per_client=TINY_POINTS,
                     labels_at="server", server_labels=TINY_CLIENTS * TINY_POINTS // 5)


@pytest.fixture
def tiny_hyper():
    return {"clients_per_round": 3, "local_epochs": 1, "batch_size": 8, "lr": 0.05}
