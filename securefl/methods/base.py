"""What every FSSL method implements, so that the runner treats them alike.

A method is configured by keyword hyper-parameters only, prepared once by
:meth:`Method.setup` on a :class:`~securefl.data.federation.Federation` (warm-up,
pre-training), then advanced one communication round at a time by
:meth:`Method.run_round`.  :meth:`state_dict` / :meth:`load_state_dict` capture everything
needed to resume bit-for-bit (weights, optimiser and RNG states).

**Hyper-parameters, declared once.**  A method class names its hyper-parameter dataclass
(``hyper``, :mod:`securefl.methods.hyper`) and writes no constructor: :class:`Method`'s
takes the run parameters (:data:`~securefl.methods.hyper.RUN_PARAMETERS`) and exactly the
dataclass's fields as keyword-only keywords, refuses any other keyword with a TypeError
naming it (as Python does), builds the dataclass from the keywords (which checks every
value, as :func:`~securefl.methods.build_method` does) and stores each value as an
attribute of the same name (``method.lr``), nothing else -- scikit-learn's convention.
Each class's ``__signature__`` lists those keywords with their defaults, so
``inspect.signature(FedAnchor)`` and ``help(FedAnchor)`` show them; a subclass that adds
hyper-parameters names a dataclass that extends its base's.  A class may override
``__init__`` to do more work (``def __init__(self, **keywords)``, calling
``super().__init__(**keywords)`` first), never to take a parameter of its own: a class
whose constructor names one is refused when it is defined (TypeError).

Evaluation is not the method's business: ``setup`` receives the federation's training
view (:meth:`~securefl.data.federation.Federation.for_training`, no validation or test
set), ``run_round`` reports what the round cost, and after every round the runner asks
:meth:`Method.predict` for the labels the method's current model assigns to the held-out
images and scores them itself (:meth:`Method.score`): validation accuracy to select the
round, test accuracy to report.

``secure="real"`` routes every cross-party step through :mod:`securefl.crypto` /
:mod:`securefl.protocols` (its secure sums through ``sum_backend``: ``"secagg"`` or
``"he"``); ``secure="plaintext"`` computes identical outputs directly.

**Two kinds of randomness.**  ``seed`` drives the simulation (initialisation, client
sampling, batches): anyone who knows it can replay it, so no secret may come from it.
``crypto_seed`` drives the secrets that shape a method's outputs -- FedProp's LSH seed
shares (hence its hyperplanes), ProtoFSSL's DP noise: :meth:`Method.crypto_seed_for`
derives one seed per purpose and round by SHA-256, and the protocols expand it with
AES-CTR.  ``crypto_seed=None`` means:

- ``secure="real"``: no fixed seed; every such secret comes from the OS CSPRNG (a
  deployment, and the default of the library);
- ``secure="plaintext"``: :func:`plaintext_crypto_seed` of ``seed`` -- the placeholder
  protects nothing, and a plaintext run stays reproducible from ``seed`` alone.

Real and plaintext runs agree bit for bit only when both get the same explicit
``crypto_seed`` (``securefl run --secure both`` does that, and publishes the seed).
Keys and masks whose values cannot change an output (X25519 keys, pairwise masks, the HE
key, SHADE's OTs) always come from the OS CSPRNG.

**Device.**  ``device`` ("auto", "cpu", "cuda", "cuda:<index>"; :mod:`securefl.fl.device`)
is where the method's models train and predict, at the server and (a run-config keyword
like the others) at its clients; ``torch_device`` is what it resolves to on this machine.
It is a run parameter, not a hyper-parameter: on the CPU it changes nothing, on CUDA the
results differ from the CPU's in the last bits and in the random streams, not in kind.

**Server half and client half.**  Every method is split into halves
(:mod:`securefl.methods.halves`): this object is its server half, ``setup(federation, *,
transport=None)`` connects it to a transport (:meth:`Method._connect`: in process over the
federation's clients by default) and ``run_round`` is one round of its server half over
that transport; its client half (``client_half``) runs at the clients.  The server half
reads only the federation's public facts, so every method runs on any transport.
"""

from __future__ import annotations

