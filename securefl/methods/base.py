"""What every FSSL method implements, so that the runner treats them alike.

A method is configured by keyword hyper-parameters only (no work in ``__init__``),
prepared once by :meth:`Method.setup` on a :class:`~securefl.data.federation.Federation`
(warm-up, pre-training), then advanced one communication round at a time by
:meth:`Method.run_round`.  :meth:`state_dict` / :meth:`load_state_dict` capture
everything needed to resume bit-for-bit (weights, optimiser and RNG states).

``secure="real"`` routes every cross-party step through :mod:`securefl.crypto` /
:mod:`securefl.protocols`; ``secure="plaintext"`` computes identical outputs directly.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from securefl.errors import InputError

SECURE_MODES = ("real", "plaintext")


@dataclass
class RoundResult:
    """Measurements of one communication round.

    ``bytes_model_per_client`` counts model up/download traffic, ``bytes_protocol_per_client``
    the traffic of the privacy protocols (SHADE, secure sum, prototype exchange), both
    averaged over the round's participating clients.  ``pseudo_label_digest`` is the
    SHA-256 of the round's pseudo-labels (in client order) or ``None`` where the method
    has none; real and plaintext runs with the same seed must give the same digest.
    ``seconds_at_bandwidth`` (FedProp) projects the round onto 100 Mbit/s, 1 Gbit/s and
    10 Gbit/s links: ``cpu_seconds + 8 * link_bytes / bandwidth`` with ``cpu_seconds`` the
    round's process CPU time (all clients and the server) and ``link_bytes`` the busiest
    client's CrossClientLP bytes in its busier direction plus one model transfer
    (:func:`securefl.crypto.seconds_at_bandwidth`); ``None`` where a method does not report it.
    """

    round: int
    accuracy: float
    seconds: float
    train_seconds: float
    crypto_seconds: float
    bytes_model_per_client: float
    bytes_protocol_per_client: float
    pseudo_label_accuracy: float | None = None
    pseudo_label_digest: str | None = None
    seconds_at_bandwidth: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def label_digest(labels: list[np.ndarray] | np.ndarray) -> str:
    """SHA-256 (hex) of a sequence of int label arrays, order-sensitive."""
    digest = hashlib.sha256()
    for array in labels if isinstance(labels, list) else [labels]:
        digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
        digest.update(b"|")
    return digest.hexdigest()


class Method(ABC):
    """Base class of the FSSL methods and baselines."""

    name: ClassVar[str]
    uses_pseudo_labels: ClassVar[bool] = False

    def __init__(self, *, secure: str = "plaintext", seed: int = 0) -> None:
        if secure not in SECURE_MODES:
            raise InputError("secure", secure, f"must be one of {SECURE_MODES}")
        self.secure = secure
        self.seed = seed

    @abstractmethod
    def setup(self, federation: Any) -> None:
        """Build models and run any warm-up / pre-training on ``federation``."""

    @abstractmethod
    def run_round(self, round_index: int) -> RoundResult:
        """Run communication round ``round_index`` (0-based) and evaluate on the test set."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimiser states, RNG states, round."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state returned by :meth:`state_dict` (after :meth:`setup`)."""
