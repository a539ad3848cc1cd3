"""Every method's outputs equal the frozen record of ``tests/methods/regression/outputs.json``
(written at main d1acd75, before the method split): model digests after setup and after
each round, test predictions and accuracy, pseudo-label digests and accuracy, bytes per
client and privacy accounting, in plaintext and in real mode (fixed crypto seed).

A refactor that changes any bit of any of these fails here; the record is never rewritten
to make this test pass (see :mod:`tests.methods.regression.outputs`).
"""

from __future__ import annotations

import json

import pytest

from securefl.methods import METHOD_NAMES

from .regression.outputs import FIXTURE, MODES, federations, record


@pytest.fixture(scope="module")
def frozen():
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def feds():
    return federations()


def test_the_record_covers_every_method_and_mode(frozen):
    assert sorted(frozen) == sorted(f"{name}/{mode}" for name in METHOD_NAMES for mode in MODES)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", METHOD_NAMES)
def test_outputs_equal_the_frozen_record(name, mode, frozen, feds):
    expected = frozen[f"{name}/{mode}"]
    actual = json.loads(json.dumps(record(name, mode, feds)))
    assert len(actual) == len(expected)
    for ours, theirs in zip(actual, expected):
        assert ours == theirs, (name, mode, ours["round"],
                                {k: (ours.get(k), theirs.get(k)) for k in theirs
                                 if ours.get(k) != theirs.get(k)})
