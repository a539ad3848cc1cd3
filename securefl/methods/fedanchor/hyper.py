"""FedAnchor's hyper-parameters (:mod:`securefl.methods.hyper`)."""

from __future__ import annotations

from dataclasses import dataclass

from securefl.methods.hyper import (
    MODEL,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY_BELOW_ONE,
    SHIFT,
    Hyper,
    flag,
    hp,
    integer,
    number,
)


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
