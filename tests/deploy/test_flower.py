"""securefl on a real Flower deployment: a SuperLink and three SuperNodes on 127.0.0.1.

* The FedAvg pilot (securefl's secure aggregation through Flower messages) gives, round
  for round, the same accuracy, model digest and bytes as the in-process transport with
  the same seed.
* A modified ServerApp that alters, replays or reorders relayed client-to-client frames
  makes the targeted client raise ProtocolError (reported back as its error reply).
* A SuperNode killed during a run is a dropout with secure aggregation's outcome: the
  run equals the in-process run with that client dropping at the same exchange.

Every process a test starts (and every process those start) is stopped by PID when the
test ends, pass or fail (:class:`LocalFederation` as a context manager); the tests check
that none is left.  These are the suite's slowest tests (about a minute each on the
2-core project machine), hence ``slow``; CI runs them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from securefl.fl.flower.deploy import LocalFederation, _alive, progress, wait_result  # noqa: E402
from securefl.fl.pilot import PilotClient, PilotServer  # noqa: E402
from securefl.fl.transport import InProcessTransport, NodeContext  # noqa: E402

pytestmark = pytest.mark.slow

PILOT = {"program": "pilot-fedavg", "rounds": 2, "timeout": 120.0}
STEP_OF_ROUND = {"advertise": "train", "share": "secagg/keys",
                 "masked_input": "secagg/ciphertexts", "unmask": "secagg/survivors"}
TAMPER_APP = '''
from flwr.serverapp import ServerApp

from securefl.fl.flower.app import run_program
from securefl.fl.flower.tuning import tune_object_pulls
from tampering import TamperingLinkCheck

app = ServerApp()


@app.main()
def main(grid, context):
    tune_object_pulls()
    run_program(grid, context, TamperingLinkCheck())
'''


def in_process(run_config: dict, dropouts: dict | None = None) -> dict:
    run = {"num-partitions": 3, **run_config}
    nodes = [NodeContext(i, {"partition-id": i, "num-partitions": 3}, run) for i in range(3)]
    return PilotServer().run(InProcessTransport(PilotClient(), nodes, dropouts=dropouts), run)


def same_rounds(flower: dict, reference: dict) -> None:
    assert len(flower["rounds"]) == len(reference["rounds"])
    for ours, theirs in zip(flower["rounds"], reference["rounds"]):
        for key in ("accuracy", "model_digest", "members", "survivors", "dropped",
                    "bytes_down_per_client", "bytes_up_per_client"):
            assert ours[key] == theirs[key], (ours["round"], key, ours[key], theirs[key])


def stopped(federation: LocalFederation) -> list[int]:
    pids = federation.stop()
    assert pids, "no process was running"
    return [p for p in pids if _alive(p)]


def test_pilot_equals_in_process_and_a_modified_server_app_is_caught():
    """One federation (its start-up is the expensive part) for both checks."""
    from tests.fl.tampering import expected_failures

    federation = LocalFederation(nodes=3, mode="fast", poll=0.1)
    files = {"tampering.py": (Path(__file__).parent.parent / "fl" / "tampering.py").read_text(),
             "tamper_app.py": TAMPER_APP}
    try:
        federation.start()
        result = federation.run(PILOT, name="pilot", timeout=600)
        tampered = federation.run({"program": "link-check", "rounds": 3, "frames": 2,
                                   "payload-bytes": 256, "timeout": 120.0},
                                  name="tamper", server_app="tamper_app:app", extra_files=files)
    finally:
        assert not stopped(federation)
    # the pilot: round for round identical to the in-process transport
    same_rounds(result, in_process(PILOT))
    assert result["final_accuracy"] > 0.5
    assert all(r["failed"] == {} and r["survivors"] == [0, 1, 2] for r in result["rounds"])
    for r in result["rounds"]:  # the split of a round's time is measured, and adds up
        parts = r["compute_seconds"] + r["crypto_seconds"] + r["messaging_seconds"]
        assert 0 < parts <= r["seconds"] + 0.5
    # the modified ServerApp: each attacked client raised ProtocolError; untouched links verified
    assert not tampered["verified"]
    for key, text in expected_failures().items():
        assert "ProtocolError" in tampered["failed"][key] and text in tampered["failed"][key], \
            (key, tampered["failed"])
    links = tampered["links"]
    assert links["0/1->2"] and links["0/2->0"] and links["1/1->0"] and not links["0/0->1"]


def test_killed_supernode_is_a_secure_aggregation_dropout():
    fed = LocalFederation(nodes=3, mode="fast", poll=0.1)
    run = {**PILOT, "rounds": 1, "timeout": 20.0}
    try:
        fed.start()
        out = fed.launch(run, name="dropout")
        deadline = time.monotonic() + 300
        while not any(e.get("step") == "secagg/keys" for e in progress(out)):
            assert time.monotonic() < deadline, "the run never reached its first secure sum"
            time.sleep(0.05)
        fed.kill_node(2)
        result = wait_result(out, 300, processes=fed.processes)
    finally:
        assert not stopped(fed)
    first = next(r for r in result["rounds"] if any(2 in c for c in r["dropped"].values()))
    (round_name,) = [name for name, clients in first["dropped"].items() if 2 in clients]
    reference = in_process(run, dropouts={2: (STEP_OF_ROUND[round_name], first["round"])})
    same_rounds(result, reference)
    assert 2 not in result["rounds"][-1]["survivors"]
    assert (2 in first["survivors"]) == (round_name == "unmask")
