"""The federated view of a dataset: per-client data with a labeled mask, an optional
server-side labeled (anchor) set, and the test set.  Produced by the partitioners in
:mod:`securefl.data`, consumed by :mod:`securefl.fl` and :mod:`securefl.methods`.

True labels of unlabeled samples are kept (``y``) only so that the simulation can
report pseudo-label accuracy; methods must read labels only where ``labeled`` is True.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class Federation:
    """A dataset split over clients (and optionally a labeled anchor set at the server)."""

    name: str
    clients: list[ClientData]
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    server: ClientData | None = None
    info: dict = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def labeled_clients(self) -> list[int]:
        """Indices of clients holding at least one label."""
        return [i for i, c in enumerate(self.clients) if c.num_labeled > 0]
