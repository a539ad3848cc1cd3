"""One exception hierarchy for the whole toolkit.

Every error names the offending parameter and value, so a caller can tell *what* was
wrong without reading a traceback.  Catch :class:`SecureFLError` to catch them all.
"""

from __future__ import annotations

from typing import Any


class SecureFLError(Exception):
    """Base class of every error raised on purpose by securefl."""


class InputError(SecureFLError, ValueError):
    """A caller passed a bad argument (shape, dtype, range, consistency).

    ``InputError("codes", value, "must be 0/1")`` renders as
    ``codes=<value>: must be 0/1``.
    """

    def __init__(self, parameter: str, value: Any, problem: str) -> None:
        self.parameter = parameter
        self.value = value
        self.problem = problem
        super().__init__(f"{parameter}={_short(value)}: {problem}")


class ProtocolError(SecureFLError):
    """A protocol message was malformed, tampered with, replayed, out of order or for the
    wrong peer/round.  The protocol aborts; no partial or wrong output is returned."""


class DropoutError(SecureFLError):
    """Too many parties dropped out for the protocol to finish (fewer than ``threshold``
    survivors); no partial result is returned."""


class PlatformError(SecureFLError):
    """This machine cannot run a protocol exactly (e.g. its float64 matrix product is not
    exact on integers below 2^53); the protocol refuses to start rather than risk a wrong
    result."""


class DataError(SecureFLError):
    """A dataset file is missing, truncated, corrupted or fails its checksum."""


class ConfigError(SecureFLError):
    """An experiment configuration is invalid (unknown method/dataset, bad value, unreadable file)."""


def _short(value: Any, limit: int = 80) -> str:
    """A short repr: arrays show shape and dtype rather than their contents."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"<array shape={tuple(shape)} dtype={dtype}>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
