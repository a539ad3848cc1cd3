"""A party's dict fields round-trip through the state Record exactly, stacked where their
values share one shape (one array instead of one per peer), field by field otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from securefl.runtime.state_codec import load, save
from securefl.runtime.transport import Record


@dataclass
class _Party:
    held: dict = field(default_factory=dict)
    peers: dict = field(default_factory=dict)
    mixed: dict = field(default_factory=dict)


def test_dicts_of_like_values_are_stacked_and_round_trip_exactly():
    party = _Party({5: np.arange(8, dtype=np.uint64), 2: np.full(8, 7, np.uint64)},
                   {9: (b"c" * 32, b"s" * 32), 1: (b"C" * 32, b"S" * 32)},
                   {3: np.zeros(2), 4: np.zeros(3)})
    record = Record()
    save(party, record, "p/")
    assert record.config["p/held#"] == "dict:arrays" and record.arrays["p/held"].shape == (2, 8)
    assert record.config["p/peers#"] == "dict:bytes" and record.arrays["p/peers"].shape == (2, 2, 32)
    assert record.config["p/mixed#"] == "dict"  # shapes differ: one entry per value
    back = load(_Party, record.copy(), "p/")
    assert list(back.held) == [5, 2] and list(back.peers) == [9, 1]
    for key, value in party.held.items():
        assert back.held[key].dtype == value.dtype and np.array_equal(back.held[key], value)
        assert back.held[key].flags.writeable
    assert back.peers == party.peers and all(isinstance(b, bytes) for v in back.peers.values() for b in v)
    assert [a.shape for a in back.mixed.values()] == [(2,), (3,)]
