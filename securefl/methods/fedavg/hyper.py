"""The FedAvg family's hyper-parameters (:mod:`securefl.methods.hyper`): FedAvg's own, the
mean teacher's and the pseudo-labelling baselines' (fedavg-labeled, -supervised, -locallp,
-pl, -mt, -fixmatch); FedProp's extend :class:`PseudoLabelHyper` and :class:`MeanTeacherHyper`.
"""

from __future__ import annotations

from dataclasses import dataclass

from securefl.methods.hyper import (
    NON_NEGATIVE,
    PROBABILITY_BELOW_ONE,
    Hyper,
    SGDRoundHyper,
    flag,
    hp,
    integer,
    number,
    optional,
)


@dataclass(frozen=True)
class FedAvgHyper(SGDRoundHyper):
    """FedAvg's ClientUpdate and schedule (FedProp Appendix A, CIFAR-10: the defaults of
    :class:`~securefl.methods.hyper.SGDRoundHyper`; ``local_epochs`` may be 0 here, no local
    step), the learning rate's cosine decay, FedProx's ``prox_mu`` and the optional flip:
    :class:`securefl.methods.fedavg.server.FedAvgMethod`; fedavg-labeled, fedavg-supervised."""

    local_epochs: int = hp(5, integer(0))
    lr_decay_rounds: int | None = hp(2000, optional(integer(0)))
    prox_mu: float = hp(0.0, NON_NEGATIVE)
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
