"""Partitions keep their promises (property-based): sizes, classes, label counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.data import Dataset, partition
from securefl.errors import InputError

PROPS = settings(max_examples=15, deadline=None)


def synthetic(n_per_class: int = 60, classes: int = 10, seed: int = 0) -> Dataset:
    """Unequal classes (60..64 points); x encodes each sample's index."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.repeat(np.arange(classes), n_per_class + rng.integers(0, 5, classes)))
    x = np.arange(len(y), dtype=np.float32)[:, None, None, None] * np.ones((1, 1, 2, 2),
                                                                            np.float32)
    return Dataset("synthetic", x, y.astype(np.int64), x[:10], y[:10].astype(np.int64), classes)


DATA = synthetic()


def ids(client):
    """Original sample ids (x encodes the index)."""
    return client.x[:, 0, 0, 0].astype(np.int64)


def check_disjoint(fed, total):
    everything = np.concatenate([ids(c) for c in fed.clients] +
                                ([ids(fed.server)] if fed.server is not None else []))
    assert len(np.unique(everything)) == len(everything)
    assert everything.max() < total
    for c in fed.clients:
        assert np.array_equal(DATA.y_train[ids(c)], c.y)


@PROPS
@given(clients=st.integers(2, 20), gamma=st.floats(0.0, 1.0), seed=st.integers(0, 99),
       labeled_clients=st.integers(0, 20))
def test_iid(clients, gamma, seed, labeled_clients):
    labeled_clients = min(labeled_clients, clients)
    fed = partition(DATA, scheme="iid", num_clients=clients, seed=seed, labeled_fraction=gamma,
                    labeled_clients=labeled_clients)
    check_disjoint(fed, len(DATA.y_train))
    assert sum(len(c) for c in fed.clients) == len(DATA.y_train)
    sizes = [len(c) for c in fed.clients]
    assert max(sizes) - min(sizes) <= 1
    counts = np.array([np.bincount(c.y, minlength=10) for c in fed.clients])
    assert (counts.max(axis=0) - counts.min(axis=0)).max() <= 1
    holders = [c for c in fed.clients if c.num_labeled > 0]
    assert len(holders) <= labeled_clients
    for c in fed.clients:
        assert c.num_labeled in (0, round(gamma * len(c)))
        if c.num_labeled:
            expected = c.num_labeled * np.bincount(c.y, minlength=10) / len(c)
            assert np.abs(np.bincount(c.y[c.labeled], minlength=10) - expected).max() < 1
    if gamma * min(sizes) >= 0.5:
        assert len(holders) == labeled_clients


@PROPS
@given(clients=st.integers(5, 20), per_client=st.integers(1, 4), seed=st.integers(0, 99))
def test_noniid_1_classes(clients, per_client, seed):
    fed = partition(DATA, scheme="noniid-1", num_clients=clients, seed=seed,
                    classes_per_client=per_client, labeled_fraction=0.2)
    check_disjoint(fed, len(DATA.y_train))
    for c in fed.clients:
        assert len(np.unique(c.y)) == per_client
        assert set(np.unique(c.y[c.labeled])) <= set(np.unique(c.y))
        assert c.num_labeled == round(0.2 * len(c))
    users = np.bincount(np.concatenate([np.unique(c.y) for c in fed.clients]), minlength=10)
    assert users.sum() == clients * per_client
    assert users.max() - users.min() <= 1


@PROPS
@given(clients=st.integers(5, 20), seed=st.integers(0, 99), gamma=st.floats(0.05, 0.5))
def test_noniid_2_labeled_two_classes_unlabeled_all(clients, seed, gamma):
    fed = partition(DATA, scheme="noniid-2", num_clients=clients, seed=seed,
                    labeled_fraction=gamma)
    check_disjoint(fed, len(DATA.y_train))
    assert sum(c.num_labeled for c in fed.clients) == round(gamma * len(DATA.y_train))
    for c in fed.clients:
        assert len(np.unique(c.y[c.labeled])) <= 2
        assert len(np.unique(c.y[~c.labeled])) == 10


