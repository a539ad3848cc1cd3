"""Every method's hyper-parameters as a frozen dataclass that checks each value when built.

One dataclass per method: a field per hyper-parameter keyword of the method's constructor,
with its type, the paper's default (the same as the constructor's: a test compares them)
and its check.  Building one (:func:`securefl.methods.build_hyper`) checks every value and
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


@dataclass(frozen=True)
class FedAvgHyper(Hyper):
    """FedAvg's ClientUpdate and schedule (FedProp Appendix A, CIFAR-10):
    :class:`securefl.methods.fedavg.server.FedAvgMethod`; fedavg-labeled, fedavg-supervised."""

    model: str = MODEL
    clients_per_round: int = hp(5, integer(1))
    local_epochs: int = hp(5, integer(0))
    batch_size: int = hp(50, integer(1))
    lr: float = hp(0.1, POSITIVE)
    momentum: float = hp(0.9, PROBABILITY_BELOW_ONE)
    weight_decay: float = hp(2e-4, NON_NEGATIVE)
    lr_decay_rounds: int | None = hp(2000, optional(integer(0)))
    prox_mu: float = hp(0.0, NON_NEGATIVE)
    max_shift: int | None = SHIFT
    hflip: bool = hp(False, flag)


@dataclass(frozen=True)
class MeanTeacherHyper(Hyper):
    """Mean teacher (Tarvainen & Valpola 2017): EMA decay, consistency weight and ramp-up,
    input noise (:class:`securefl.methods.fedavg.server.MeanTeacherRounds`)."""

    ema_decay: float = hp(0.99, PROBABILITY_BELOW_ONE)
    consistency_weight: float = hp(100.0, NON_NEGATIVE)
    consistency_rampup: int = hp(5, integer(0))
    noise_std: float = hp(0.1, NON_NEGATIVE)


@dataclass(frozen=True)
class PseudoLabelHyper(FedAvgHyper):
    """FedAvg after ``warmup_rounds`` of labeled-only rounds (FedProp Algorithm 2, line 2)."""

    warmup_rounds: int = hp(10, integer(0))


@dataclass(frozen=True)
class LocalLPHyper(PseudoLabelHyper):
    """fedavg-locallp: label propagation's ``k`` neighbours and ``alpha`` (Algorithm 1)."""

    k: int = hp(10, integer(1))
    alpha: float = hp(0.99, number(0.0, 1.0, low_open=True, high_open=True))


@dataclass(frozen=True)
class NetworkPLHyper(PseudoLabelHyper):
    """fedavg-pl: a confidence ``threshold`` in [0, 1) and optional entropy weights."""

    threshold: float = hp(0.0, PROBABILITY_BELOW_ONE)
    entropy_weights: bool = hp(False, flag)


@dataclass(frozen=True)
class FixMatchHyper(FedAvgHyper):
    """fedavg-fixmatch: FixMatch's tau, mu, lambda_u, RandAugment ops and Cutout."""

    threshold: float = hp(0.95, number(0.0, 1.0))
    unlabeled_ratio: int = hp(7, integer(1))
    unlabeled_weight: float = hp(1.0, NON_NEGATIVE)
    num_ops: int = hp(2, integer(0))
    cutout: float = hp(0.5, number(0.0, 1.0))


@dataclass(frozen=True)
class FedAvgMTHyper(FedAvgHyper, MeanTeacherHyper):
    """fedavg-mt: FedAvg's fields and the mean teacher's."""


def _hamming_backends() -> tuple[str, ...]:
    from securefl.protocols.crossclient import HAMMING_BACKENDS

    return tuple(HAMMING_BACKENDS)


@dataclass(frozen=True)
class CrossClientLPHyper(PseudoLabelHyper):
    """fedprop and fedprop-mt: CrossClientLP's ``k``, ``alpha``, LSH length ``L`` in
    [1, 2^16), the secure Hamming backend, and the optional label-mass gate (FedProp Algorithm 2 / 3)."""

    k: int = hp(10, integer(1))
    alpha: float = hp(0.99, number(0.0, 1.0, low_open=True, high_open=True))
    L: int = hp(4096, integer(1, 1 << 16))
    hamming_backend: str = hp("auto", choice(_hamming_backends()))
    min_label_mass: float = hp(0.0, NON_NEGATIVE)
    mass_weighting: bool = hp(False, flag)


