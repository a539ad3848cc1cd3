"""The method-split API: every method is a server half and a client half, written once,
run by any transport (:mod:`securefl.runtime.transport`).

**Server half = the** :class:`~securefl.methods.base.Method`.  It keeps the runner's API
(``setup`` / ``run_round`` / ``predict`` / ``score`` / ``state_dict`` /
``load_state_dict``) and holds only what the server holds: the global model(s), the
server's :class:`~securefl.fl.SimulationRNG` (sampling), the round counter, and public
facts of the federation (number of clients, which hold labels, classes, input shape; the
anchor set where labels sit at the server).  ``setup(federation, *, transport=None)``
connects it to a transport -- by default an
:class:`~securefl.runtime.transport.InProcessTransport` over the federation's clients
(:meth:`Method._connect`) -- and ``run_round(t)`` is one round of the server half over
that transport: requests out, replies in, aggregation, no evaluation.  So ``securefl run``,
results.json, ``--resume`` and ``--secure both`` work unchanged on the in-process
transport, and :mod:`securefl.experiments.deployment` runs the same object on Flower.

**Client half =** a :class:`MethodClient` subclass named by the method class
(``Method.client_half``).  One program, ``"method"`` (:data:`PROGRAM`), serves every
method: :class:`MethodProgramClient` reads the method's name and keywords from the run
config, builds a *fresh* Method object from them (:func:`configured_method`: never set up,
so it holds hyper-parameters and no server state -- a client half that reached for the
global model or another client's data would fail in process exactly as on Flower) and
hands the request to ``method.client_half(method).handle(step, request, state, node)``.

What goes where:

=====================================  =====================================================
run config (the same at every node,    ``method`` (name), ``method-keywords`` (JSON of the
fixed for the run; :func:`run_config`)  constructor keywords: ``secure``, ``seed``,
                                       ``sum_backend``, every hyper-parameter, and
                                       ``crypto_seed`` only where it is public -- see
                                       :func:`run_config`), ``reports`` (bool)
request config (per message)           the round index, the round's inputs the server
                                       decides (learning rate, consistency weight, warm-up
                                       flag), the secure sums' public parameters
                                       (:class:`securefl.fl.uploads.UploadPlan`)
request arrays                         the global model(s) as float64 vectors
                                       (:func:`securefl.fl.model_vector`), server-made
                                       per-client inputs (FedProp's rows of the
                                       CrossClientLP result)
reply                                  uploads (:func:`securefl.fl.uploads.upload`),
                                       protocol messages, costs (:data:`securefl.runtime.costs.COMPUTE`,
                                       :data:`~securefl.runtime.costs.CRYPTO`), reports
node (:class:`NodeContext`)            ``partition`` (the client index) and ``data`` -- a
                                       :class:`LocalData`: in process handed over by
                                       :meth:`Method._connect`; on Flower loaded by the
                                       node from run and node config
                                       (:mod:`securefl.experiments.deployment`)
state Record                           what a client keeps between messages: protocol
                                       parties mid-protocol (secure sums), and between
                                       rounds a method's persistent client state (e.g.
                                       an optimiser's accumulators), via
                                       :mod:`securefl.runtime.state_codec`
=====================================  =====================================================

A client's simulation randomness comes from ``client_rng(seed, round, client, purpose)``
(``seed`` from the keywords, ``round`` from the request); its secrets from the OS CSPRNG.

**Reports** (``report/...`` reply entries) are measurements the *simulation* needs and
the protocol does not: the pseudo-labels a client made locally (for the round's
pseudo-label digest) and how many of them match the hidden true labels (pseudo-label
accuracy -- a figure only a simulation, whose clients hold the true labels, can give).
The server half never uses a report in its computation; a client sends them only when the
run config says ``reports = true`` (in process: always, as the simulator always measured
them; on a deployment the run's choice).  Without reports a method's
``pseudo_label_digest`` and ``pseudo_label_accuracy`` are ``None`` and no pseudo-label
leaves a client.

**Resume.**  A split method's ``state_dict`` holds, beside its server state, the clients'
state Records of its in-process transport (``"clients"``:
:meth:`InProcessTransport.client_states`); ``load_state_dict`` gives them back
(:meth:`InProcessTransport.adopt`).  The FedAvg family keeps nothing between rounds, so
its ``"clients"`` is empty.

``docs/write-a-method.md`` shows how to write a method (a worked example that runs in both
modes); ``docs/method-halves.md`` says what goes in which half.
"""

