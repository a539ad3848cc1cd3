"""The secure-sum backend registry: a backend is one module plus one registration.

This file is that module for a toy backend (``test-additive``: each client sends its
encoded vector in the clear and the server adds them; it protects nothing).  After one
:func:`~securefl.runtime.sum_backends.register` call the same entry points that run ``secagg``
run it: :func:`securefl.runtime.secure_sum` (its in-process simulator is the generic driver
on the in-process transport), a method's upload over a transport
(:class:`securefl.fl.uploads.UploadPlan`), FedSemi-style group sums, an experiment's
``aggregation`` key and a node's privacy policy; none of them names it.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import pytest

from securefl.crypto.channel import SERVER
from securefl.crypto.fixed_point import ring_sum
from securefl.errors import ConfigError, DropoutError, InputError
from securefl.experiments.config import config_from_dict
from securefl.fl import group_sums, uploads
from securefl.runtime import secure_sum, sum_backends, sum_names
from securefl.runtime.engine import StepTable
from securefl.runtime.policy import PrivacyPolicy
from securefl.runtime.sum_backends import SumBackend, SumOutcome, SumResult, SumSpec
from securefl.runtime.transport import Exchange, InProcessTransport, NodeContext, Record, Transport

NAME = "test-additive"


class Additive(SumBackend):
    """Insecure additive sum: round 0 carries the encoded vector itself."""

    name: ClassVar[str] = NAME

    def contribute(self, state, reply, *, name, spec, index, encoded, credentials, policy,
                   seed=None) -> None:
        policy.check_cohort(spec.members, spec.threshold)
        reply.arrays[f"additive/{name}"] = np.asarray(encoded)

    def new_spec(self, members: Sequence[int], *, threshold: int, dim: int,
                 modulus_bits: int) -> SumSpec:
        return SumSpec(secrets.token_bytes(16), len(members), threshold, dim, modulus_bits,
                       tuple(int(c) for c in members))

    def collect(self, transport: Transport, specs: Mapping[str, SumSpec],
                members: Mapping[str, Sequence[int]], first: Exchange, *,
                timeout: float | None = None) -> SumOutcome:
        sums = {}
        for name, spec in specs.items():
            group = [int(c) for c in members[name]]
            alive = [c for c in group
                     if f"additive/{name}" in first.replies.get(c, Record()).arrays]
            if len(alive) < spec.threshold:
                raise DropoutError(f"{len(alive)} of {len(group)} contributed to {name!r}")
            vectors = [first.replies[c].arrays[f"additive/{name}"] for c in alive]
            sent = {c: int(v.nbytes) for c, v in zip(alive, vectors)}
            sums[name] = SumResult(ring_sum(vectors, spec.modulus_bits), tuple(alive),
                                   {"advertise": tuple(c for c in group if c not in alive)}, sent,
                                   {SERVER: sum(sent.values())})
        return SumOutcome(sums, dict(first.failed), 0.0)


@pytest.fixture
def additive():
    backend = sum_backends.register(Additive())
    yield backend
    sum_backends.unregister(NAME)


def test_the_registry_names_its_backends_and_refuses_unknown_or_taken_names(additive):
    assert sum_backends.names() == ("secagg", "he", "plaintext", NAME)
    assert sum_backends.names(secure=True) == ("secagg", "he", NAME)
    with pytest.raises(InputError) as caught:
        sum_backends.get("rot13", parameter="sum_backend")
    assert caught.value.parameter == "sum_backend"
    with pytest.raises(InputError, match="registered already"):
        sum_backends.register(Additive())
    with pytest.raises(InputError):
        sum_backends.get("plaintext", secure=True)


def test_a_registered_backend_runs_through_secure_sum(additive):
    inputs = [np.arange(6, dtype=np.int64) * (u + 1) for u in range(5)]
    result = secure_sum(inputs, threshold=3, backend=NAME, dropouts={1: "advertise"})
    oracle = secure_sum(inputs, threshold=3, backend="plaintext", dropouts={1: "advertise"})
    assert result.survivors == oracle.survivors == (0, 2, 3, 4)
    assert result.total.tobytes() == oracle.total.tobytes()
    assert result.bytes_sent == {u: 48 for u in (0, 2, 3, 4)}
    with pytest.raises(DropoutError):
        secure_sum(inputs, threshold=3, backend=NAME, dropouts={0: 0, 1: 0, 2: 0})


class _Uploader(StepTable):
    """A client that uploads its vector as its own configuration says (the node's data) and
    answers its backend's later steps."""

    program = "test-upload"

    @staticmethod
    def _upload(request: Record, state: Record, node: NodeContext) -> Record:
        reply = Record()
        secure, backend = node.node_config["secure"], node.node_config["sum-backend"]
        if "group" in node.node_config:
            group_sums.contribute(reply, state, request, secure=secure, sum_backend=backend,
                                  vectors=node.data, weight=None, credentials=node.credentials(),
                                  policy=node.policy())
        else:
            uploads.upload(reply, state, request, secure=secure, sum_backend=backend,
                           vectors=node.data, weight=float(node.partition + 1),
                           credentials=node.credentials(), policy=node.policy())
        return reply

    @staticmethod
    def _answer(request: Record, state: Record, node: NodeContext) -> Record:
        reply = Record()
        sum_backends.get(node.node_config["sum-backend"]).answer(
            request, state, reply, credentials=node.credentials())
        return reply

    handlers: ClassVar = {"upload": _upload,
                          **dict.fromkeys(sum_backends.get("secagg").client_steps, _answer)}


def _transport(backend: str, vectors: dict[int, dict[str, np.ndarray]],
               **extra) -> InProcessTransport:
    policy = PrivacyPolicy(secure="real", sum_backends=(backend,), min_cohort=2)
    nodes = [NodeContext(c, {"secure": "real", "sum-backend": backend, "policy": policy, **extra},
                         {}, vectors[c]) for c in sorted(vectors)]
    return InProcessTransport(_Uploader(), nodes)


def test_a_registered_backend_runs_a_methods_upload_over_a_transport(additive):
    rng = np.random.default_rng(0)
    vectors = {c: {"model": rng.normal(size=7)} for c in range(4)}
    averages = {}
    for backend in (NAME, "secagg"):
        transport = _transport(backend, vectors)
        plan = uploads.UploadPlan.new(secure="real", sum_backend=backend, members=range(4),
                                      dims={"model": 7})
        first = transport.exchange("upload", {c: plan.request(c) for c in range(4)})
        outcome = plan.collect(transport, first)
        assert outcome.survivors == (0, 1, 2, 3) and not outcome.failed
        averages[backend] = outcome.averages["model"]
        if backend == NAME:
            assert len(outcome.exchanges) == 0  # round 0 is all it runs
            sent = first.replies[0].arrays["additive/model"]
            assert sent.dtype == np.uint64 and sent.shape == (8,)  # [w v, w] encoded, no mask
    expected = sum((c + 1) * vectors[c]["model"] for c in range(4)) / 10.0
    assert np.array_equal(averages[NAME], averages["secagg"])
    assert np.allclose(averages[NAME], expected, atol=1e-8)


def test_a_registered_backend_runs_group_sums_with_members_of_their_own(additive):
    vectors = {0: {"a": np.ones(3)}, 1: {"a": np.ones(3) * 2, "b": np.ones(2)},
               2: {"a": np.ones(3) * 3, "b": np.ones(2) * 5}, 3: {"b": np.ones(2) * 7}}
    transport = _transport(NAME, vectors, group=True)
    plan = group_sums.GroupSumPlan.new(secure="real", sum_backend=NAME,
                                       groups={"a": (0, 1, 2), "b": (1, 2, 3)},
                                       dims={"a": 3, "b": 2}, weighted=False)
    first = transport.exchange("upload", {c: plan.request(c) for c in range(4)})
    outcome = plan.collect(transport, first)
    assert outcome.totals["a"].tolist() == [6.0] * 3 and outcome.totals["b"].tolist() == [13.0] * 2
    assert outcome.survivors == {"a": (0, 1, 2), "b": (1, 2, 3)}


def test_experiment_configs_and_policies_accept_exactly_the_registered_backends(additive):
    config = {"aggregation": NAME, "methods": ["fedavg-labeled"]}
    assert config_from_dict(config).aggregation == NAME
    assert PrivacyPolicy(sum_backends=(NAME,)).sum_backends == (NAME,)
    sum_backends.unregister(NAME)
    try:
        with pytest.raises(ConfigError, match="aggregation"):
            config_from_dict(config)
        with pytest.raises(InputError, match="policy-sum-backends"):
            PrivacyPolicy(sum_backends=(NAME,))
    finally:
        sum_backends.register(Additive())


def test_a_simulated_backend_is_refused_on_a_deployment():
    class Elsewhere(Transport):
        """Any transport but the in-process one (a deployment)."""

        @property
        def clients(self):
            return (0, 1, 2)

        def _exchange(self, step, requests, timeout):
            raise AssertionError("a refused sum sends nothing")

    assert not sum_backends.get("he").deployable
    plan = uploads.UploadPlan.new(secure="real", sum_backend="he", members=range(3), dims={"m": 2})
    with pytest.raises(InputError, match="simulated in process only"):
        plan.collect(Elsewhere(program="test-upload"), Exchange("upload", {}))


def test_the_name_index_declares_the_built_in_backends_with_their_kinds(additive):
    """The index a node's policy reads (sum_names) is the registry's, built-ins declared."""
    assert sum_names.names() == sum_backends.names()
    assert sum_names.names(secure=True) == sum_backends.names(secure=True)
    assert sum_names.BUILT_IN == {name: sum_backends.get(name).secure
                                  for name in sum_backends.names() if name != NAME}
    with pytest.raises(InputError, match="secure=False"):
        sum_names.add("plaintext", secure=True)  # a declared name with the other kind


def test_a_policy_knows_the_backends_without_importing_them():
    """The transport reads the node's policy and the backends run on the transport: the
    policy takes the names from the index, so neither imports the backends."""
    code = ("import sys\n"
            "from securefl.runtime.transport import InProcessTransport\n"
            "from securefl.runtime.policy import PrivacyPolicy\n"
            "assert PrivacyPolicy.simulator().sum_backends == ('secagg', 'he')\n"
            "assert PrivacyPolicy(sum_backends=('he',)).sum_backends == ('he',)\n"
            "assert 'securefl.runtime.sum_backends' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
