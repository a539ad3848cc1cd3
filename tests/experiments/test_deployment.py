"""Program ``method`` in process: the same job as ``securefl run``, nodes that load their own
partition, secure aggregation's dropout semantics, and what it refuses.

The same program runs on a real SuperLink in ``tests/deploy``; here every property is
checked in a few seconds on a tiny digits split.
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.errors import DropoutError, InputError
from securefl.experiments.config import load_config
from securefl.experiments.deployment import (
    ExperimentClient,
    build,
    federation_of,
    in_process,
    job_of,
    model_digest,
    program_config,
)
from securefl.experiments.runner import evaluate_round, load_federations
from securefl.runtime.transport import NodeContext, Record

TINY = ["partition.num_clients=3", "partition.samples_per_client=40", "partition.labeled_fraction=0.2",
        "hyper.local_epochs=1", "hyper.batch_size=8", "hyper.lr=0.05", "hyper.warmup_rounds=1"]
COMPARED = ("test_accuracy", "validation_accuracy", "model_digest", "pseudo_label_digest",
            "pseudo_label_accuracy", "bytes_model_per_client", "bytes_protocol_per_client",
            "bytes_down_per_client", "bytes_up_per_client", "participation")


EXTRA = {"fedanchor": ["hyper.clients_per_round=3"], "protofssl": ["hyper.clients_per_round=3"]}
"""Settings a method needs on three nodes (FedAnchor samples without FedProp's cap)."""


def job(method, secure="real", rounds=2, settings=(), **options):
    config = load_config(None, settings=[*TINY, *EXTRA.get(method, []), *settings],
                         methods=[method], rounds=rounds)
    return program_config(config, method, secure=secure, **options)


def runner_rounds(run):
    """What ``securefl run`` does for the job: the runner's federation, method, loop."""
    spec = job_of(run)
    federation = load_federations(spec.config)[spec.method]
    method = build(spec)
    method.setup(federation.for_training())
    rounds = []
    for r in range(spec.rounds):
        record = {**method.run_round(r).to_dict(), **evaluate_round(method, federation)}
        rounds.append({**record, "model_digest": model_digest(method)})
    return rounds


@pytest.mark.parametrize("method, secure", [("fedavg-labeled", "real"), ("fedavg-locallp", "plaintext"),
                                            ("fedavg-mt", "real"), ("fedprop", "real"),
                                            ("fedsemi-pi", "plaintext"), ("fedsemi-mt", "real"),
                                            ("fedanchor", "real"), ("protofssl", "real")])
def test_the_program_in_process_is_the_runners_job(method, secure):
    # FedProp's LSH hyperplanes come from a secret seed in real mode: a configured (public)
    # crypto seed makes the two runs comparable
    run = job(method, secure, settings=["crypto_seed=11"] if method == "fedprop" else ())
    program = in_process(run)
    reference = runner_rounds(run)
    assert len(program["rounds"]) == len(reference) == 2
    for ours, theirs in zip(program["rounds"], reference):
        for key in COMPARED:
            assert ours[key] == theirs[key], (method, ours["round"], key)
    assert program["final_accuracy"] == reference[-1]["test_accuracy"]
    if method == "fedavg-locallp":
        assert all(r["pseudo_label_digest"] for r in program["rounds"])


def test_each_node_loads_the_simulators_partition():
    run = job("fedavg-labeled")
    simulator = load_federations(job_of(run).config)["fedavg-labeled"]
    seen = {}

    class Spy(ExperimentClient):
        def handle(self, step, request, state, node):
            seen[node.partition] = node
            return super().handle(step, request, state, node)

    from securefl.experiments.deployment import ExperimentServer
    from securefl.runtime.transport import InProcessTransport

    nodes = [NodeContext(k, {"partition-id": k, "num-partitions": 3}, run) for k in range(3)]
    ExperimentServer().run(InProcessTransport(Spy(), nodes), {**run, "rounds": 1})
    federation = federation_of(run)
    for k in range(3):
        assert seen[k].data is None  # the node loads its own data
        assert np.array_equal(federation.clients[k].x, simulator.clients[k].x)
        assert np.array_equal(federation.clients[k].labeled, simulator.clients[k].labeled)


def test_dropouts_follow_secure_aggregation():
    run = job("fedavg-labeled", rounds=1)
    full = in_process(run)
    late = in_process(run, dropouts={1: "secagg/survivors"})
    early = in_process(run, dropouts={1: "secagg/ciphertexts"})
    assert late["rounds"][0]["participation"]["survivors"] == [0, 1, 2]  # input already in the sum
    assert late["model_digest"] == full["model_digest"]
    assert early["rounds"][0]["participation"]["survivors"] == [0, 2]    # masked input never sent
    assert early["rounds"][0]["participation"]["dropped"] == {"masked_input": [1]}
    assert early["model_digest"] != full["model_digest"]


def test_fedsemi_dropouts_follow_secure_aggregation_in_every_sum():
    """FedSemi-MT sums the teachers and every student layer (one secure sum each, in the
    same exchanges): a client lost before its masked input is in none of them, one lost
    at unmask is in all of them, too many lost is a DropoutError; one lost in training
    sends no FSM and joins no sum."""
    run = job("fedsemi-mt", rounds=1)
    full = in_process(run)
    late = in_process(run, dropouts={1: "secagg/survivors"})
    early = in_process(run, dropouts={1: "secagg/ciphertexts"})
    untrained = in_process(run, dropouts={1: "train"})
    assert full["rounds"][0]["participation"]["survivors"] == [0, 1, 2]
    assert late["rounds"][0]["participation"]["survivors"] == [0, 1, 2]  # inputs already in the sums
    assert late["model_digest"] == full["model_digest"]
    assert early["rounds"][0]["participation"]["survivors"] == [0, 2]    # masked inputs never sent
    assert early["rounds"][0]["participation"]["dropped"] == {"masked_input": [1]}
    assert early["model_digest"] != full["model_digest"]
    assert untrained["rounds"][0]["participation"]["dropped"] == {"train": [1]}
    assert untrained["rounds"][0]["participation"]["survivors"] == [0, 2]
    assert untrained["model_digest"] == early["model_digest"]  # the same two clients' sums
    with pytest.raises(DropoutError):
        in_process(run, dropouts={1: "secagg/ciphertexts", 2: "secagg/ciphertexts"})


def test_protofssl_dropouts_follow_its_two_sums_and_its_privacy_accounting():
    """ProtoFSSL sums the models (after ``train``) and then the global prototypes (after
    ``prototypes``).  A client lost before its masked model is in neither sum; one lost
    before its masked prototypes leaves the same global prototypes as one lost at
    ``prototypes``; one lost at the last unmask is in both.  With the DP release a client
    lost at ``prototypes`` released nothing and is charged nothing; one lost after sending
    its release is charged like the others.  Too many lost is a DropoutError."""
    run = job("protofssl", rounds=1)
    full = in_process(run)["rounds"][0]
    no_model = in_process(run, dropouts={1: ("secagg/ciphertexts", 0)})["rounds"][0]
    at_release = in_process(run, dropouts={1: "prototypes"})["rounds"][0]
    no_prototypes = in_process(run, dropouts={1: ("secagg/ciphertexts", 1)})["rounds"][0]
    at_unmask = in_process(run, dropouts={1: ("secagg/survivors", 1)})["rounds"][0]
    assert full["participation"]["survivors"] == [0, 1, 2]
    assert no_model["participation"]["dropped"] == {"model/masked_input": [1],
                                                    "prototypes/advertise": [1]}
    assert no_prototypes["participation"]["dropped"] == {"prototypes/masked_input": [1]}
    for lost in (no_model, at_release, no_prototypes):
        assert lost["participation"]["survivors"] == [0, 2]
    # the global prototypes are the sum over the same two clients, or over all three
    assert at_release["test_accuracy"] == no_prototypes["test_accuracy"] != full["test_accuracy"]
    assert at_unmask["participation"]["survivors"] == [0, 1, 2]
    assert at_unmask["test_accuracy"] == full["test_accuracy"]
    assert at_unmask["model_digest"] == full["model_digest"]

    private = job("protofssl", rounds=1, settings=["hyper.noise_multiplier=1.0", "hyper.clip=5.0"])
    charged = in_process(private)["rounds"][0]["privacy"]
    silent = in_process(private, dropouts={1: "prototypes"})["rounds"][0]["privacy"]
    sent = in_process(private, dropouts={1: ("secagg/ciphertexts", 1)})["rounds"][0]["privacy"]
    assert charged["releases"] == sent["releases"] == {"0": 1, "1": 1, "2": 1}
    assert silent["releases"] == {"0": 1, "1": 0, "2": 1}
    assert silent["epsilon_per_client"]["1"] == 0.0
    assert silent["epsilon_per_client"]["0"] == charged["epsilon_per_client"]["0"] > 0
    assert sent["epsilon_per_client"]["1"] == charged["epsilon_per_client"]["1"]
    with pytest.raises(DropoutError):
        in_process(run, dropouts={1: ("secagg/ciphertexts", 0), 2: ("secagg/ciphertexts", 0)})


def test_a_node_trains_with_the_experiments_thread_count():
    """A fresh ClientApp process (Flower's stock and cold modes) starts with torch's default
    thread count; with two threads the clients' training differed from the simulator's in
    the last bits (model digests differed, accuracies did not).  The node takes the
    experiment's ``threads``."""
    import torch

    run = job("fedavg-labeled", rounds=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        node = NodeContext(0, {"partition-id": 0, "num-partitions": 3}, run)
        with pytest.raises(Exception):
            ExperimentClient().handle("train", Record(), Record(), node)
        assert torch.get_num_threads() == job_of(run).config.threads == 1
    finally:
        torch.set_num_threads(threads)


def test_a_node_with_another_partition_count_is_refused():
    run = job("fedavg-labeled", rounds=1)
    node = NodeContext(0, {"partition-id": 0, "num-partitions": 4}, run)
    with pytest.raises(InputError, match="num-partitions"):
        ExperimentClient().handle("train", Record(), Record(), node)
    outside = NodeContext(3, {"partition-id": 3}, run)
    with pytest.raises(InputError, match="partition-id"):
        ExperimentClient().handle("train", Record(), Record(), outside)


def test_fedprop_with_either_hamming_backend_runs_on_a_remote_transport():
    from securefl.runtime.transport import Transport

    class Elsewhere(Transport):
        """Any transport but the in-process one (no client may be reached)."""

        clients = (0, 1, 2)

        def _exchange(self, step, requests, timeout):
            raise AssertionError("a refused method reached a client")

    # FedProp is deployable with either secure Hamming backend: SHADE and LWE both run as
    # exchanges (securefl.crypto.shade_hops, securefl.crypto.lwe_hops); setup on a remote
    # transport is no longer refused for LWE (it was "in process only"): setup goes on to
    # its first exchange with the clients
    from securefl.methods import build_method

    lwe = build_method("fedprop", secure="real", hamming_backend="lwe", warmup_rounds=1)
    federation = load_federations(job_of(job("fedprop")).config)["fedprop"]
    with pytest.raises(AssertionError, match="reached a client"):
        lwe.setup(federation.for_training(), transport=Elsewhere(program="method"))


def test_a_real_runs_secret_crypto_seed_stays_out_of_the_clients_run_config():
    import json

    run = job("fedavg-labeled")
    assert json.loads(job_of(run).method_run["method-keywords"])["crypto_seed"] is None
    plain = job("fedavg-labeled", "plaintext")
    assert json.loads(job_of(plain).method_run["method-keywords"])["crypto_seed"] is not None


def test_the_dataset_cache_has_one_key_per_dataset():
    """A warm executor loads ``dataset("digits")`` once; the handlers it forks ask for
    ``dataset("digits", None)`` and must get the same object, not a second load per message."""
    from securefl.experiments.deployment import dataset

    assert dataset("digits") is dataset("digits", None)