def test_noniid_2_with_ample_labels_has_exactly_two_classes():
    fed = partition(DATA, scheme="noniid-2", num_clients=10, seed=1, labeled_fraction=0.3)
    assert all(len(np.unique(c.y[c.labeled])) == 2 for c in fed.clients)


@PROPS
@given(clients=st.integers(10, 40), seed=st.integers(0, 99))
def test_noniid_3_label_ratios(clients, seed):
    fed = partition(DATA, scheme="noniid-3", num_clients=clients, seed=seed)
    for c in fed.clients:
        assert c.num_labeled in (round(0.05 * len(c)), round(0.55 * len(c)))
        assert len(np.unique(c.y)) == 10
    rich = sum(1 for c in fed.clients if c.num_labeled == round(0.55 * len(c)))
    assert rich == clients // 10


@PROPS
@given(clients=st.integers(2, 20), labeled_clients=st.integers(1, 20), seed=st.integers(0, 99),
       alpha=st.floats(0.05, 10.0))
def test_fedprop_noniid(clients, labeled_clients, seed, alpha):
    labeled_clients = min(labeled_clients, clients)
    fed = partition(DATA, scheme="fedprop-noniid", num_clients=clients, seed=seed,
                    labeled_clients=labeled_clients, labeled_fraction=0.1,
                    dirichlet_alpha=alpha)
    check_disjoint(fed, len(DATA.y_train))
    size = len(DATA.y_train) // clients
    assert all(len(c) == size for c in fed.clients)
    assert sum(1 for c in fed.clients if c.num_labeled) == labeled_clients
    for c in fed.clients:
        if c.num_labeled:
            assert c.num_labeled == round(0.1 * size)
            expected = c.num_labeled * np.bincount(c.y, minlength=10) / len(c)
            assert np.abs(np.bincount(c.y[c.labeled], minlength=10) - expected).max() < 1


def test_fedprop_noniid_is_skewed():
    fed = partition(DATA, scheme="fedprop-noniid", num_clients=10, seed=0, dirichlet_alpha=0.1)
    top_share = [np.bincount(c.y).max() / len(c) for c in fed.clients]
    assert np.median(top_share) > 0.4


@PROPS
@given(clients=st.integers(2, 15), seed=st.integers(0, 99), alpha=st.floats(0.1, 100.0))
def test_dirichlet(clients, seed, alpha):
    fed = partition(DATA, scheme="dirichlet", num_clients=clients, seed=seed,
                    dirichlet_alpha=alpha, labeled_fraction=0.1)
    check_disjoint(fed, len(DATA.y_train))
    assert sum(len(c) for c in fed.clients) == len(DATA.y_train)
    assert all(len(c) > 0 for c in fed.clients)
    assert all(c.num_labeled == round(0.1 * len(c)) for c in fed.clients)


@PROPS
@given(clients=st.integers(2, 20), labeled_clients=st.integers(1, 20), seed=st.integers(0, 99),
       gamma=st.floats(0.02, 0.3))
def test_fedmatch_noniid(clients, labeled_clients, seed, gamma):
    labeled_clients = min(labeled_clients, clients)
    fed = partition(DATA, scheme="fedmatch-noniid", num_clients=clients, seed=seed,
                    labeled_clients=labeled_clients, labeled_fraction=gamma)
    check_disjoint(fed, len(DATA.y_train))
    budget = round(gamma * len(DATA.y_train))
    assert sum(c.num_labeled for c in fed.clients) == budget
    holders = [c for c in fed.clients if c.num_labeled]
    assert len(holders) <= labeled_clients
    labels = np.array([np.bincount(c.y[c.labeled], minlength=10) for c in holders])
    assert labels.max() - labels.min() <= 1  # class-balanced at every holder, as FedMatch
    unlabeled = [int((~c.labeled).sum()) for c in fed.clients]
    assert max(unlabeled) == min(unlabeled) == (len(DATA.y_train) - budget) // clients


FEDMATCH_TYPE_0 = [0.50, 0.15, 0.03, 0.03, 0.03, 0.02, 0.03, 0.03, 0.03, 0.15]  # generator.py, type 0


