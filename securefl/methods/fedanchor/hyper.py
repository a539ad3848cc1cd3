"""FedAnchor's hyper-parameters (:mod:`securefl.methods.hyper`)."""

from __future__ import annotations

from dataclasses import dataclass

from securefl.methods.hyper import NON_NEGATIVE, POSITIVE, SGDRoundHyper, flag, hp, integer, number


@dataclass(frozen=True)
class FedAnchorHyper(SGDRoundHyper, defaults={"clients_per_round": 10, "batch_size": 10,
                                              "lr": 0.03, "weight_decay": 5e-4}):
    """fedanchor (FedAnchor §5.1 and Appendix C); ``threshold`` is a cosine in [-1, 1]."""

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
