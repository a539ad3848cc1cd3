"""Client sampling: uniform, and FedProp's labeled/unlabeled rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.errors import InputError
from securefl.fl import sample_clients


@settings(max_examples=30, deadline=None)
@given(m=st.integers(2, 200), frac=st.floats(0.01, 1.0), m_l=st.integers(1, 200),
       seed=st.integers(0, 1000))
def test_fedprop_rule(m, frac, m_l, seed):
    per_round = max(1, min(m, round(frac * m)))
    m_l = min(m_l, m)
    labeled = np.random.default_rng(seed).choice(m, size=m_l, replace=False)
    chosen = sample_clients(np.random.default_rng(seed), m, per_round, labeled=labeled)
    assert len(chosen) == per_round == len(np.unique(chosen))
    assert np.all(np.diff(chosen) > 0) and chosen.min() >= 0 and chosen.max() < m
    n_lab = int(np.isin(chosen, labeled).sum())
    assert n_lab >= 1
    if m_l < m:
        tau = per_round / m
        want = min(m_l, per_round, max(1, round(tau * m_l)))
        assert n_lab == max(want, per_round - (m - m_l))


def test_paper_example_half_labeled():
    labeled = np.arange(50)
    for seed in range(20):
        chosen = sample_clients(np.random.default_rng(seed), 100, 10, labeled=labeled)
        assert (chosen < 50).sum() == 5


def test_uniform_and_seeded():
    a = sample_clients(np.random.default_rng(1), 100, 10)
    b = sample_clients(np.random.default_rng(1), 100, 10)
    assert np.array_equal(a, b)
    hits = np.zeros(20)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        hits[sample_clients(rng, 20, 5)] += 1
    assert np.abs(hits / 2000 - 0.25).max() < 0.05


def test_bad_count():
    with pytest.raises(InputError, match="clients_per_round"):
        sample_clients(np.random.default_rng(0), 5, 6)
