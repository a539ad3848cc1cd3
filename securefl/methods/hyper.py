"""The base of every method's hyper-parameters: a frozen dataclass that checks each value
when built, and the checks its fields are declared with.

One dataclass per method, in the method's package (``securefl/methods/<name>/hyper.py``,
next to its ``server.py`` and ``client.py``): a field per hyper-parameter, with its type,
the paper's default and its check.  It is the one declaration of the method's
hyper-parameters: the method class names it (``hyper``, :class:`securefl.methods.Method`)
and takes exactly its fields as keyword-only constructor keywords, with its defaults
(the class's signature lists them).  Building one (:func:`securefl.methods.build_hyper`)
checks every value and the constraints between values that need no data, so
``securefl run`` refuses a bad hyper-parameter in its validation, before any data is
loaded or any file is written; what needs the data (ProtoFSSL's ``norm`` against the
concrete backbone, which labels a federation holds) stays in the method's ``setup``.
These dataclasses are the one place a hyper-parameter is checked: a method's constructor
builds its dataclass from the keywords it is given, and its ``setup`` rebuilds it from its
current values first (:meth:`securefl.methods.base.Method.check_hyper`), so a method built
directly, or changed after it was built, is refused with the same error.

A field is declared with :func:`hp` (default and checks).  A check is a function of the
value returning the problem (a phrase such as ``"must be an integer >= 1"``) or ``None``;
:func:`integer`, :func:`number`, :func:`choice` and :data:`flag` make the usual ones, and
``optional(check)`` lets ``None`` through.  A constraint between fields goes into
:meth:`Hyper.check_together`.  A failed check raises
:class:`~securefl.errors.InputError` naming the field and the value; the registry names it
``hyper.<method>.<key>`` (the path of ``securefl run --set``).  The fields most methods
share (backbone, clients per round, their local training) are declared once, in
:class:`RoundHyper` and :class:`SGDRoundHyper`; a method's dataclass extends one and
restates the defaults its paper changes.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
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
    docstring), then :meth:`check_together`.

    A subclass may change inherited defaults without restating the fields:
    ``class FedAnchorHyper(SGDRoundHyper, defaults={"lr": 0.03})`` keeps ``lr``'s type,
    checks and place and gives it the default 0.03; a name that is no inherited field is a
    TypeError."""

    def __init_subclass__(cls, defaults: dict[str, Any] | None = None, **keywords: Any) -> None:
        super().__init_subclass__(**keywords)
        if not defaults:
            return
        inherited = {spec.name: spec for spec in fields(cls)}  # the bases': no dataclass yet
        annotations = inspect.get_annotations(cls)  # its own, a new dict
        for name, default in defaults.items():
            if name not in inherited or name in annotations:
                raise TypeError(f"{cls.__name__}: defaults names {name!r}; it gives a default to "
                                "a field of its bases that the class does not declare again")
            annotations[name] = inherited[name].type
            setattr(cls, name, field(default=default, metadata=inherited[name].metadata))
        cls.__annotations__ = annotations

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


@dataclass(frozen=True)
class RoundHyper(Hyper):
    """What a round of federated training is, in every method that samples clients and
    trains them locally: the backbone ``model``, the ``clients_per_round`` sampled, their
    ``local_epochs`` of training at learning rate ``lr`` with ``weight_decay``, on batches
    randomly translated by up to ``max_shift`` pixels (``None``: the input shape's default,
    :func:`securefl.methods.common.default_shift`).  Defaults: FedProp Appendix A's
    (CIFAR-10), which a method's dataclass changes to its paper's (``defaults=``,
    :class:`Hyper`)."""

    model: str = MODEL
    clients_per_round: int = hp(5, integer(1))
    local_epochs: int = hp(5, integer(1))
    lr: float = hp(0.1, POSITIVE)
    weight_decay: float = hp(2e-4, NON_NEGATIVE)
    max_shift: int | None = SHIFT


@dataclass(frozen=True)
class SGDRoundHyper(RoundHyper):
    """:class:`RoundHyper` where the local training is minibatch SGD: ``batch_size`` and
    ``momentum`` (FedProp Appendix A: 50 and 0.9)."""

    batch_size: int = hp(50, integer(1))
    momentum: float = hp(0.9, PROBABILITY_BELOW_ONE)
