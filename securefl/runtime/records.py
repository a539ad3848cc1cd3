"""Records: what crosses a transport or persists between messages, and one exchange's outcome.

**Everything that crosses is a** :class:`Record`: named numpy arrays plus a small config of
scalars (int, float, bool, str, short bytes).  Bulk data (models, protocol frames) is
always an array; :meth:`Record.check` refuses config strings or bytes longer than
:data:`CONFIG_VALUE_LIMIT` so a frame cannot slip into config bytes.  On Flower a Record is
one ``ArrayRecord`` and one ``ConfigRecord`` (:func:`securefl.fl.flower.records`).  A
client's state between messages is a Record too (:mod:`securefl.runtime.transport`).

**Protocol frames map onto messages** as follows: a sans-I/O party's
:class:`~securefl.crypto.channel.Message` to or from the server is put into a Record
(:func:`put_message` / :func:`take_message`: its arrays under ``<slot>/<i>``, its tag and
endpoints in config); a missing or partial one is a :class:`~securefl.errors.ProtocolError`.

**One exchange = one message round**: an :class:`Exchange` holds the ``replies`` (client ->
Record), the clients that did not answer before the timeout (``dropped``) and those that
raised (``failed``, their error text), with the exchange's wall time and each client's
handler time.

This module imports nothing of its room: every other module of :mod:`securefl.runtime`
(the transport, the driver, the state codec, the links, the secure sums) builds on it.
Who learns what: a Record is what it carries; nothing is added or hidden here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from securefl.crypto.channel import Message
from securefl.errors import InputError, ProtocolError

ConfigValue = int | float | bool | str | bytes
CONFIG_VALUE_LIMIT = 256
"""Longest str (characters) or bytes value a Record's config may hold; bulk goes in arrays."""


@dataclass
class Record:
    """What crosses a transport or persists between messages: arrays plus small config."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    config: dict[str, ConfigValue] = field(default_factory=dict)

    def check(self) -> Record:
        """Validate names and types; returns ``self``."""
        for name, array in self.arrays.items():
            if not isinstance(name, str) or not name:
                raise InputError("arrays", name, "array names must be non-empty strings")
            if not isinstance(array, np.ndarray) or array.dtype.hasobject:
                raise InputError(f"arrays[{name!r}]", array, "must be a numpy array of a plain dtype")
        for name, value in self.config.items():
            if not isinstance(name, str) or not name:
                raise InputError("config", name, "config names must be non-empty strings")
            if isinstance(value, (bool, int, float, np.integer, np.floating)):
                continue
            if isinstance(value, (str, bytes)):
                if len(value) > CONFIG_VALUE_LIMIT:
                    raise InputError(
                        f"config[{name!r}]", value,
                        f"longer than {CONFIG_VALUE_LIMIT}: bulk data must travel as an array",
                    )
                continue
            raise InputError(f"config[{name!r}]", value, "must be int, float, bool, str or bytes")
        return self

    def copy(self, *, writable: bool = False) -> Record:
        """A deep copy (arrays copied, C-contiguous, read-only unless ``writable``)."""
        return Record({name: _copied(array, writable=writable) for name, array in self.arrays.items()},
                      dict(self.config))

    def frozen(self, *, take_over: bool = False) -> Record:
        """This record with every array read-only, copying only what someone could still
        write: an array is shared when it and every array it views are read-only; with
        ``take_over``, a writable array that owns its data is made read-only in place (use
        it only on what an I/O-free handler has just returned: its producer keeps no
        reference); anything else is copied.  Same content as :meth:`copy`."""
        arrays = {}
        for name, array in self.arrays.items():
            if (take_over and array.flags.writeable and array.flags.owndata
                    and array.flags.c_contiguous):
                array.setflags(write=False)
            arrays[name] = array if _read_only(array) else _copied(array, writable=False)
        return Record(arrays, dict(self.config))

    @property
    def nbytes(self) -> int:
        """Payload bytes: array data plus config values (what a transport must move)."""
        total = sum(int(a.nbytes) for a in self.arrays.values())
        for name, value in self.config.items():
            total += len(name) + (len(value) if isinstance(value, (str, bytes)) else 8)
        return total


def _copied(array: np.ndarray, *, writable: bool) -> np.ndarray:
    """A C-contiguous copy of ``array``, read-only unless ``writable``."""
    copied = np.array(array, copy=True, order="C")
    copied.setflags(write=writable)
    return copied


def _read_only(array: np.ndarray) -> bool:
    """Whether no one can write ``array``'s memory: it and every ndarray it views are
    read-only and C-contiguous at the top (a view into ``bytes`` counts: bytes are immutable)."""
    if not array.flags.c_contiguous:
        return False
    while isinstance(array, np.ndarray):
        if array.flags.writeable:
            return False
        array = array.base
    return array is None or isinstance(array, bytes)


def put_message(record: Record, slot: str, message: Message) -> None:
    """Store a protocol message under ``slot`` (arrays ``slot/0..``, header in config)."""
    for i, array in enumerate(message.arrays):
        record.arrays[f"{slot}/{i}"] = np.asarray(array)
    record.config[f"{slot}/tag"] = message.tag
    record.config[f"{slot}/sender"] = int(message.sender)
    record.config[f"{slot}/receiver"] = int(message.receiver)
    record.config[f"{slot}/count"] = len(message.arrays)


def take_message(record: Record, slot: str) -> Message:
    """The protocol message stored under ``slot``; a missing or partial one: ProtocolError."""
    try:
        count = int(record.config[f"{slot}/count"])
        arrays = tuple(record.arrays[f"{slot}/{i}"] for i in range(count))
        return Message(int(record.config[f"{slot}/sender"]), int(record.config[f"{slot}/receiver"]),
                       str(record.config[f"{slot}/tag"]), arrays)
    except KeyError as missing:
        raise ProtocolError(f"message slot {slot!r} incomplete: {missing} missing") from None


def has_message(record: Record, slot: str) -> bool:
    """Whether ``record`` holds a protocol message under ``slot``."""
    return f"{slot}/count" in record.config


@dataclass
class Exchange:
    """Outcome of one message round: replies, clients that timed out, clients that raised."""

    step: str
    replies: dict[int, Record]
    dropped: tuple[int, ...] = ()
    failed: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0
    client_seconds: dict[int, float] = field(default_factory=dict)

    @property
    def answered(self) -> tuple[int, ...]:
        """The clients that replied, ascending."""
        return tuple(sorted(self.replies))
