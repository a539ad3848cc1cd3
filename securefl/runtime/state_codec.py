"""A protocol party's state as a :class:`~securefl.runtime.records.Record`, and back.

Flower runs a fresh ClientApp process per message, so a sans-I/O party that lives across
protocol rounds (a :class:`~securefl.crypto.secagg.SecAggClient`, a CrossClientLP client)
must be written into the client's state Record after each round and rebuilt before the
next.  :func:`save` walks the party's dataclass fields and stores each value under
``<prefix><field>`` by its runtime type:

=============================  ======================================================
value                          stored as
=============================  ======================================================
``None``, bool, int, float,    config scalar
short str
bytes                          ``uint8`` array
numpy array                    array
X25519 private key             its 32 raw bytes (``uint8`` array)
tuple of ints (non-empty)      one int64 array (a cohort's roster ids)
tuple / list                   each element under ``<name>/<i>``
dict with int keys             ``<name>#keys`` (int64) and, when every value is an array
                               of one shape and dtype, all of them stacked as one array
                               ``<name>``; when every value is a tuple of byte strings of one
                               length and count, one ``uint8`` array ``<name>`` (keys x count
                               x length); otherwise each value under ``<name>/<key>``
dataclass in :data:`NESTED`    each field under ``<name>/<field>``
=============================  ======================================================

plus a kind marker ``<name>#`` in config.  Any other type raises :class:`InputError`, so
a party that gains a field of a new kind fails loudly in the round-trip tests instead of
losing state silently.  Fields named in ``skip`` (a party's randomness source, which is
the OS CSPRNG again in the next process) are not stored; :func:`load` takes them as
keywords.

The private keys stored here never leave the client: the state Record is kept by the
client's own SuperNode (``Context.state``), not sent to the server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefl.crypto.secagg import SecAggConfig
from securefl.errors import InputError, ProtocolError
from securefl.runtime.records import CONFIG_VALUE_LIMIT, Record

NESTED: dict[str, type] = {"SecAggConfig": SecAggConfig}
"""Dataclasses stored field by field inside a party's state."""


def save(party: Any, record: Record, prefix: str, *, skip: Iterable[str] = ()) -> None:
    """Store every dataclass field of ``party`` (except ``skip``) in ``record``."""
    if not dataclasses.is_dataclass(party):
        raise InputError("party", type(party).__name__, "must be a dataclass instance")
    skipped = set(skip)
    for f in dataclasses.fields(party):
        if f.name not in skipped:
            _put(record, prefix + f.name, getattr(party, f.name))


