"""Client halves of FedProp and FedProp+MT: CrossClientLP's client steps, then ClientUpdate.

FedProp's round (``docs/method-halves.md``, "Per method") is CrossClientLP (FedProp
Algorithm 3, whose client steps are the protocol's:
:mod:`securefl.protocols.crossclient.client_steps`) followed by FedAvg's ``train``.  What
FedProp gives the protocol's steps (:class:`FedPropSteps`):

* the features V_j = f(X_j): the client's points embedded by the model the
  ``cclp/advertise`` request carries (array ``model``: the global model, FedProp+MT's
  teacher);
* its observed labels and the class count of its :class:`~securefl.methods.halves.LocalData`;
* its mode, code length, Hamming backend and the seed of its LSH seed share
  (``crypto_seed_for("lsh", round)``): the method's configuration.

``train``
    as :class:`~securefl.methods.fedavg.client.PseudoLabelClient`, with the client's rows
    of the padded total (``cclp/rows/block``, ``cclp/rows/survivors``) in the request: the
    client finishes them (lines 15-16,
    :meth:`~securefl.protocols.crossclient.client_steps.CrossClientSteps.finish_rows`),
    trains on the pseudo-labels and weights, and reports them
    (:func:`securefl.methods.halves.report_pseudo_labels`) where the run asks.  A client
    without rows (it left CrossClientLP) trains on its labels.  With ``min_label_mass``
    or ``mass_weighting`` set (an option, off by default; not the paper) the client gates
    or weighs its pseudo-labels by the label mass sum_c Z_ic of its own rows
    (:func:`~securefl.protocols.propagation.gate_by_mass`): only its rows and its
    labeled mask, nothing more leaves or enters it.  CrossClientLP's state is cleared
    after it.

Who learns what: exactly the client's view in :mod:`securefl.protocols.crossclient.parties`.
"""

from __future__ import annotations

import numpy as np

from securefl.fl import extract_features
from securefl.methods.fedavg.client import TRAIN, PseudoLabelClient, PseudoLabelMTClient
from securefl.protocols.crossclient.client_steps import CrossClientSteps, clear
from securefl.protocols.propagation import gate_by_mass
from securefl.runtime.transport import NodeContext, Record

ROWS_BLOCK = "cclp/rows/block"
ROWS_SURVIVORS = "cclp/rows/survivors"


class FedPropSteps(CrossClientSteps):
    """CrossClientLP's client steps on FedProp's embedding (mixin before a
    :class:`PseudoLabelClient`), and the pseudo-labels of ``train`` from the rows."""

    reports_pseudo_labels = True

    @property
    def cclp(self):
        """The method's configuration (``secure``, ``L``, ``hamming_backend``, crypto seeds)."""
        return self.method

    def features(self, request: Record, node: NodeContext) -> np.ndarray:
        """V_j = f(X_j): the client's points embedded by the request's feature model."""
        data = self.data(node)
        return extract_features(self.build(data, request.arrays["model"]), data.client.x).astype(np.float64)

    def labels(self, node: NodeContext) -> np.ndarray:
        return self.data(node).client.observed_labels().astype(np.int64)

    def num_classes(self, node: NodeContext) -> int:
        return int(self.data(node).num_classes)

    def pseudo_labels(self, request, models, data):
        if ROWS_BLOCK not in request.arrays:
            return None
        output = self.finish_rows((request.arrays[ROWS_BLOCK], request.arrays.get(ROWS_SURVIVORS)),
                                  self._train_state, self._train_node)
        return gate_by_mass(output.pseudo_labels, output.weights, output.mass,
                            unlabeled=~data.client.labeled,
                            min_label_mass=self.method.min_label_mass,
                            mass_weighting=self.method.mass_weighting)


class _TrainState:
    """Gives :meth:`FedPropSteps.pseudo_labels` the state and node of the ``train`` request
    and clears CrossClientLP's state after it."""

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        if step != TRAIN:
            return super().handle(step, request, state, node)
        self._train_state, self._train_node = state, node
        try:
            return super().handle(step, request, state, node)
        finally:
            clear(state)


class FedPropClient(_TrainState, FedPropSteps, PseudoLabelClient):
    """FedProp's client: CrossClientLP's steps, then FedProp's ClientUpdate."""


class FedPropMTClient(_TrainState, FedPropSteps, PseudoLabelMTClient):
    """FedProp+MT's client: CrossClientLP's steps (on the teacher's features, which the
    server sends as the round's feature model), then FedProp+MT's ClientUpdate."""
