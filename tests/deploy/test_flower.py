"""securefl on a real Flower deployment: a SuperLink and three SuperNodes on 127.0.0.1.

* ``fedavg-labeled`` with ``--secure real`` (program ``method``: securefl's secure
  aggregation through Flower messages, each node loading its own partition) gives, round
  for round, the same test and validation accuracy, model digest, bytes and participation
  as the same job in process with the same seed.
* A modified ServerApp that flips a bit of a relayed share ciphertext, replays a request
  or delivers requests out of order makes the targeted client raise ProtocolError
  (reported back as its error reply); the tampered run equals the same tampering in
  process.
* A SuperNode killed during a run is a dropout with secure aggregation's outcome: the
  run equals the in-process run with that client dropping at the same exchange.
* ``fedprop`` with ``--secure real`` (CrossClientLP's client parties in the ClientApps,
  SHADE frames relayed by the ServerApp) equals the in-process run: accuracy, pseudo-label
  digests and accuracy, bytes.
* Nothing survives a failure: a test body that raises, with a node's executor orphaned
  (its node killed) and hung, still leaves no process of the federation behind.

The module's runs share one federation, :class:`Shared`, started at its first use (its
start-up -- four processes that import torch and warm up -- is the expensive part); under
xdist one worker runs the whole module (``ONE_WORKER`` in ``tests/conftest.py``), so it
starts once.  The dropout test kills a node, so it *takes* the federation (the next user,
if any, starts a fresh one) and is the module's last test; the orphan test needs a
federation whose node it kills under a frozen executor, a one-node one of its own, and is
the first, so that no idle federation polls beside it.  Runs are submitted in the test
process (``submit_in_process``: no ``flwr`` CLI process per run).  Every process a
federation starts (and every process those start) is stopped by PID when its tests end,
pass or fail (:meth:`LocalFederation.stop`, which finds them by session and descent); the
tests check that none is left.  These are the suite's slowest tests (about a minute each
on the 2-core project machine), hence ``slow``; CI runs them.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from securefl.experiments.config import load_config  # noqa: E402
from securefl.experiments.deployment import (  # noqa: E402
    ExperimentClient,
    ExperimentServer,
    in_process,
    program_config,
)
from securefl.fl.flower.deploy import LocalFederation, _alive, _processes, progress, wait_result  # noqa: E402
from securefl.runtime.transport import InProcessTransport, NodeContext  # noqa: E402

pytestmark = pytest.mark.slow

STEP_OF_ROUND = {"advertise": "train", "share": "secagg/keys",
                 "masked_input": "secagg/ciphertexts", "unmask": "secagg/survivors"}
COMPARED = ("test_accuracy", "validation_accuracy", "model_digest", "pseudo_label_digest",
            "bytes_model_per_client", "bytes_protocol_per_client", "bytes_down_per_client",
            "bytes_up_per_client", "participation")
TAMPER_APP = '''
from flwr.serverapp import ServerApp

from securefl.fl.flower.app import run_program
from securefl.fl.flower.tuning import tune_object_pulls
from tampering import TamperingMethod

app = ServerApp()


@app.main()
def main(grid, context):
    tune_object_pulls()
    run_program(grid, context, TamperingMethod())
'''


def job(rounds: int, timeout: float = 120.0) -> dict:
    """fedavg-labeled, real mode, on the digits default split over three clients."""
    config = load_config(None, settings=["partition.num_clients=3"], methods=["fedavg-labeled"],
                         rounds=rounds)
    return program_config(config, "fedavg-labeled", secure="real", timeout=timeout)


def same_rounds(flower: dict, reference: dict) -> None:
    assert len(flower["rounds"]) == len(reference["rounds"])
    for ours, theirs in zip(flower["rounds"], reference["rounds"]):
        for key in COMPARED:
            assert ours[key] == theirs[key], (ours["round"], key, ours[key], theirs[key])


def beside(federation: LocalFederation, run: dict, reference: Callable[[], dict], *, name: str,
           **options: Any) -> tuple[dict, dict]:
    """Launch ``run`` on ``federation`` and compute ``reference()`` (its in-process
    counterpart) in this process while the federation works, instead of after it: this
    process only waits for the run.  Returns (the run's ``result.json``, the reference)."""
    out = federation.launch(run, name=name, **options)
    expected = reference()
    return wait_result(out, 600, processes=federation.processes, track=federation.track), expected


def stopped(federation: LocalFederation) -> list[int]:
    pids = federation.stop()
    assert pids, "no process was running"
    return [p for p in pids if _alive(p)]


class Shared:
    """A SuperLink and three SuperNodes shared by the module's runs.

    The operator lets the nodes take a configured (public) crypto seed (FedProp's run
    hashes with the same hyperplanes as its in-process reference) and waives the DP floor
    (the paper's ProtoFSSL shares prototypes without noise); the runs that configure
    neither (fedavg-labeled: no crypto seed, no DP) are unaffected.  :meth:`get` starts it
    at first use; :meth:`take` hands it to a test that breaks it, which stops it itself."""

    def __init__(self) -> None:
        self.current: LocalFederation | None = None

    def get(self) -> LocalFederation:
        if self.current is None:
            federation = LocalFederation(nodes=3, mode="fast", poll=0.1, submit_in_process=True,
                                         node_config={"policy-allow-crypto-seed": True,
                                                      "policy-dp-min-noise": 0})
            self.current = federation
            federation.start()
        return self.current

    def take(self) -> LocalFederation:
        federation, self.current = self.get(), None
        return federation


@pytest.fixture(scope="module")
def shared():
    """The module's :class:`Shared` federation; whatever is left of it when the module's
    tests are done is stopped: nothing survives."""
    holder = Shared()
    try:
        yield holder
    finally:
        if holder.current is not None:
            assert not stopped(holder.current)


@pytest.fixture
def federation(shared):
    """The shared federation, intact (a run on it leaves it so)."""
    return shared.get()


def _executor_of(pid: int, wait: float = 120.0) -> int:
    """The warm executor node ``pid`` starts (a child whose command line says so)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for child, (parent, *_rest) in _processes().items():
            if parent == pid and b"--executor" in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
        time.sleep(0.1)
    raise AssertionError(f"node {pid} started no executor within {wait:g} s")


def test_no_process_survives_a_failure_not_even_an_orphaned_hung_executor():
    """The incident: a failing test left a node's executor alive with PPID 1.  Here the
    node is killed under its executor, which is frozen first (as a hung orphan would be:
    it cannot even die with its parent), and the test body raises; leaving the
    federation's block must still stop every process it had."""
    federation = LocalFederation(nodes=1, mode="fast", poll=0.1, grace=2.0)
    executor = None
    try:
        with pytest.raises(RuntimeError, match="forced failure"):
            with federation:
                node = federation.processes["node0"]
                executor = _executor_of(node.pid)
                os.kill(executor, signal.SIGSTOP)
                os.kill(node.pid, signal.SIGKILL)
                node.wait(timeout=30)
                deadline = time.monotonic() + 30
                while _processes().get(executor, (node.pid,))[0] == node.pid:
                    assert time.monotonic() < deadline, "the executor was never orphaned"
                    time.sleep(0.05)
                assert _alive(executor), "the orphan must exist for this test to mean anything"
                raise RuntimeError("forced failure")
        assert not _alive(executor), "the orphaned executor survived the federation"
        sessions = set(federation._sessions)
        assert not [p for p, stat in _processes().items() if stat[2] in sessions]
    finally:
        if executor is not None and _alive(executor):  # never leak it, whatever happened
            os.kill(executor, signal.SIGKILL)


def test_fedavg_labeled_equals_in_process_and_a_modified_server_app_is_caught(federation):
    """The honest app and a tampering ServerApp, one after the other on the federation."""
    from tests.runtime.tampering import method_failures, tamper_method_traffic

    files = {"tampering.py": (Path(__file__).parent.parent / "runtime" / "tampering.py").read_text(),
             "tamper_app.py": TAMPER_APP}
    run, attacked = job(rounds=2), job(rounds=3)

    def tampered_in_process() -> dict:
        nodes = [NodeContext(k, {"partition-id": k, "num-partitions": 3}, attacked)
                 for k in range(3)]
        transport = tamper_method_traffic(InProcessTransport(ExperimentClient(), nodes))
        return {"rounds": ExperimentServer().run(transport, attacked)["rounds"]}

    started = time.monotonic()
    result, reference = beside(federation, run, lambda: in_process(run), name="fedavg-labeled")
    identity_seconds = time.monotonic() - started
    tampered, tampered_reference = beside(federation, attacked, tampered_in_process, name="tamper",
                                          server_app="tamper_app:app", extra_files=files)
    # fedavg-labeled: round for round identical to the in-process run of the same job
    same_rounds(result, reference)
    assert result["final_accuracy"] > 0.2 and identity_seconds > 0
    for r in result["rounds"]:
        assert r["participation"]["survivors"] == [0, 1, 2] and not r["participation"]["failed"]
        parts = r["train_seconds"] + r["crypto_seconds"] + r["messaging_seconds"]
        assert 0 < parts <= r["seconds"] + 0.5  # the split of a round's time adds up
    # the modified ServerApp: each attacked client raised ProtocolError and dropped out
    for r in tampered["rounds"]:
        client, text = method_failures()[r["round"]]
        failed = r["participation"]["failed"]
        assert list(failed) == [client] and "ProtocolError" in failed[client] and text in failed[client]
        assert r["participation"]["survivors"] == sorted({0, 1, 2} - {int(client)})
    same_rounds(tampered, tampered_reference)


FEDPROP = ["partition.num_clients=3", "partition.samples_per_client=60", "crypto_seed=11",
           "hyper.warmup_rounds=0", "hyper.L=128"]
"""A small digits split (60 points per client) so that SHADE's traffic stays small; the
crypto seed is configured (public) so that both runs hash with the same hyperplanes.  No
warm-up round: it would be a labeled-only FedAvg round (the fedavg-labeled test's), so both
rounds run CrossClientLP, the second with the IKNP setups each client kept from the first
in Flower's ``Context.state``."""


def test_fedprop_crossclient_lp_over_flower_equals_in_process(federation):
    """FedProp ``--secure real``: CrossClientLP's client parties (embedding, LSH seed
    agreement, SHADE with sealed batches relayed by the ServerApp, padded secure sum) run
    in the SuperNodes' ClientApps; accuracy, models, pseudo-label digests and accuracy,
    bytes and participation equal the in-process run of the same job."""
    config = load_config(None, settings=FEDPROP, methods=["fedprop"], rounds=2)
    run = program_config(config, "fedprop", secure="real", timeout=120.0)
    # the operator lets the nodes take the configured (public) crypto seed (:class:`Shared`)
    result, reference = beside(federation, run, lambda: in_process(run), name="fedprop")
    same_rounds(result, reference)
    for ours, theirs in zip(result["rounds"], reference["rounds"]):
        assert ours["pseudo_label_digest"] and ours["pseudo_label_accuracy"] == theirs["pseudo_label_accuracy"]
        assert ours["participation"]["survivors"] == [0, 1, 2] and not ours["participation"]["failed"]
    assert result["final_accuracy"] == reference["final_accuracy"]


CONVERTED = ("fedsemi-mt", "protofssl")
"""Methods converted after the FedAvg family whose clients keep state between rounds
(FedSemi's round counts, ProtoFSSL's RMSprop accumulators) and that run several secure
sums (FedSemi's per-layer sums in the same exchanges, ProtoFSSL's two in turn).  Every
deployable method, FedAnchor and the other FedSemi variants included, ran 10 rounds on a
SuperLink with identical digests in ``benchmarks/results/flower_methods_digits_3nodes.json``
(``securefl bench flower-methods``)."""


def test_the_converted_methods_equal_in_process_on_a_superlink(federation):
    """FedSemi-MT and ProtoFSSL with --secure real through a SuperLink and three
    SuperNodes (the digits default over three clients, 120 points each, 2 rounds each, so
    that the clients' state carries over a round in Flower's ``Context.state``) give the
    in-process run, round for round."""
    path = Path(__file__).parent.parent.parent / "experiments" / "digits-3-nodes.toml"
    runs = {m: program_config(load_config(str(path), settings=["partition.samples_per_client=120"],
                                          methods=[m], rounds=2), m, secure="real", timeout=300.0)
            for m in CONVERTED}
    # the operator waives the DP floor (:class:`Shared`): the paper's ProtoFSSL shares
    # prototypes without noise
    for method, run in runs.items():
        result, reference = beside(federation, run, lambda run=run: in_process(run), name=method)
        same_rounds(result, reference)
        assert all(r["participation"]["survivors"] == [0, 1, 2] for r in result["rounds"])


def test_killed_supernode_is_a_secure_aggregation_dropout(shared):
    """The module's last test: it kills a node of the shared federation (:meth:`Shared.take`)."""
    fed = shared.take()
    run = job(rounds=1, timeout=20.0)
    try:
        out = fed.launch(run, name="dropout")
        deadline = time.monotonic() + 300
        while not any(e.get("step") == "secagg/keys" for e in progress(out)):
            assert time.monotonic() < deadline, "the run never reached its first secure sum"
            time.sleep(0.05)
        fed.kill_node(2)
        result = wait_result(out, 300, processes=fed.processes, track=fed.track)
    finally:
        assert not stopped(fed)
    first = next(r for r in result["rounds"]
                 if any(2 in c for c in r["participation"]["dropped"].values()))
    (round_name,) = [name for name, clients in first["participation"]["dropped"].items()
                     if 2 in clients]
    reference = in_process(run, dropouts={2: (STEP_OF_ROUND[round_name], first["round"])})
    same_rounds(result, reference)
    assert (2 in first["participation"]["survivors"]) == (round_name == "unmask")
