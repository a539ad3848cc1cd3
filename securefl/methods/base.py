"""What every FSSL method implements, so that the runner treats them alike.

A method is configured by keyword hyper-parameters only (no work in ``__init__``),
prepared once by :meth:`Method.setup` on a :class:`~securefl.data.federation.Federation`
(warm-up, pre-training), then advanced one communication round at a time by
:meth:`Method.run_round`.  :meth:`state_dict` / :meth:`load_state_dict` capture
everything needed to resume bit-for-bit (weights, optimiser and RNG states).

Evaluation is not the method's business: ``setup`` receives the federation's training
view (:meth:`~securefl.data.federation.Federation.for_training`, no validation or test
set), ``run_round`` reports what the round cost, and after every round the runner asks
:meth:`Method.predict` for the labels the method's current model assigns to the held-out
images and scores them itself (:meth:`Method.score`): validation accuracy to select the
round, test accuracy to report.

``secure="real"`` routes every cross-party step through :mod:`securefl.crypto` /
:mod:`securefl.protocols`; ``secure="plaintext"`` computes identical outputs directly.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from securefl.errors import InputError

SECURE_MODES = ("real", "plaintext")


@dataclass
class RoundResult:
    """Measurements of one communication round (accuracies are the runner's: see the
    module docstring).

    ``bytes_model_per_client`` counts model up/download traffic, ``bytes_protocol_per_client``
    the traffic of the privacy protocols (SHADE, secure sum, prototype exchange), both
    averaged over the round's participating clients.  ``pseudo_label_digest`` is the
    SHA-256 of the round's pseudo-labels (in client order) or ``None`` where the method
    has none; real and plaintext runs with the same seed must give the same digest.
    ``privacy`` is the method's privacy accounting after this round (ProtoFSSL's
    :meth:`~securefl.methods.protofssl.ProtoFSSL.privacy_report`) or ``None``.
    """

    round: int
    seconds: float
    train_seconds: float
    crypto_seconds: float
    bytes_model_per_client: float
    bytes_protocol_per_client: float
    pseudo_label_accuracy: float | None = None
    pseudo_label_digest: str | None = None
    privacy: dict[str, Any] | None = None

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
    on_phase: Callable[[str], None] | None = None
    """Set by the runner: told (a short text) when a long phase starts, e.g. a warm-up round."""

    def _phase(self, text: str) -> None:
        """Announce a long phase to whoever listens (progress lines); no-op otherwise."""
        if self.on_phase is not None:
            self.on_phase(text)

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
        """Run communication round ``round_index`` (0-based); no evaluation."""

    @abstractmethod
    def predict(self, x: np.ndarray) -> np.ndarray:
        """Class labels ``(n,)`` int64 that the model the method would deploy now (after
        the last completed round) assigns to images ``x`` ``(n, *input_shape)``."""

    def score(self, x: np.ndarray, y: np.ndarray) -> float:
        """Accuracy of :meth:`predict` on ``(x, y)`` (scikit-learn's ``score``)."""
        if len(x) != len(y) or len(y) == 0:
            raise InputError("y", len(y), f"must be non-empty and match x ({len(x)} samples)")
        return float(np.mean(np.asarray(self.predict(x)) == np.asarray(y)))

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimiser states, RNG states, round."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state returned by :meth:`state_dict` (after :meth:`setup`)."""