def test_fedmatch_noniid_follows_fedmatchs_ten_imbalance_types():
    y = np.repeat(np.arange(10), 1000)
    x = np.arange(len(y), dtype=np.float32)[:, None, None, None] * np.ones((1, 1, 2, 2), np.float32)
    data = Dataset("balanced", x, y, x[:10], y[:10], 10)
    fed = partition(data, scheme="fedmatch-noniid", num_clients=20, seed=0, labeled_fraction=0.1)
    assert all((np.bincount(c.y[c.labeled], minlength=10) == 5).all() for c in fed.clients)
    shares = np.array([np.bincount(c.y[~c.labeled], minlength=10) / (~c.labeled).sum()
                       for c in fed.clients])
    # the first ten clients (one of each type) draw from half-full class pools: no top-up
    for t, share in enumerate(shares[:10]):
        assert share.argmax() == t and 0.42 < share[t] < 0.58
        assert 0.09 < share[(t + 1) % 10] < 0.21 and 0.09 < share[(t - 1) % 10] < 0.21
        np.testing.assert_allclose(np.roll(share, -t), FEDMATCH_TYPE_0, atol=0.07)
    assert all(shares[:, :].max(axis=1) > 0.25)  # every client stays dominated by one class
    again = partition(data, scheme="fedmatch-noniid", num_clients=20, seed=0, labeled_fraction=0.1)
    assert all(np.array_equal(a.x, b.x) for a, b in zip(fed.clients, again.clients))


def test_fedmatch_noniid_needs_ten_classes():
    three = Dataset("three", DATA.x_train, DATA.y_train % 3, DATA.x_test, DATA.y_test % 3, 3)
    with pytest.raises(InputError, match="scheme"):
        partition(three, scheme="fedmatch-noniid", num_clients=4)


@PROPS
@given(scheme=st.sampled_from(["iid", "noniid-1", "noniid-2", "dirichlet", "fedprop-noniid",
                               "fedmatch-noniid"]),
       budget=st.integers(10, 100), seed=st.integers(0, 99))
def test_labels_at_server(scheme, budget, seed):
    fed = partition(DATA, scheme=scheme, num_clients=5, seed=seed, labels_at="server",
                    server_labels=budget)
    check_disjoint(fed, len(DATA.y_train))
    assert len(fed.server) == budget and fed.server.labeled.all()
    counts = np.bincount(fed.server.y, minlength=10)
    assert counts.max() - counts.min() <= 1
    assert all(c.num_labeled == 0 for c in fed.clients)
    assert fed.labeled_clients == []


def test_samples_per_client_and_reproducibility():
    one = partition(DATA, scheme="iid", num_clients=4, seed=3, samples_per_client=20)
    two = partition(DATA, scheme="iid", num_clients=4, seed=3, samples_per_client=20)
    other = partition(DATA, scheme="iid", num_clients=4, seed=4, samples_per_client=20)
    assert [len(c) for c in one.clients] == [20] * 4
    assert all(np.array_equal(a.x, b.x) and np.array_equal(a.labeled, b.labeled)
               for a, b in zip(one.clients, two.clients))
    assert not all(np.array_equal(a.x, b.x) for a, b in zip(one.clients, other.clients))


@pytest.mark.parametrize("kwargs, parameter", [
    ({"scheme": "pathological"}, "scheme"),
    ({"num_clients": 0}, "num_clients"),
    ({"labeled_fraction": 1.5}, "labeled_fraction"),
    ({"labeled_clients": 11}, "labeled_clients"),
    ({"scheme": "noniid-1", "classes_per_client": 11}, "classes_per_client"),
    ({"dirichlet_alpha": 0.0}, "dirichlet_alpha"),
    ({"labels_at": "nowhere"}, "labels_at"),
    ({"labels_at": "server", "server_labels": 0}, "server_labels"),
])
def test_bad_arguments(kwargs, parameter):
    options = {"scheme": "iid", "num_clients": 10, "seed": 0, **kwargs}
    with pytest.raises(InputError, match=parameter):
        partition(DATA, **options)