@dataclass(frozen=True)
class FedPropHyper(CrossClientLPHyper):
    """fedprop: CrossClientLP's fields and ``warmup_in_budget`` (the warm-up rounds counted
    inside the round budget; FedProp only, off: the paper's schedule)."""

    warmup_in_budget: bool = hp(False, flag)


@dataclass(frozen=True)
class FedPropMTHyper(CrossClientLPHyper, MeanTeacherHyper):
    """fedprop-mt: FedProp's fields and the mean teacher's."""


PROTOFSSL_AGGREGATIONS = ("fedavg", "fedprox")
"""ProtoFSSL's server aggregations (:data:`securefl.methods.protofssl.server.AGGREGATIONS`)."""
PROTOFSSL_NORMS = ("none", "bn", "gn")
"""ProtoFSSL's ResNet normalisations (:data:`securefl.methods.protofssl.server.NORMS`)."""


def _distances() -> tuple[str, ...]:
    from securefl.methods.prototypical import DISTANCES

    return tuple(DISTANCES)


@dataclass(frozen=True)
class ProtoFSSLHyper(Hyper):
    """protofssl (ProtoFSSL Algorithm 1, its appendix's defaults); ``noise_multiplier``
    (the Gaussian release) needs ``clip`` and excludes ``noise_std``."""

    model: str = MODEL
    clients_per_round: int = hp(5, integer(1))
    local_epochs: int = hp(10, integer(1))
    lr: float = hp(1e-3, POSITIVE)
    rmsprop_alpha: float = hp(0.9, PROBABILITY_BELOW_ONE)
    rmsprop_eps: float = hp(1e-7, POSITIVE)
    weight_decay: float = hp(1e-4, NON_NEGATIVE)
    n_support: int = hp(1, integer(1))
    n_query: int = hp(2, integer(0))
    n_unlabeled: int = hp(100, integer(0))
    helpers: int = hp(5, integer(1))
    lambda_u: float = hp(0.3, NON_NEGATIVE)
    temperature: float = hp(0.5, POSITIVE)
    distance: str = hp("squared", choice(_distances()))
    aggregation: str = hp("fedavg", choice(PROTOFSSL_AGGREGATIONS))
    prox_mu: float = hp(1e-2, NON_NEGATIVE)
    noise_std: float = hp(0.0, NON_NEGATIVE)
    noise_multiplier: float | None = hp(None, optional(POSITIVE))
    clip: float | None = hp(None, optional(POSITIVE))
    min_class_count: int = hp(1, integer(1))
    dp_delta: float = hp(1e-5, number(0.0, 1.0, low_open=True, high_open=True))
    norm: str = hp("none", choice(PROTOFSSL_NORMS))
    max_shift: int | None = hp(0, optional(integer(0)))

    def check_together(self) -> None:
        if self.noise_multiplier is not None and (self.clip is None or self.noise_std > 0):
            raise InputError("noise_multiplier", self.noise_multiplier,
                             "needs clip and excludes noise_std")


def _fedsemi_choices() -> tuple[tuple[str, ...], tuple[str, ...]]:
    from securefl.methods.consistency import CONSISTENCY_LOSSES, CURVES

    return tuple(CONSISTENCY_LOSSES), tuple(CURVES)


_CONSISTENCY_LOSSES, _CURVES = _fedsemi_choices()