import hashlib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, ClassVar, TypeVar

import numpy as np

from securefl.errors import InputError
from securefl.fl.aggregation import SUM_BACKENDS
from securefl.fl.device import resolve_device
from securefl.methods.halves import MethodClient, MethodProgramClient, local_data, run_config
from securefl.methods.hyper import RUN_PARAMETERS, Hyper

SECURE_MODES = ("real", "plaintext")

T = TypeVar("T")


def _signature(hyper: type[Hyper]) -> inspect.Signature:
    """The signature of a method class with dataclass ``hyper``: the run parameters of
    :meth:`Method.__init__`, then ``hyper``'s fields with their defaults, all keyword-only."""
    run = [parameter for parameter in inspect.signature(Method.__init__).parameters.values()
           if parameter.kind is inspect.Parameter.KEYWORD_ONLY]
    hyper_parameters = [
        inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY, annotation=spec.type,
                          default=spec.default if spec.default is not MISSING
                          else inspect.Parameter.empty)
        for spec in fields(hyper)]
    return inspect.Signature([*run, *hyper_parameters])


def plaintext_crypto_seed(seed: int) -> int:
    """The fixed crypto seed of a plaintext run with simulation seed ``seed``: 63 bits of
    SHA-256 of the seed (public by construction; below 2^63, so a config can name it)."""
    digest = hashlib.sha256(f"securefl/plaintext-crypto-seed/{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


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
    :meth:`~securefl.methods.protofssl.server.ProtoFSSL.privacy_report`) or ``None``.
    ``seconds_at_bandwidth`` (FedProp) projects the round onto 100 Mbit/s, 1 Gbit/s and
    10 Gbit/s links: ``cpu_seconds + 8 * link_bytes / bandwidth`` with ``cpu_seconds`` the
    round's process CPU time (all clients and the server) and ``link_bytes`` the busiest
    client's CrossClientLP bytes in its busier direction plus one model transfer
    (:func:`securefl.crypto.seconds_at_bandwidth`); ``None`` where a method does not report it.

    Time: ``seconds`` is the round's wall time, ``train_seconds`` the clients' local
    computation (training, features, local pseudo-labels) and ``crypto_seconds`` its
    cryptography (clients and server); every round runs on a transport
    (:mod:`securefl.methods.halves`) and also reports (:func:`round_bookkeeping`)
    ``messaging_seconds`` (exchange time not spent in the clients' handlers,
    :class:`securefl.runtime.costs.RoundMeter`), ``bytes_down_per_client`` /
    ``bytes_up_per_client`` (the payload the transport measured per participating client,
    each way; the model and protocol bytes above are the nominal accounting every method
    shares) and ``participation`` (``members``, ``survivors``, ``dropped``: step ->
    clients, ``failed``: client -> error); ``None`` only in a result built by hand.

    Label coverage (FedProp; ``None`` elsewhere): ``label_mass_median`` is the median,
    over the unlabeled points of the clients that got pseudo-labels, of the label mass
    sum_c Z_ic that reached them before Algorithm 1 normalises it away -- the server
    computes it from the columns of S it solved (it learns nothing new).
    ``label_coverage`` is a *simulation-only* diagnostic that no party of the protocol
    learns, filled in by the runner (:meth:`Method.label_coverage`) from the
    simulation's labels, never sent over the transport and never used in training.
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
    seconds_at_bandwidth: dict[str, float] | None = None
    messaging_seconds: float | None = None
    bytes_down_per_client: float | None = None
    bytes_up_per_client: float | None = None
    participation: dict[str, Any] | None = None
    label_mass_median: float | None = None
    label_coverage: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def round_bookkeeping(meter: Any, *, members: Sequence[int], survivors: Sequence[int],
                      dropped: Mapping[str, Sequence[int]] | None = None,
                      failed: Mapping[int, str] | None = None) -> dict[str, Any]:
    """The :class:`RoundResult` keywords every round on a transport fills alike, from its
    :class:`~securefl.runtime.costs.RoundMeter` ``meter``: ``messaging_seconds``,
    ``bytes_down_per_client`` / ``bytes_up_per_client`` (the meter's mean per member) and
    ``participation`` -- ``members``, ``survivors``, ``dropped`` (step -> clients, steps
    that dropped nobody left out) and ``failed`` (client, as a string, -> error, by
    client).  Use: ``RoundResult(round=..., ..., **round_bookkeeping(meter, ...))``."""
    down, up = meter.bytes_per_client()
    return {"messaging_seconds": meter.messaging_seconds,
            "bytes_down_per_client": down, "bytes_up_per_client": up,
            "participation": {
                "members": [int(k) for k in members], "survivors": list(survivors),
                "dropped": {step: list(who) for step, who in (dropped or {}).items() if who},
                "failed": {str(c): text for c, text in sorted((failed or {}).items())}}}


