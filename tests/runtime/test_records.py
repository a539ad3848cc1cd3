"""Record.frozen: what the in-process transport hands on is read-only, and a copy exactly
when someone could still write the memory."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.runtime.records import Record


def test_frozen_copies_what_its_owner_can_still_write():
    owned = np.arange(6, dtype=np.int64)
    record = Record({"a": owned}, {"k": 1})
    frozen = record.frozen()
    owned[0] = 99  # the sender reuses its buffer after sending
    assert frozen.arrays["a"][0] == 0
    assert not frozen.arrays["a"].flags.writeable
    assert owned.flags.writeable
    assert frozen.config == {"k": 1}


def test_frozen_shares_read_only_memory_and_copies_read_only_views_of_writable_memory():
    base = np.arange(8, dtype=np.uint8)
    locked = base.copy()
    locked.setflags(write=False)
    view = base[:4]
    view.setflags(write=False)  # read-only view, but its base is writable
    frozen = Record({"locked": locked, "view": view,
                     "bytes": np.frombuffer(b"abcd", dtype=np.uint8)}).frozen()
    assert frozen.arrays["locked"] is locked
    assert frozen.arrays["bytes"].base is not None
    assert not np.shares_memory(frozen.arrays["view"], base)
    base[0] = 7
    assert frozen.arrays["view"][0] == 0


def test_take_over_freezes_a_fresh_array_in_place_and_writes_to_it_then_fail():
    fresh = np.zeros(5)
    frozen = Record({"a": fresh}).frozen(take_over=True)
    assert frozen.arrays["a"] is fresh
    with pytest.raises(ValueError, match="read-only"):
        fresh[0] = 1.0


def test_non_contiguous_arrays_are_copied_contiguous():
    strided = np.arange(12).reshape(3, 4)[:, ::2]
    strided.setflags(write=False)
    frozen = Record({"s": strided}).frozen(take_over=True)
    assert frozen.arrays["s"].flags.c_contiguous
    np.testing.assert_array_equal(frozen.arrays["s"], strided)