from __future__ import annotations

import hashlib
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from securefl.errors import ConfigError, InputError
from securefl.runtime.transport import ClientHalf, NodeContext, Record

if TYPE_CHECKING:
    from securefl.crypto.identity import Credentials
    from securefl.data.federation import ClientData, Federation
    from securefl.methods.base import Method

PROGRAM = "method"
"""The program every split method runs as (``securefl/fl/flower/app.py:PROGRAMS``)."""

REPORT = "report/"


@dataclass(frozen=True)
class LocalData:
    """What one node holds: its client's data and the dataset's public shape."""

    client: "ClientData"
    num_classes: int
    input_shape: tuple[int, ...]


def local_data(federation: "Federation", client: int) -> LocalData:
    """Client ``client``'s :class:`LocalData` of ``federation``."""
    return LocalData(federation.clients[int(client)], int(federation.num_classes),
                     tuple(int(d) for d in federation.input_shape))


def run_config(method: "Method", *, reports: bool = True, public_crypto_seed: bool = True
               ) -> dict[str, Any]:
    """The run config of ``method``'s client halves (flat scalars, as Flower's).

    ``public_crypto_seed=False`` leaves the crypto seed out (``None``: every client draws
    its secrets from the OS CSPRNG): a deployment must not ship a real run's secret seed
    to every node in its run config.  In process the simulator holds it anyway.
    """
    keywords = method.keywords()
    if not public_crypto_seed:
        keywords["crypto_seed"] = None
    return {"method": method.name, "method-keywords": json.dumps(keywords, sort_keys=True),
            "reports": bool(reports)}


@lru_cache(maxsize=16)
def _configured(name: str, keywords: str) -> "Method":
    from securefl.methods.registry import build_method

    try:
        return build_method(name, **json.loads(keywords))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"method-keywords={keywords!r}: {exc}") from None


def configured_method(run: Mapping[str, Any]) -> "Method":
    """The Method named by run config ``run``, built from its keywords and never set up
    (cached per process; treat it as read-only configuration)."""
    name, keywords = run.get("method"), run.get("method-keywords")
    if not isinstance(name, str) or not isinstance(keywords, str):
        raise ConfigError("run config needs 'method' (a name) and 'method-keywords' (JSON)")
    return _configured(name, keywords)