class Method(ABC):
    """Base class of the FSSL methods and baselines."""

    name: ClassVar[str]
    hyper: ClassVar[type[Hyper]] = Hyper
    """The method's hyper-parameter dataclass: its fields are the constructor's keywords
    besides the run parameters (module docstring)."""
    uses_pseudo_labels: ClassVar[bool] = False
    client_half: ClassVar[type[MethodClient]]
    """The method's client half (:class:`~securefl.methods.halves.MethodClient`): what a
    client does with each of the method's requests.  The server half reads no client's
    data, so every method runs on any transport (Flower included)."""
    on_phase: Callable[[str], None] | None = None
    """Set by the runner: told (a short text) when a long phase starts, e.g. a warm-up round."""

    def _phase(self, text: str) -> None:
        """Announce a long phase to whoever listens (progress lines); no-op otherwise."""
        if self.on_phase is not None:
            self.on_phase(text)

    def __init_subclass__(cls, **keywords: Any) -> None:
        """Set ``cls.__signature__`` from its dataclass; a constructor of its own may add
        work (taking ``**keywords`` and passing them on), not parameters: TypeError."""
        super().__init_subclass__(**keywords)
        init = cls.__dict__.get("__init__")
        declared = [parameter.name for parameter in
                    (inspect.signature(init).parameters.values() if init is not None else ())
                    if parameter.kind is not inspect.Parameter.VAR_KEYWORD
                    and parameter.name not in ("self", *RUN_PARAMETERS)]
        if declared:
            raise TypeError(f"{cls.__name__}.__init__ takes {', '.join(declared)}: declare each "
                            "hyper-parameter as a field of the class's dataclass (hyper), "
                            "not as a constructor keyword")
        cls.__signature__ = _signature(cls.hyper)

    def __init__(self, *, secure: str = "plaintext", seed: int = 0,
                 crypto_seed: int | None = None, sum_backend: str = "secagg",
                 device: str = "cpu", **hyper: Any) -> None:
        unknown = sorted(set(hyper) - {spec.name for spec in fields(self.hyper)})
        if unknown:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument "
                            f"{unknown[0]!r}")
        if secure not in SECURE_MODES:
            raise InputError("secure", secure, f"must be one of {SECURE_MODES}")
        if crypto_seed is not None and (
            isinstance(crypto_seed, bool) or not isinstance(crypto_seed, (int, np.integer)) or crypto_seed < 0
        ):
            raise InputError("crypto_seed", crypto_seed, "must be None or a non-negative integer")
        if sum_backend not in SUM_BACKENDS:
            raise InputError("sum_backend", sum_backend, f"must be one of {SUM_BACKENDS}")
        self.secure = secure
        self.seed = seed
        self.crypto_seed = crypto_seed
        self.sum_backend = sum_backend
        self.device = device
        self.torch_device = resolve_device(device)
        checked = self.hyper(**hyper)
        for spec in fields(checked):
            setattr(self, spec.name, getattr(checked, spec.name))

    def crypto_seed_for(self, purpose: str, *labels: int) -> int | None:
        """The seed of one secret (``purpose``, e.g. ``"lsh"``, and labels such as round and
        client, which must never repeat for one purpose): SHA-256 of the crypto seed and
        the labels, or ``None`` (the protocol draws from the OS CSPRNG) in real mode
        without a crypto seed.  See the module docstring."""
        root = self.crypto_seed
        if root is None and self.secure == "plaintext":
            root = plaintext_crypto_seed(self.seed)
        if root is None:
            return None
        text = "/".join(["securefl/method-secret", str(int(root)), purpose, *(str(int(x)) for x in labels)])
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:16], "big")

    def keywords(self) -> dict[str, Any]:
        """The run parameters and hyper-parameters of this method with their current values
        (each stored under its own name, scikit-learn's ``get_params``): the keywords that
        build it again."""
        names = (*RUN_PARAMETERS, *(spec.name for spec in fields(self.hyper)))
        return {name: getattr(self, name) for name in names}

    def check_hyper(self) -> Hyper:
        """This method's hyper-parameters, as they are now, built into its dataclass
        (``hyper``): the one place a hyper-parameter is checked
        (:mod:`securefl.methods.hyper`).  Every ``setup`` calls it first, so a method
        changed after it was built is refused as its constructor and
        :func:`~securefl.methods.build_method` refuse a bad keyword: InputError naming the
        field and its value."""
        return self.hyper(**{spec.name: getattr(self, spec.name) for spec in fields(self.hyper)})

    def _connect(self, federation: Any, transport: Any = None) -> Any:
        """Set ``self.transport`` (split methods, in ``setup``): ``transport`` if given,
        else an :class:`~securefl.runtime.transport.InProcessTransport` whose nodes hold the
        federation's clients (:class:`~securefl.methods.halves.LocalData`) and run in
        :meth:`_client_order`.  Returns it."""
        from securefl.runtime.policy import POLICY, PrivacyPolicy
        from securefl.runtime.transport import InProcessTransport, NodeContext

        if transport is None:
            run = run_config(self)
            count = federation.num_clients
            policy = PrivacyPolicy.for_method(self)
            nodes = [NodeContext(k, {"partition-id": k, "num-partitions": count, POLICY: policy},
                                 run, local_data(federation, k)) for k in range(count)]
            transport = InProcessTransport(MethodProgramClient(), nodes,
                                           order=lambda clients: self._client_order(clients))
        self.transport = transport
        return transport

    def _client_states(self) -> dict[int, Any]:
        """The clients' state Records to checkpoint (in process; empty on other transports)."""
        from securefl.runtime.transport import InProcessTransport

        transport = getattr(self, "transport", None)
        return transport.client_states() if isinstance(transport, InProcessTransport) else {}

    def _adopt_client_states(self, states: dict[int, Any]) -> None:
        """Give checkpointed client states back to the in-process transport."""
        from securefl.runtime.transport import InProcessTransport

        if states and not isinstance(getattr(self, "transport", None), InProcessTransport):
            raise InputError("state", sorted(states), "client states resume in process only")
        if states:
            self.transport.adopt(states)

    def _client_order(self, clients: Sequence[int]) -> list[int]:
        """The order in which a round's clients compute in process: the given one.  Results
        are collected per client (:meth:`_per_client`), so no result may depend on this
        order (a transport runs clients in any order; the tests permute it)."""
        return [int(k) for k in clients]

    def _per_client(self, clients: Sequence[int], work: Callable[[int], T]) -> list[T]:
        """``work(k)`` for every client ``k`` of ``clients``, run in :meth:`_client_order`,
        returned in the order of ``clients``."""
        done = {k: work(k) for k in self._client_order(clients)}
        return [done[int(k)] for k in clients]

    @abstractmethod
    def setup(self, federation: Any) -> None:
        """Build models and run any warm-up / pre-training on ``federation``."""

    @abstractmethod
    def run_round(self, round_index: int) -> RoundResult:
        """Run communication round ``round_index`` (0-based); no evaluation."""

    def label_coverage(self, federation: Any) -> dict[str, Any] | None:
        """A simulation-only diagnostic of the last round, or ``None`` (the default).

        The runner (the simulator, which holds every label) calls it after
        :meth:`run_round` with the federation's training view and stores the answer in
        :attr:`RoundResult.label_coverage`.  Its answer may read labels no party of the
        protocol learns (class sets of the clients, the hidden labels of unlabeled
        points), so nothing it computes may reach the transport or training."""
        return None

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
