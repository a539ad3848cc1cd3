"""The base of every method's hyper-parameters: a frozen dataclass that checks each value
when built, and the checks its fields are declared with.

One dataclass per method, in the method's package (``securefl/methods/<name>/hyper.py``,
next to its ``server.py`` and ``client.py``): a field per hyper-parameter keyword of the
method's constructor, with its type, the paper's default (the same as the constructor's: a
test compares them) and its check.  Building one (:func:`securefl.methods.build_hyper`) checks every value and
the constraints between values that need no data, so ``securefl run`` refuses a bad
hyper-parameter in its validation, before any data is loaded or any file is written;
what needs the data (ProtoFSSL's ``norm`` against the concrete backbone, which labels a
federation holds) stays in the method's ``setup``.  These dataclasses are the one place a
hyper-parameter is checked: a method does not re-check them, its ``setup`` rebuilds its
dataclass from its current values first (:meth:`securefl.methods.base.Method.check_hyper`),
so a method built directly is refused with the same error.

A field is declared with :func:`hp` (default and checks).  A check is a function of the
value returning the problem (a phrase such as ``"must be an integer >= 1"``) or ``None``;
:func:`integer`, :func:`number`, :func:`choice` and :data:`flag` make the usual ones, and
``optional(check)`` lets ``None`` through.  A constraint between fields goes into
:meth:`Hyper.check_together`.  A failed check raises
:class:`~securefl.errors.InputError` naming the field and the value; the registry names it
``hyper.<method>.<key>`` (the path of ``securefl run --set``).

A method registered without a dataclass of its own gets one derived from its constructor
(:func:`derived_hyper`): the same fields and defaults, each checked against its annotated
type only (``int``, ``float``, ``bool``, ``str``, ``X | None``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

import numpy as np

from securefl.errors import InputError
from securefl.models import MODEL_NAMES

RUN_PARAMETERS = ("secure", "seed", "crypto_seed", "sum_backend", "device")
"""Keywords every method takes that are set by the run, not hyper-parameters."""

Check = Callable[[Any], "str | None"]
"""A check of one value: the problem with it, or ``None`` when it is good."""

def hp(default: Any, *checks: Check) -> Any:
    """A hyper-parameter field: ``default`` and the ``checks`` its value must pass."""
    return field(default=default, metadata={"checks": checks})


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, (float, np.floating))) and math.isfinite(value)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """``in [low, high)``, ``>= low``, ``< high`` ... (empty without bounds)."""
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high:g}"
    return ""


def _bounded(kind: Callable[[Any], bool], wanted: str, low: float | None, high: float | None,
             low_open: bool, high_open: bool) -> Check:
    """The check of a value of ``kind`` between the bounds; the problem is ``wanted`` and
    the interval."""
    problem = " ".join(part for part in (wanted, _interval(low, high, low_open, high_open)) if part)

    def check(value: Any) -> str | None:
        if not kind(value):
            return problem
        if low is not None and (value <= low if low_open else value < low):
            return problem
        if high is not None and (value >= high if high_open else value > high):
            return problem
        return None

    return check


def integer(low: int | None = None, high: int | None = None) -> Check:
    """An integer (not a bool) in ``[low, high)`` (either bound may be left out)."""
    return _bounded(_is_int, "must be an integer", low, high, False, True)


def number(low: float | None = None, high: float | None = None, *,
           low_open: bool = False, high_open: bool = False) -> Check:
    """A finite number (int or float, not a bool) between ``low`` and ``high`` (closed
    bounds unless ``low_open`` / ``high_open``; either may be left out)."""
    return _bounded(_is_real, "must be a number", low, high, low_open, high_open)


def choice(options: tuple[str, ...]) -> Check:
    """One of the strings ``options``."""
    def check(value: Any) -> str | None:
        return None if isinstance(value, str) and value in options else f"must be one of {', '.join(options)}"

    return check


def flag(value: Any) -> str | None:
    """True or false (a bool)."""
    return None if isinstance(value, (bool, np.bool_)) else "must be true or false"


def optional(check: Check) -> Check:
    """``None``, or a value that passes ``check``."""
    def optional_check(value: Any) -> str | None:
        if value is None:
            return None
        problem = check(value)
        return None if problem is None else f"{problem}, or None"

    return optional_check


@dataclass(frozen=True)
class Hyper:
    """Base of the hyper-parameter dataclasses: building one checks every field (module
    docstring), then :meth:`check_together`."""

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            for check in spec.metadata.get("checks", ()):
                problem = check(value)
                if problem is not None:
                    raise InputError(spec.name, value, problem)
        self.check_together()

    def check_together(self) -> None:
        """Constraints between fields (subclasses); raise InputError naming one of them."""

    def keywords(self) -> dict[str, Any]:
        """The hyper-parameters as constructor keywords (values as given, not copied)."""
        return {spec.name: getattr(self, spec.name) for spec in fields(self)}


def hyper_error(method: str, error: InputError) -> InputError:
    """``error`` of a field, renamed ``hyper.<method>.<field>`` (the ``--set`` path)."""
    return InputError(f"hyper.{method}.{error.parameter}", error.value, error.problem)


# ----------------------------------------------------------------- shared groups
MODEL = hp("auto", choice(MODEL_NAMES))
POSITIVE = number(0.0, low_open=True)
NON_NEGATIVE = number(0.0)
PROBABILITY_BELOW_ONE = number(0.0, 1.0, high_open=True)
SHIFT = hp(None, optional(integer(0)))


# ----------------------------------------------------------------- derived
_TYPE_CHECKS: dict[str, Check] = {
    "int": integer(), "float": number(), "bool": flag,
    "str": lambda value: None if isinstance(value, str) else "must be a string",
}


def _annotation_check(annotation: Any) -> tuple[Check, ...]:
    """The type check of a constructor annotation such as ``"int | None"`` (none where
    the annotation is not one of the simple types)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    parts = [part.strip() for part in text.split("|")]
    allows_none = "None" in parts
    parts = [part for part in parts if part != "None"]
    if len(parts) != 1 or parts[0] not in _TYPE_CHECKS:
        return ()
    check = _TYPE_CHECKS[parts[0]]
    return (optional(check),) if allows_none else (check,)


def constructor_keywords(method: type) -> dict[str, inspect.Parameter]:
    """The keyword-only parameters of ``method``'s constructor, those it passes on as
    ``**keywords`` to its base classes' included (first declaration wins), by name; not
    those the method fixes itself (its ``fixed_keywords``)."""
    found: dict[str, inspect.Parameter] = {}
    fixed = set(getattr(method, "fixed_keywords", ()))  # set by the method, not a hyper-parameter
    for klass in method.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        parameters = inspect.signature(init).parameters.values()
        for parameter in parameters:
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.name not in fixed:
                found.setdefault(parameter.name, parameter)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            break
    return found


def derived_hyper(method: type) -> type[Hyper]:
    """A :class:`Hyper` dataclass for ``method``'s constructor: one field per keyword-only
    hyper-parameter (:func:`constructor_keywords`, not :data:`RUN_PARAMETERS`), its
    default, a check of its annotated type (see the module docstring)."""
    specs = []
    for name, parameter in constructor_keywords(method).items():
        if name in RUN_PARAMETERS:
            continue
        if parameter.default is inspect.Parameter.empty:
            specs.append((name, Any, field(kw_only=True)))
            continue
        specs.append((name, Any, hp(parameter.default, *_annotation_check(parameter.annotation))))
    return make_dataclass(f"{method.__name__}Hyper", specs, bases=(Hyper,), frozen=True)