def test_iid_leftover_labels_are_not_all_given_to_the_low_classes():
    """Equal classes, 1.4 labels per class per client: the 4 leftover labels of each client
    go to randomly ranked classes, so no class ends with one label at every client (the
    class-index tie-break gave classes 0-3 twenty labels and 4-9 ten)."""
    y = np.repeat(np.arange(10), 140)
    x = np.arange(len(y), dtype=np.float32)[:, None, None, None] * np.ones((1, 1, 2, 2), np.float32)
    data = Dataset("equal", x, y, x[:10], y[:10], 10)
    fed = partition(data, scheme="iid", num_clients=10, labeled_fraction=0.1, seed=5)
    per_client = np.array([np.bincount(c.y[c.labeled], minlength=10) for c in fed.clients])
    assert (per_client.sum(axis=1) == 14).all() and set(np.unique(per_client)) == {1, 2}
    totals = per_client.sum(axis=0)
    assert totals.sum() == 140 and totals.min() > 10 and totals.max() < 20


@PROPS
@given(scheme=st.sampled_from(["iid", "noniid-1", "noniid-2", "noniid-3", "dirichlet",
                               "fedprop-noniid"]),
       fraction=st.floats(0.01, 0.5), seed=st.integers(0, 99),
       labels_at=st.sampled_from(["clients", "server"]))
def test_validation_split_is_held_out_before_the_split(scheme, fraction, seed, labels_at):
    """The validation set: round(f N) points, class-stratified, disjoint from every client
    and the anchor set, and the same points whatever the scheme or where the labels are."""
    fed = partition(DATA, scheme=scheme, num_clients=5, seed=seed, labeled_fraction=0.2,
                    labels_at=labels_at, validation_fraction=fraction)
    held = fed.validation.x[:, 0, 0, 0].astype(np.int64)
    assert len(held) == round(fraction * len(DATA.y_train)) == fed.info["validation_size"]
    assert np.array_equal(fed.validation.y, DATA.y_train[held])
    check_disjoint(fed, len(DATA.y_train))
    trained = np.concatenate([ids(c) for c in fed.clients] +
                             ([ids(fed.server)] if fed.server is not None else []))
    assert not np.isin(held, trained).any()
    if scheme in ("iid", "noniid-3", "dirichlet"):
        assert len(trained) == len(DATA.y_train) - len(held)
    expected = len(held) * np.bincount(DATA.y_train, minlength=10) / len(DATA.y_train)
    assert np.abs(np.bincount(fed.validation.y, minlength=10) - expected).max() < 1
    other = partition(DATA, scheme="iid", num_clients=3, seed=seed, validation_fraction=fraction)
    assert np.array_equal(other.validation.x, fed.validation.x)
    assert np.array_equal(fed.test.y, DATA.y_test) and fed.for_training().test is None


def test_no_validation_split_leaves_the_partition_as_it_was():
    plain = partition(DATA, scheme="noniid-2", num_clients=6, seed=4, labeled_fraction=0.2)
    zero = partition(DATA, scheme="noniid-2", num_clients=6, seed=4, labeled_fraction=0.2,
                     validation_fraction=0.0)
    held = partition(DATA, scheme="noniid-2", num_clients=6, seed=4, labeled_fraction=0.2,
                     validation_fraction=0.1)
    assert plain.validation is None and zero.validation is None
    assert all(np.array_equal(a.x, b.x) and np.array_equal(a.labeled, b.labeled)
               for a, b in zip(plain.clients, zero.clients))
    assert sum(len(c) for c in held.clients) < sum(len(c) for c in plain.clients)
    assert held.validation.x.shape[1:] == DATA.x_train.shape[1:]


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_bad_validation_fraction(fraction):
    with pytest.raises(InputError, match="validation_fraction"):
        partition(DATA, scheme="iid", num_clients=4, seed=0, validation_fraction=fraction)


def test_training_view_holds_no_held_out_data():
    fed = partition(DATA, scheme="iid", num_clients=4, seed=0, validation_fraction=0.1)
    view = fed.for_training()
    assert view.test is None and view.validation is None
    assert view.clients is fed.clients and fed.test is not None and fed.validation is not None
