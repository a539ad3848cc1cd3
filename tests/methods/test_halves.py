"""The method split (securefl.methods.halves) for the FedAvg family: the server half reads
no client's data, the client half decides how it uploads, reports leave a client only when
the run asks, and a method's configuration travels losslessly in a run config.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from securefl.data import ClientData, Federation
from securefl.errors import InputError, ProtocolError
from securefl.fl import model_vector
from securefl.methods import METHOD_NAMES, build_method, method_class
from securefl.methods.fedavg.server import FedAvgMethod
from securefl.methods.halves import MethodProgramClient, configured_method, local_data, run_config
from securefl.runtime.policy import POLICY, PrivacyPolicy
from securefl.runtime.transport import InProcessTransport, NodeContext, Record

FEDPROP = ("fedprop", "fedprop-mt")
FEDAVG = tuple(n for n in METHOD_NAMES
               if issubclass(method_class(n), FedAvgMethod) and n not in FEDPROP)
"""The FedAvg family (server halves on :class:`FedAvgMethod`), from the registry."""
TINY = {"clients_per_round": 3, "local_epochs": 1, "batch_size": 8, "lr": 0.05}


def hyper(name):
    return {**TINY, **({"warmup_rounds": 1} if name in ("fedavg-locallp", "fedavg-pl") else {})}


def nodes_of(method, federation, **run):
    """In-process nodes of ``method``: the simulator's policy for it, no identity (a real
    secure sum then refuses to run: see the in-process transport for throwaway ones)."""
    config = {**run_config(method), **run}
    policy = PrivacyPolicy.for_method(method)
    return [NodeContext(k, {"partition-id": k, POLICY: policy}, config, local_data(federation, k))
            for k in range(federation.num_clients)]


def rounds(method, federation, count=2):
    results = [method.run_round(r) for r in range(count)]
    return [r.pseudo_label_digest for r in results], method.score(federation.test.x, federation.test.y)


@pytest.mark.parametrize("secure", ["plaintext", "real"])
@pytest.mark.parametrize("name", FEDAVG)
def test_the_server_half_reads_no_clients_data(name, secure, tiny_digits):
    """Give the server half a federation whose client images and labels are noise (only
    the public facts -- how many clients, which hold labels -- are true) while the nodes
    hold the real data: every output is the same as with the true federation."""
    rng = np.random.default_rng(0)
    noise = Federation(
        tiny_digits.name,
        [ClientData(rng.random(c.x.shape, dtype=np.float32), rng.permutation(c.y), c.labeled.copy())
         for c in tiny_digits.clients],
        tiny_digits.num_classes, tiny_digits.input_shape)
    honest = build_method(name, secure=secure, seed=1, **hyper(name))
    honest.setup(tiny_digits.for_training())
    blind = build_method(name, secure=secure, seed=1, **hyper(name))
    blind.setup(noise, transport=InProcessTransport(MethodProgramClient(),
                                                    nodes_of(blind, tiny_digits)))
    assert rounds(blind, tiny_digits) == rounds(honest, tiny_digits)


@pytest.mark.parametrize("name", ["fedavg-locallp", "fedavg-pl"])
def test_local_pseudo_labels_leave_a_client_only_as_reports_the_run_asks_for(name, tiny_digits):
    replies = []

    def run(reports):
        method = build_method(name, seed=2, **hyper(name))
        transport = InProcessTransport(MethodProgramClient(),
                                       nodes_of(method, tiny_digits, reports=reports))
        deliver = transport._exchange

        def watched(step, requests, timeout):
            result = deliver(step, requests, timeout)
            replies.extend((reports, reply) for reply in result.replies.values())
            return result

        transport._exchange = watched
        method.setup(tiny_digits.for_training(), transport=transport)
        return method.run_round(0)

    quiet, measured = run(False), run(True)
    assert quiet.pseudo_label_digest is None and quiet.pseudo_label_accuracy is None
    assert measured.pseudo_label_digest is not None and measured.pseudo_label_accuracy is not None
    reported = [any(k.startswith("report/") for k in (*r.arrays, *r.config)) for on, r in replies if on]
    unreported = [any(k.startswith("report/") for k in (*r.arrays, *r.config)) for on, r in replies if not on]
    assert any(reported) and not any(unreported)


def test_a_real_mode_client_never_uploads_in_the_clear(tiny_digits):
    method = build_method("fedavg-labeled", secure="real", seed=0, **TINY)
    method.setup(tiny_digits.for_training())
    node = method.transport.nodes[0]  # with its identity (the in-process throwaway roster)

    request = Record({"model": model_vector(method.network)}, {"round": 0, "lr": 0.05, "warmup": False})
    with pytest.raises(ProtocolError, match="secure-sum parameter"):
        MethodProgramClient().handle("train", request, Record(), node)
    uploads = []
    deliver = method.transport._exchange

    def watched(step, requests, timeout):
        result = deliver(step, requests, timeout)
        uploads.extend(k for reply in result.replies.values() for k in reply.arrays)
        return result

    method.transport._exchange = watched
    method.run_round(0)
    assert uploads and not any(k.startswith("upload/") for k in uploads)
    assert any(k.startswith("secagg/model/out") for k in uploads)


def test_unknown_steps_and_requests_without_a_model_are_refused(tiny_digits):
    method = build_method("fedavg-mt", **TINY)
    node = nodes_of(method, tiny_digits)[0]
    with pytest.raises(InputError, match="step"):
        MethodProgramClient().handle("dance", Record(), Record(), node)
    with pytest.raises(ProtocolError, match="without a model"):
        MethodProgramClient().handle("train", Record(config={"round": 0, "lr": 0.1}), Record(), node)


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_a_methods_configuration_travels_losslessly_in_its_run_config(name):
    method = build_method(name, secure="real", seed=5, crypto_seed=2**100 + 1, clients_per_round=4)
    config = run_config(method)
    assert all(isinstance(v, (str, bool)) for v in config.values())  # flat, as Flower's
    rebuilt = configured_method(json.loads(json.dumps(config)))
    assert type(rebuilt) is type(method) and rebuilt.keywords() == method.keywords()
    assert json.loads(run_config(method, public_crypto_seed=False)["method-keywords"])["crypto_seed"] is None


@pytest.mark.parametrize("secure", ["plaintext", "real"])
@pytest.mark.parametrize("name", FEDPROP)
def test_fedprops_server_half_reads_no_clients_data(name, secure, tiny_digits):
    """FedProp's CrossClientLP runs at the clients (embedding, LSH, SHADE, padded sums):
    the server half given a federation of noise while the nodes hold the real data gives
    the same pseudo-labels, models and bytes as the true federation -- what lets FedProp
    and FedProp+MT run on any transport."""
    rng = np.random.default_rng(1)
    noise = Federation(
        tiny_digits.name,
        [ClientData(rng.random(c.x.shape, dtype=np.float32), rng.permutation(c.y), c.labeled.copy())
         for c in tiny_digits.clients],
        tiny_digits.num_classes, tiny_digits.input_shape)
    keywords = {**TINY, "warmup_rounds": 1, "L": 64, "crypto_seed": 7}
    honest = build_method(name, secure=secure, seed=1, **keywords)
    honest.setup(tiny_digits.for_training())
    blind = build_method(name, secure=secure, seed=1, **keywords)
    blind.setup(noise, transport=InProcessTransport(MethodProgramClient(),
                                                    nodes_of(blind, tiny_digits)))
    digests, accuracy = rounds(blind, tiny_digits)
    assert (digests, accuracy) == rounds(honest, tiny_digits)
    assert all(digests)


def test_fedprop_with_the_lwe_backend_reads_no_clients_data(tiny_digits):
    """hamming_backend="lwe" in real mode runs at the clients too (securefl.crypto.lwe_hops):
    the server half given a federation of noise gives the true federation's pseudo-label
    digests, accuracy and nominal bytes, and the round ran the LWE hops."""
    noise = noise_of(tiny_digits, seed=1)
    keywords = {**TINY, "warmup_rounds": 1, "L": 64, "crypto_seed": 7, "hamming_backend": "lwe"}
    honest = build_method("fedprop", secure="real", seed=1, **keywords)
    honest.setup(tiny_digits.for_training())
    blind = build_method("fedprop", secure="real", seed=1, **keywords)
    transport = InProcessTransport(MethodProgramClient(), nodes_of(blind, tiny_digits))
    blind.setup(noise, transport=transport)
    results = [[m.run_round(r) for r in range(2)] for m in (blind, honest)]
    assert [r.pseudo_label_digest for r in results[0]] == [r.pseudo_label_digest for r in results[1]]
    assert all(r.pseudo_label_digest for r in results[0])
    assert [r.bytes_protocol_per_client for r in results[0]] == [r.bytes_protocol_per_client for r in results[1]]
    assert blind.score(tiny_digits.test.x, tiny_digits.test.y) == honest.score(tiny_digits.test.x, tiny_digits.test.y)
    assert {"cclp/lwe/3"} <= set(blind.transport.stats.seconds) and "cclp/shade/1" not in blind.transport.stats.seconds


OTHERS = tuple(n for n in METHOD_NAMES if n not in FEDAVG + FEDPROP)
"""Every other registered method (FedSemi, FedAnchor, ProtoFSSL, ...), each with the small
settings of ``tests/methods/test_client_order.py``."""
CONVERTED_TINY = {**TINY, "rounds": 5, "n_unlabeled": 10, "helpers": 2, "pretrain_epochs": 1,
                  "server_batch_size": 20, "threshold": 0.0, "confidence": 0.3, "helper_interval": 1}


def converted_hyper(name):
    from securefl.methods import hyper_parameters

    return {k: v for k, v in CONVERTED_TINY.items() if k in hyper_parameters(name)}


def noise_of(federation, seed=0):
    """``federation`` with every client's images and labels replaced by noise (the public
    facts -- how many clients, which points are labeled -- and the server's own anchor
    set kept)."""
    rng = np.random.default_rng(seed)
    return Federation(
        federation.name,
        [ClientData(rng.random(c.x.shape, dtype=np.float32), rng.permutation(c.y), c.labeled.copy())
         for c in federation.clients],
        federation.num_classes, federation.input_shape, server=federation.server)


@pytest.mark.parametrize("secure", ["plaintext", "real"])
@pytest.mark.parametrize("name", OTHERS)
def test_every_other_server_half_reads_no_clients_data(name, secure, tiny_digits, tiny_digits_server):
    """As for the FedAvg family: the server half given a federation of noise while the
    nodes hold the real data gives every output of the true federation (models included)."""
    federation = tiny_digits_server if name == "fedanchor" else tiny_digits
    honest = build_method(name, secure=secure, seed=1, **converted_hyper(name))
    honest.setup(federation.for_training())
    blind = build_method(name, secure=secure, seed=1, **converted_hyper(name))
    blind.setup(noise_of(federation), transport=InProcessTransport(MethodProgramClient(),
                                                                    nodes_of(blind, federation)))
    assert rounds(blind, federation) == rounds(honest, federation)
    assert [model_vector(m).tobytes() for m in (v for v in vars(blind).values() if isinstance(v, torch.nn.Module))] \
        == [model_vector(m).tobytes() for m in (v for v in vars(honest).values() if isinstance(v, torch.nn.Module))]


def test_protofssls_dp_releases_are_made_by_the_clients_alone(tiny_digits):
    """ProtoFSSL with the Gaussian release: the server half given noise while the nodes
    hold the real data gives the same releases, global prototypes and privacy accounting."""
    hyper = {**converted_hyper("protofssl"), "noise_multiplier": 1.0, "clip": 1.0}
    honest = build_method("protofssl", secure="real", seed=1, crypto_seed=7, **hyper)
    honest.setup(tiny_digits.for_training())
    blind = build_method("protofssl", secure="real", seed=1, crypto_seed=7, **hyper)
    blind.setup(noise_of(tiny_digits), transport=InProcessTransport(MethodProgramClient(),
                                                                     nodes_of(blind, tiny_digits)))
    assert rounds(blind, tiny_digits) == rounds(honest, tiny_digits)
    assert np.array_equal(blind.global_prototypes, honest.global_prototypes)
    assert blind.privacy_report() == honest.privacy_report()
    assert all(np.array_equal(blind.store.previous[k].vectors, p.vectors)
               for k, p in honest.store.previous.items())


@pytest.mark.parametrize("private", [False, True])
def test_protofssl_clients_send_exact_prototypes_and_counts_only_into_the_secure_sum(private, tiny_digits):
    """Real mode: what leaves a ProtoFSSL client in the clear is its model's secure-sum
    messages and, as configured, its shared prototypes -- without counts unless they are
    a DP release's noised ones; the global prototypes' input (exact counts without DP)
    only as secure-sum messages."""
    hyper = {**converted_hyper("protofssl"), **({"noise_multiplier": 1.0, "clip": 1.0} if private else {})}
    method = build_method("protofssl", secure="real", seed=2, **hyper)
    method.setup(tiny_digits.for_training())
    sent = []
    deliver = method.transport._exchange

    def watched(step, requests, timeout):
        result = deliver(step, requests, timeout)
        sent.extend((step, reply) for reply in result.replies.values())
        return result

    method.transport._exchange = watched
    method.run_round(0)
    method.run_round(1)
    by_step = {}
    for step, reply in sent:
        by_step.setdefault(step, set()).update(reply.arrays)
    assert not any(k.startswith(("upload/", "sums/")) for keys in by_step.values() for k in keys)
    assert any(k.startswith("secagg/prototypes/out") for k in by_step["prototypes"])
    assert any(k.startswith("secagg/model/out") for k in by_step["train"])
    assert ("prototypes/counts" in by_step["prototypes"]) is private  # the release's noised counts
    assert "prototypes/counts" not in by_step["train"]
    assert ("prototypes/vectors" in by_step["train"]) is not private
