"""A :class:`~securefl.runtime.records.Record` as a Flower ``RecordDict`` and back.

One ``ArrayRecord`` (``securefl.arrays``) holds the arrays, one ``ConfigRecord``
(``securefl.config``) the config.  Arrays travel as Flower ``Array`` objects (``.npy``
bytes, chunked by Flower at 5 MiB); config values keep their Python types (int, float,
bool, str, bytes).  The same mapping stores a client's state in ``Context.state``.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from securefl.errors import ProtocolError
from securefl.runtime.transport import Record

ARRAYS = "securefl.arrays"
CONFIG = "securefl.config"


def to_recorddict(record: Record) -> RecordDict:
    """``record`` (checked) as a RecordDict."""
    record.check()
    arrays = ArrayRecord({name: Array(np.ascontiguousarray(a)) for name, a in record.arrays.items()})
    config = ConfigRecord({name: (v.item() if isinstance(v, np.generic) else v)
                           for name, v in record.config.items()})
    return RecordDict({ARRAYS: arrays, CONFIG: config})


def from_recorddict(records: RecordDict) -> Record:
    """The Record stored by :func:`to_recorddict` (a missing part is empty)."""
    try:
        arrays = {name: array.numpy() for name, array in records[ARRAYS].items()} \
            if ARRAYS in records else {}
        config = dict(records[CONFIG].items()) if CONFIG in records else {}
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed securefl record: {exc}") from None
    return Record(arrays, config).check()


def store(records: RecordDict, record: Record) -> None:
    """Replace the securefl entries of ``records`` (a Context.state) by ``record``."""
    converted = to_recorddict(record)
    records[ARRAYS] = converted[ARRAYS]
    records[CONFIG] = converted[CONFIG]