def load(cls: type, record: Record, prefix: str, **extra: Any) -> Any:
    """Rebuild a ``cls`` saved by :func:`save`; ``extra`` supplies the skipped fields."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in extra:
            values[f.name] = extra[f.name]
        elif f.init:
            values[f.name] = _get(record, prefix + f.name)
    return cls(**values)


def _put(record: Record, name: str, value: Any) -> None:
    kind = f"{name}#"
    if value is None:
        record.config[kind] = "none"
    elif isinstance(value, (bool, int, float, np.integer, np.floating)) or (
            isinstance(value, str) and len(value) <= CONFIG_VALUE_LIMIT):
        record.config[kind] = "scalar"
        record.config[name] = value.item() if isinstance(value, np.generic) else value
    elif isinstance(value, (bytes, bytearray)):
        record.config[kind] = "bytes"
        record.arrays[name] = np.frombuffer(bytes(value), dtype=np.uint8).copy()
    elif isinstance(value, np.ndarray):
        record.config[kind] = "array"
        record.arrays[name] = np.array(value, copy=True)
    elif isinstance(value, X25519PrivateKey):
        record.config[kind] = "x25519"
        record.arrays[name] = np.frombuffer(value.private_bytes_raw(), dtype=np.uint8).copy()
    elif isinstance(value, tuple) and value and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        record.config[kind] = "ints"
        record.arrays[name] = np.array(value, dtype=np.int64)
    elif isinstance(value, (tuple, list)):
        record.config[kind] = f"{type(value).__name__}:{len(value)}"
        for i, item in enumerate(value):
            _put(record, f"{name}/{i}", item)
    elif isinstance(value, dict):
        keys = list(value)
        if not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in keys):
            raise InputError(name, keys, "only dicts with integer keys can be stored")
        record.arrays[f"{name}#keys"] = np.array(keys, dtype=np.int64)
        values = [value[k] for k in keys]
        if _same_arrays(values):
            record.config[kind] = "dict:arrays"
            record.arrays[name] = np.stack(values)
        elif _same_byte_tuples(values):
            record.config[kind] = "dict:bytes"
            record.arrays[name] = np.frombuffer(b"".join(b"".join(v) for v in values), np.uint8
                                                ).reshape(len(values), len(values[0]), -1).copy()
        else:
            record.config[kind] = "dict"
            for k in keys:
                _put(record, f"{name}/{int(k)}", value[k])
    elif dataclasses.is_dataclass(value) and type(value).__name__ in NESTED:
        record.config[kind] = f"dataclass:{type(value).__name__}"
        for f in dataclasses.fields(value):
            _put(record, f"{name}/{f.name}", getattr(value, f.name))
    else:
        raise InputError(name, type(value).__name__, "no state encoding for this type")


def _get(record: Record, name: str) -> Any:
    try:
        kind = str(record.config[f"{name}#"])
        if kind == "none":
            return None
        if kind == "scalar":
            return record.config[name]
        if kind == "bytes":
            return np.asarray(record.arrays[name], dtype=np.uint8).tobytes()
        if kind == "array":
            return np.array(record.arrays[name], copy=True)
        if kind == "x25519":
            return X25519PrivateKey.from_private_bytes(np.asarray(record.arrays[name]).tobytes())
        if kind == "ints":
            return tuple(int(v) for v in np.asarray(record.arrays[name], dtype=np.int64))
        if kind.startswith(("tuple:", "list:")):
            container, count = kind.split(":")
            items = [_get(record, f"{name}/{i}") for i in range(int(count))]
            return tuple(items) if container == "tuple" else items
        if kind == "dict":
            return {int(k): _get(record, f"{name}/{int(k)}") for k in record.arrays[f"{name}#keys"]}
        if kind == "dict:arrays":
            stacked = record.arrays[name]
            return {int(k): np.array(stacked[i], copy=True)
                    for i, k in enumerate(record.arrays[f"{name}#keys"])}
        if kind == "dict:bytes":
            stacked = np.asarray(record.arrays[name], dtype=np.uint8)
            return {int(k): tuple(row.tobytes() for row in stacked[i])
                    for i, k in enumerate(record.arrays[f"{name}#keys"])}
        if kind.startswith("dataclass:"):
            cls = NESTED[kind.split(":", 1)[1]]
            return cls(**{f.name: _get(record, f"{name}/{f.name}")
                          for f in dataclasses.fields(cls) if f.init})
    except KeyError as missing:
        raise ProtocolError(f"client state incomplete: {missing} missing") from None
    raise ProtocolError(f"client state: unknown kind {kind!r} for {name!r}")


def _same_arrays(values: list[Any]) -> bool:
    """Whether ``values`` are arrays of one shape and plain dtype (stored stacked)."""
    return bool(values) and all(isinstance(v, np.ndarray) for v in values) and len(
        {(v.shape, v.dtype.str) for v in values}) == 1 and not values[0].dtype.hasobject


def _same_byte_tuples(values: list[Any]) -> bool:
    """Whether ``values`` are non-empty tuples of byte strings, all of one count and one
    non-zero length (stored as one uint8 array)."""
    if not values or not all(isinstance(v, tuple) and v for v in values):
        return False
    width = len(values[0][0])
    return width > 0 and all(len(v) == len(values[0]) and all(
        isinstance(b, bytes) and len(b) == width for b in v) for v in values)