class MethodClient(ABC):
    """The client half of one method.

    ``method`` is the method's configuration: a Method object built from the run config
    and never set up (hyper-parameters only).  :meth:`handle` answers one request of one
    client; everything it keeps goes into ``state``; its data is ``node.data``
    (:class:`LocalData`).  Subclasses name their steps in their docstring.
    """

    def __init__(self, method: "Method") -> None:
        self.method = method

    @abstractmethod
    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        """Answer ``request`` of ``step`` at client ``node.partition``."""

    @staticmethod
    def secure_sum_reply(request: Record, state: Record, node: NodeContext) -> Record:
        """The reply to a secure-sum step (:data:`securefl.runtime.secure_sum_steps.STEPS`):
        every sum the request carries answered (peers' keys checked against the node's
        roster), its time reported as cryptography."""
        from securefl.runtime import secure_sum_steps
        from securefl.runtime.costs import CRYPTO

        reply = Record()
        start = time.perf_counter()
        secure_sum_steps.answer(request, state, reply, credentials=node.credentials())
        reply.config[CRYPTO] = time.perf_counter() - start
        return reply

    def unknown_step(self, step: str, *known: str) -> InputError:
        """The error for a ``step`` this method does not answer: it names the method's
        ``known`` steps and the secure sum's."""
        from securefl.runtime import secure_sum_steps

        names = ", ".join(repr(k) for k in known)
        return InputError("step", step, f"{self.method.name} knows {names} and {secure_sum_steps.STEPS}")

    def upload_model(self, reply: Record, state: Record, request: Record,
                     vectors: Mapping[str, np.ndarray], data: LocalData, node: NodeContext) -> float:
        """Upload ``vectors`` weighted by the client's |D_k| (FedAvg's weight) as the
        request's sum plan says (:func:`securefl.fl.uploads.upload`, keys signed with the
        node's credentials); returns the seconds of cryptography."""
        from securefl.fl.uploads import upload

        return upload(reply, state, request, secure=self.method.secure,
                      sum_backend=self.method.sum_backend, vectors=dict(vectors),
                      weight=float(len(data.client)), credentials=self.sum_credentials(node),
                      policy=node.policy())

    def sum_credentials(self, node: NodeContext) -> "Credentials | None":
        """The node's credentials where this method's sums are real secure aggregation
        (they sign its keys), else ``None`` (a plaintext run needs no identity)."""
        if self.method.secure == "real" and self.method.sum_backend == "secagg":
            return node.credentials()
        return None

    @staticmethod
    def data(node: NodeContext) -> LocalData:
        """The node's :class:`LocalData` (ConfigError if the node has none)."""
        if not isinstance(node.data, LocalData):
            raise ConfigError(f"node {node.partition} holds no local data for a method")
        return node.data

    @staticmethod
    def reports(node: NodeContext) -> bool:
        """Whether this run wants the simulation's reports (module docstring)."""
        return bool(node.run_config.get("reports", False))


class MethodProgramClient(ClientHalf):
    """The client side of program :data:`PROGRAM`: checks the configured method against the
    node's own privacy policy (:meth:`securefl.runtime.policy.PrivacyPolicy.check_method`:
    mode, sum backend, crypto seed, DP parameters; ProtocolError below it), then
    dispatches to the method's client half."""

    program = PROGRAM

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        method = configured_method(node.run_config)
        node.policy().check_method(method)  # the run config may ask for more privacy, never less
        return type(method).client_half(method).handle(step, request, state, node)


def report_pseudo_labels(reply: Record, pseudo: np.ndarray, data: LocalData) -> None:
    """Put a client's pseudo-labels and their hits on its hidden labels into ``reply``
    (a report: see the module docstring)."""
    client = data.client
    unlabeled = ~client.labeled
    reply.arrays[f"{REPORT}pseudo_labels"] = np.asarray(pseudo, dtype=np.int64)
    reply.config[f"{REPORT}hits"] = int((np.asarray(pseudo)[unlabeled] == client.y[unlabeled]).sum())
    reply.config[f"{REPORT}unlabeled"] = int(unlabeled.sum())


def collect_pseudo_labels(replies: Mapping[int, Record], clients: list[int]
                          ) -> tuple[str | None, float | None]:
    """The round's pseudo-label digest (clients in ``clients`` order) and accuracy from
    the reports; ``(None, None)`` unless every client reported."""
    key = f"{REPORT}pseudo_labels"
    if not clients or not all(c in replies and key in replies[c].arrays for c in clients):
        return None, None
    hits = sum(int(replies[c].config[f"{REPORT}hits"]) for c in clients)
    total = sum(int(replies[c].config[f"{REPORT}unlabeled"]) for c in clients)
    digest = label_digest([np.asarray(replies[c].arrays[key]) for c in clients])
    return digest, (hits / total if total else None)


def label_digest(labels: list[np.ndarray] | np.ndarray) -> str:
    """SHA-256 (hex) of a sequence of int label arrays, order-sensitive."""
    digest = hashlib.sha256()
    for array in labels if isinstance(labels, list) else [labels]:
        digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
        digest.update(b"|")
    return digest.hexdigest()