@dataclass(frozen=True)
class FedSemiHyper(Hyper):
    """fedsemi-pi / fedsemi-mt (FedSemi §4.1, Tables 4 and 6); ``rounds`` is the run's
    ``R_G``.  The rectangle curve needs ``phi_end`` above its tipping point ``phi_g``."""

    model: str = MODEL
    rounds: int = hp(50, integer(1))
    clients_per_round: int = hp(10, integer(1))
    local_epochs: int = hp(5, integer(1))
    batch_size: int = hp(10, integer(1))
    lr: float = hp(0.01, POSITIVE)
    momentum: float = hp(0.9, PROBABILITY_BELOW_ONE)
    weight_decay: float = hp(1e-4, NON_NEGATIVE)
    consistency: str = hp("mse", choice(_CONSISTENCY_LOSSES))
    phi_l: float = hp(10.0, POSITIVE)
    phi_g: float | None = hp(None, optional(NON_NEGATIVE))
    phi_end: float = hp(40.0, NON_NEGATIVE)
    mu: float = hp(0.5, number(0.0, 1.0))
    alpha_max: float = hp(0.999, PROBABILITY_BELOW_ONE)
    curve: str = hp("linear", choice(_CURVES))
    noise_std: float = hp(0.15, NON_NEGATIVE)
    max_shift: int | None = SHIFT
    min_group: int = hp(2, integer(1))

    @property
    def tipping_point(self) -> float:
        """``phi_g``, or Table 6's 3 (linear curve) / 10 (rectangle) when it is ``None``."""
        if self.phi_g is not None:
            return float(self.phi_g)
        return 3.0 if self.curve == "linear" else 10.0

    def check_together(self) -> None:
        if self.curve == "rectangle" and self.phi_end <= self.tipping_point:
            raise InputError("phi_end", self.phi_end, f"must exceed phi_g={self.tipping_point:g}")


@dataclass(frozen=True)
class FedSemiDHyper(FedSemiHyper):
    """fedsemi-d: also ``rounds`` (R_G) above the tipping point ``phi_g`` (eq. 11/12)."""

    def check_together(self) -> None:
        super().check_together()
        if self.rounds <= self.tipping_point:
            raise InputError("rounds", self.rounds,
                             f"FedSemi-D needs more rounds (R_G) than phi_g={self.tipping_point:g}")


@dataclass(frozen=True)
class FedAnchorHyper(Hyper):
    """fedanchor (FedAnchor §5.1 and Appendix C); ``threshold`` is a cosine in [-1, 1]."""

    model: str = MODEL
    clients_per_round: int = hp(10, integer(1))
    local_epochs: int = hp(5, integer(1))
    batch_size: int = hp(10, integer(1))
    lr: float = hp(0.03, POSITIVE)
    momentum: float = hp(0.9, PROBABILITY_BELOW_ONE)
    weight_decay: float = hp(5e-4, NON_NEGATIVE)
    server_lr: float = hp(0.03, POSITIVE)
    server_batch_size: int = hp(16, integer(1))
    pretrain_epochs: int = hp(5, integer(0))
    pretrain_lr: float = hp(0.05, POSITIVE)
    anchor_dim: int = hp(128, integer(1))
    temperature: float = hp(0.5, POSITIVE)
    client_mixup: bool = hp(True, flag)
    server_mixup: bool = hp(False, flag)
    threshold: float = hp(0.6, number(-1.0, 1.0))
    mixup_alpha: float = hp(0.75, POSITIVE)
    mix_weight: float = hp(1.0, NON_NEGATIVE)
    max_shift: int | None = SHIFT


@dataclass(frozen=True)
class FedMatchHyper(Hyper):
    """fedmatch (FedMatch, Jeong et al. 2021, and its code's ``config.py``); ``confidence``
    is the pseudo-label threshold tau in [0, 1]; ``cutout`` a fraction of the image side."""

    model: str = MODEL
    clients_per_round: int = hp(5, integer(1))
    local_epochs: int = hp(1, integer(1))
    batch_size: int = hp(10, integer(1))
    lr: float = hp(1e-3, POSITIVE)
    momentum: float = hp(0.0, PROBABILITY_BELOW_ONE)
    weight_decay: float = hp(0.0, NON_NEGATIVE)
    max_shift: int | None = SHIFT
    confidence: float = hp(0.85, number(0.0, 1.0))
    num_helpers: int = hp(2, integer(0))
    helper_interval: int = hp(10, integer(1))
    lambda_s: float = hp(10.0, NON_NEGATIVE)
    lambda_iccs: float = hp(1e-2, NON_NEGATIVE)
    lambda_a: float = hp(1e-2, NON_NEGATIVE)
    lambda_l2: float = hp(10.0, NON_NEGATIVE)
    lambda_l1: float = hp(1e-4, NON_NEGATIVE)
    l1_threshold: float = hp(5e-6, NON_NEGATIVE)
    psi_factor: float = hp(0.2, NON_NEGATIVE)
    num_ops: int = hp(2, integer(0))
    cutout: float = hp(0.5, number(0.0, 1.0))


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
