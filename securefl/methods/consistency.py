"""FedSemi's schedules and layer-selection math (Long et al., fedsemi.md §3), as pure functions.

Ramps (``x = R_g^k * R_L`` counts the local epochs client ``k`` has trained so far):

* eq. (7)  consistency weight ``beta(x) = exp(-5 (1 - x/phi_l)^2)`` for ``0 < x < phi_l``,
  ``1`` for ``x >= phi_l``; the equation leaves ``x = 0`` open and we use ``0`` there
  (no consistency before any training, as the text intends).
* eq. (9)  EMA decay ``alpha = 0`` while the global round ``R_g <= phi_g``, else
  ``min(1 - 1/x, alpha_max)``.
* eq. (8)  teacher update ``theta_t <- alpha theta_t + (1 - alpha) theta_s``.

Layer selection:

* eq. (10) ``FSM[j] = ||theta_t[j] - theta_s[j]|| / ||theta_s[j]||`` per layer ``j``.
* eqs. (11)/(12) the linear and rectangle ramp-down curves of ``tau``, clipped to [0, 1].
  Their area is ``(1 - mu) R_G``: ``tau`` is the *communication rate* of the student
  network (Table 6: "communication rate of omega_s"), so FedSemi-Pi (``tau = 0``) uploads
  no student layer and FedSemi-MT (``tau = 1``) uploads all of them.
* boundary: the server keeps the last ``phi_g`` rounds of FSM values (``Lambda``) and a
  client uploads student layer ``j`` iff ``FSM[j] >= quantile_{1 - tau}(Lambda)``.  The
  paper's sentence "smaller than the tau quantile is not uploaded" would make
  ``tau = 0`` upload everything, contradicting its own Pi/MT/D cost ranking and the
  curves' area; we follow the ranking (documented deviation).

* eqs. (5)/(6) the consistency loss between teacher and student class probabilities:
  squared error summed over classes, or KL(teacher || student), averaged over samples.

Nothing here crosses a party boundary: ``FSM`` vectors go to the server in the clear as
in the paper (``V`` floats per client), which reveals how far each layer's student drifted
from its teacher and nothing about the weights themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from securefl.errors import InputError

CURVES = ("linear", "rectangle")
CONSISTENCY_LOSSES = ("mse", "kl")


def beta_ramp(local_epochs: float, *, phi_l: float = 10.0) -> float:
    """Eq. (7): sigmoid-shaped ramp-up of the consistency weight."""
    if phi_l <= 0:
        raise InputError("phi_l", phi_l, "must be positive")
    if local_epochs < 0:
        raise InputError("local_epochs", local_epochs, "must be non-negative")
    if local_epochs == 0:
        return 0.0
    if local_epochs >= phi_l:
        return 1.0
    return math.exp(-5.0 * (1.0 - local_epochs / phi_l) ** 2)


def alpha_ramp(global_round: int, local_epochs: float, *, phi_g: float, alpha_max: float = 0.999) -> float:
    """Eq. (9): EMA decay of the teacher; ``global_round`` is 1-based ``R_g``."""
    if not 0.0 <= alpha_max < 1.0:
        raise InputError("alpha_max", alpha_max, "must lie in [0, 1)")
    if local_epochs < 0:
        raise InputError("local_epochs", local_epochs, "must be non-negative")
    if global_round <= phi_g or local_epochs < 1:
        return 0.0
    return min(1.0 - 1.0 / local_epochs, alpha_max)


@torch.no_grad()
def ema_update(teacher: torch.nn.Module, student: torch.nn.Module, alpha: float) -> None:
    """Eq. (8) on every floating parameter and buffer (batch-norm statistics included)."""
    for t, s in zip(teacher.state_dict().values(), student.state_dict().values()):
        if t.is_floating_point():
            t.mul_(alpha).add_(s, alpha=1.0 - alpha)
        else:
            t.copy_(s)


def fsm_divergence(teacher_layers: Sequence[np.ndarray], student_layers: Sequence[np.ndarray]) -> np.ndarray:
    """Eq. (10) for each layer group; a zero student layer gives ``inf`` unless equal."""
    if len(teacher_layers) != len(student_layers):
        raise InputError("teacher_layers", len(teacher_layers),
                         f"has a different layer count than student ({len(student_layers)})")
    out = np.empty(len(teacher_layers), dtype=np.float64)
    for j, (t, s) in enumerate(zip(teacher_layers, student_layers)):
        t = np.asarray(t, dtype=np.float64)
        s = np.asarray(s, dtype=np.float64)
        if t.shape != s.shape:
            raise InputError("teacher_layers", t.shape, f"layer {j} does not match student shape {s.shape}")
        diff = float(np.linalg.norm(t - s))
        norm = float(np.linalg.norm(s))
        out[j] = diff / norm if norm > 0 else (0.0 if diff == 0 else math.inf)
    return out


def tau_linear(global_round: int, *, total_rounds: int, phi_g: float, mu: float) -> float:
    """Eq. (11): 0 up to ``phi_g``, then linear ramp-down to 0 at ``R_G``; clipped to [0, 1]."""
    _check_curve(total_rounds, phi_g, mu)
    if global_round <= phi_g or global_round > total_rounds:
        return 0.0
    value = -2.0 * (1.0 - mu) * total_rounds / (total_rounds - phi_g) ** 2 * (global_round - total_rounds)
    return float(min(max(value, 0.0), 1.0))


def tau_rectangle(global_round: int, *, total_rounds: int, phi_g: float, phi_end: float, mu: float) -> float:
    """Eq. (12): constant ``(1 - mu) R_G / (phi_end - phi_g)`` strictly between the tipping points."""
    _check_curve(total_rounds, phi_g, mu)
    if phi_end <= phi_g:
        raise InputError("phi_end", phi_end, f"must exceed phi_g={phi_g}")
    if phi_g < global_round < phi_end:
        return float(min((1.0 - mu) * total_rounds / (phi_end - phi_g), 1.0))
    return 0.0


def _check_curve(total_rounds: int, phi_g: float, mu: float) -> None:
    if not 0.0 <= mu <= 1.0:
        raise InputError("mu", mu, "must lie in [0, 1]")
    if total_rounds <= phi_g:
        raise InputError("total_rounds", total_rounds, f"must exceed phi_g={phi_g}")


def upload_boundary(history: np.ndarray, tau: float) -> float:
    """The FSM value above which a student layer is uploaded: ``quantile_{1 - tau}(Lambda)``.

    ``tau = 0`` gives ``inf`` (nothing uploaded), ``tau = 1`` the minimum (everything).
    """
    if not 0.0 <= tau <= 1.0:
        raise InputError("tau", tau, "must lie in [0, 1]")
    history = np.asarray(history, dtype=np.float64).ravel()
    if tau == 0.0 or history.size == 0:
        return math.inf
    return float(np.quantile(history, 1.0 - tau))


def select_layers(fsm: np.ndarray, boundary: float) -> np.ndarray:
    """Boolean mask of the student layers a client uploads (``FSM[j] >= boundary``)."""
    return np.asarray(fsm, dtype=np.float64) >= boundary


def consistency_loss(teacher_logits: torch.Tensor, student_logits: torch.Tensor, kind: str = "mse") -> torch.Tensor:
    """Eq. (5) (``"mse"``) or eq. (6) (``"kl"``) between teacher and student predictions.

    The teacher side is a target: no gradient flows into it.
    """
    if teacher_logits.shape != student_logits.shape:
        raise InputError("student_logits", tuple(student_logits.shape), f"must match teacher {tuple(teacher_logits.shape)}")
    if student_logits.shape[0] == 0:
        return student_logits.sum() * 0.0
    target = F.softmax(teacher_logits.detach(), dim=1)
    if kind == "mse":
        return ((F.softmax(student_logits, dim=1) - target) ** 2).sum(dim=1).mean()
    if kind == "kl":
        return F.kl_div(F.log_softmax(student_logits, dim=1), target, reduction="batchmean")
    raise InputError("kind", kind, f"must be one of {CONSISTENCY_LOSSES}")
