"""FedSemi's hyper-parameters (:mod:`securefl.methods.hyper`): fedsemi-pi, -mt and -d."""

from __future__ import annotations

from dataclasses import dataclass

from securefl.errors import InputError
from securefl.methods.consistency import CONSISTENCY_LOSSES, CURVES
from securefl.methods.hyper import (
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY_BELOW_ONE,
    SGDRoundHyper,
    choice,
    hp,
    integer,
    number,
    optional,
)


def tipping_point(phi_g: float | None, curve: str) -> float:
    """The tipping point ``phi_g``: as given, or Table 6's 3 (linear curve) / 10
    (rectangle) when it is ``None``."""
    if phi_g is not None:
        return float(phi_g)
    return 3.0 if curve == "linear" else 10.0


@dataclass(frozen=True)
class FedSemiHyper(SGDRoundHyper, defaults={"clients_per_round": 10, "batch_size": 10,
                                            "lr": 0.01, "weight_decay": 1e-4}):
    """fedsemi-pi / fedsemi-mt (FedSemi §4.1, Tables 4 and 6); ``rounds`` is the run's
    ``R_G``.  The rectangle curve needs ``phi_end`` above its tipping point ``phi_g``."""

    rounds: int = hp(50, integer(1))
    consistency: str = hp("mse", choice(tuple(CONSISTENCY_LOSSES)))
    phi_l: float = hp(10.0, POSITIVE)
    phi_g: float | None = hp(None, optional(NON_NEGATIVE))
    phi_end: float = hp(40.0, NON_NEGATIVE)
    mu: float = hp(0.5, number(0.0, 1.0))
    alpha_max: float = hp(0.999, PROBABILITY_BELOW_ONE)
    curve: str = hp("linear", choice(tuple(CURVES)))
    noise_std: float = hp(0.15, NON_NEGATIVE)
    min_group: int = hp(2, integer(1))

    @property
    def tipping_point(self) -> float:
        """:func:`tipping_point` of ``phi_g`` and ``curve``."""
        return tipping_point(self.phi_g, self.curve)

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
