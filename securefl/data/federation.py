"""The federated view of a dataset: per-client data with a labeled mask, an optional
server-side labeled (anchor) set, and the two held-out sets (validation and test).
Produced by the partitioners in :mod:`securefl.data`, consumed by :mod:`securefl.fl` and
:mod:`securefl.methods`.

Who may read what:

- A method trains on :meth:`Federation.for_training`, a copy with ``validation`` and
  ``test`` set to ``None``: no method can read a held-out image or label.  The runner keeps
  the full federation and scores the method's predictions on both held-out sets after
  every round (:meth:`securefl.methods.Method.score`); it selects the round by validation
  accuracy alone, and the test set is touched only for the reported numbers.
- True labels of unlabeled client samples are kept (``ClientData.y``) only so that the
  simulation can report pseudo-label accuracy; methods read labels only where
  ``labeled`` is True.  ``tests/experiments/test_leakage.py`` checks all three rules for
  every method: replacing the held-out labels and the hidden client labels by other
  classes leaves every method's training bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np


@dataclass
class ClientData:
    """One client's local data.

    ``x``: ``(n, *input_shape)`` float32; ``y``: ``(n,)`` int64 ground truth;
    ``labeled``: ``(n,)`` bool, True where the client knows the label.
    """

    x: np.ndarray
    y: np.ndarray
    labeled: np.ndarray

    def __len__(self) -> int:
        return len(self.y)

    @property
    def num_labeled(self) -> int:
        return int(self.labeled.sum())

    def observed_labels(self) -> np.ndarray:
        """Labels as the client sees them: the label where known, ``-1`` elsewhere."""
        return np.where(self.labeled, self.y, -1)


@dataclass(frozen=True)
class LabeledSet:
    """A held-out set: images ``x`` ``(n, *input_shape)`` and their labels ``y`` ``(n,)``."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class Federation:
    """A dataset split over clients (and optionally a labeled anchor set at the server),
    with the held-out ``validation`` set (carved from the training data, or ``None``) and
    the ``test`` set (``None`` in the view a method trains on)."""

    name: str
    clients: list[ClientData]
    num_classes: int
    input_shape: tuple[int, ...]
    test: LabeledSet | None = None
    validation: LabeledSet | None = None
    server: ClientData | None = None
    info: dict = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def labeled_clients(self) -> list[int]:
        """Indices of clients holding at least one label."""
        return [i for i, c in enumerate(self.clients) if c.num_labeled > 0]

    def for_training(self) -> "Federation":
        """The view a method trains on: the same clients and server, no held-out sets."""
        return replace(self, test=None, validation=None)
