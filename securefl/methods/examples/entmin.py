"""FedAvg with entropy minimisation (Grandvalet & Bengio 2004): the example method of
``docs/write-a-method.md``.

Each sampled client runs ``local_epochs`` epochs of SGD over batches ``B_L u B_U`` of its
labeled and unlabeled points and minimises

    (1/|B|) sum_{i in B_L} CE(y_i, f(a(x_i)))  +  lambda (1/|B_U|) sum_{u in B_U} H(softmax(f(x_u)))

with ``H(p) = -sum_c p_c log p_c``, ``lambda = entropy_weight`` and ``a`` FedAvg's random
translation (:func:`securefl.fl.training.train_mixed`'s batches, the unlabeled points at
pseudo-label weight 0): the unlabeled points pull the decision boundary away from
themselves.  The server half is FedAvg's
(:class:`~securefl.methods.fedavg.server.FedAvgMethod`): sampling, the learning-rate schedule
and the weighted average of the uploads, a secure sum in real mode.

Who learns what: as FedAvg -- the server learns only the sum of the sampled clients' models
(in real mode) and which clients it sampled; a client learns the global model.  Nothing
about the unlabeled points leaves a client except through its model update.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from securefl.fl.training import train_mixed
from securefl.methods.fedavg.client import FedAvgClient
from securefl.methods.fedavg.hyper import FedAvgHyper
from securefl.methods.fedavg.server import FedAvgMethod
from securefl.methods.hyper import NON_NEGATIVE, hp


@dataclass(frozen=True)
class EntMinHyper(FedAvgHyper):
    """FedAvg's hyper-parameters and the weight ``lambda`` of the entropy term."""

    entropy_weight: float = hp(0.1, NON_NEGATIVE)


def mean_entropy(logits: torch.Tensor) -> torch.Tensor:
    """``(1/n) sum_u H(softmax(logits_u))``, the mean Shannon entropy of the rows (nats)."""
    log_p = torch.log_softmax(logits, dim=1)
    return -(log_p.exp() * log_p).sum(dim=1).mean()


class EntMinClient(FedAvgClient):
    """The client half: FedAvg's client (model in, upload out) with the ClientUpdate above."""

    def local_update(self, models, data, request, rng, pseudo) -> None:
        method, client = self.method, data.client
        unlabeled = ~client.labeled
        count = int(unlabeled.sum())

        def entropy_term(model: torch.nn.Module, x_labeled: torch.Tensor,
                         x_unlabeled: torch.Tensor) -> torch.Tensor:
            if len(x_unlabeled) == 0:
                return x_labeled.new_zeros(())
            return method.entropy_weight * mean_entropy(model(x_unlabeled))

        train_mixed(models["model"], client.x[client.labeled], client.y[client.labeled],
                    client.x[unlabeled], np.zeros(count, np.int64), np.zeros(count),
                    epochs=method.local_epochs, batch_size=method.batch_size,
                    lr=float(request.config["lr"]), momentum=method.momentum,
                    weight_decay=method.weight_decay, prox_mu=method.prox_mu,
                    generator=rng.torch, extra_loss=entropy_term,
                    augment=self.augmentation(data, rng.torch))


class EntMinFedAvg(FedAvgMethod):
    """The server half: FedAvg's, with the dataclass and the client half above."""

    name = "fedavg-entmin"
    hyper = EntMinHyper
    client_half = EntMinClient
