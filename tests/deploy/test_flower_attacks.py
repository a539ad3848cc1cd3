"""Issue 20's active attacks on a real Flower federation (a SuperLink and three SuperNodes
on 127.0.0.1, each node with its roster identity and the strict default privacy policy).

* **Key substitution**: a modified ServerApp puts its own X25519 keys (with the owners'
  tags) in the secure sum's key list: every honest SuperNode refuses (``ProtocolError``:
  the tag does not verify under its roster), no client sends a share ciphertext, the run
  fails.  Link keys never cross the network, so the ServerApp relabels the link members
  instead: every batch fails its MAC and no link verifies.
* **Policy downgrade**: the run config the operator writes asks for ``secure=plaintext``
  or carries a ``crypto_seed``, or a modified ServerApp asks for a secure sum of one
  (``members=1, threshold=1``): every SuperNode refuses at the first request and sends
  nothing back.

The modified ServerApps are :mod:`tests.deploy.flower_attacks` (with ``tests/adversary.py``)
shipped in the app bundle; each run's ``result.json`` holds every client's refusal text
and the arrays each client sent, step by step.  Every process is stopped by PID when the
test ends (:class:`~securefl.fl.flower.deploy.LocalFederation`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flwr")

from securefl.experiments.config import load_config  # noqa: E402
from securefl.experiments.deployment import program_config  # noqa: E402
from securefl.fl.flower.deploy import LocalFederation, _alive  # noqa: E402
from tests.deploy.flower_attacks import server_app_source  # noqa: E402

pytestmark = pytest.mark.slow

TESTS = Path(__file__).parent.parent
CLIENTS = ("0", "1", "2")


def launch(federation: LocalFederation, run: dict, name: str, attack: str | None) -> dict:
    """Run ``run`` through the modified ServerApp (``attack``; None: honest, recorded);
    its ``result.json``."""
    files = {"adversary.py": (TESTS / "adversary.py").read_text(),
             "flower_attacks.py": (TESTS / "deploy" / "flower_attacks.py").read_text(),
             "attack_app.py": server_app_source(attack)}
    return federation.run(run, name=name, server_app="attack_app:app", extra_files=files,
                          timeout=300)


def fedavg(*settings: str, secure: str = "real") -> dict:
    config = load_config(None, settings=["partition.num_clients=3", *settings],
                         methods=["fedavg-labeled"], rounds=1)
    return program_config(config, "fedavg-labeled", secure=secure, timeout=60.0)


def refused_by_all(record: dict, step: str, text: str) -> None:
    """Every client refused ``step`` with a ProtocolError saying ``text``, answered nothing
    there, and sent no array at any later step."""
    failed = record["failed"][step]
    assert sorted(failed) == list(CLIENTS), failed
    assert all(t.startswith("ProtocolError: ") and text in t for t in failed.values()), failed
    assert record["sent"][step] == {}
    steps = list(record["sent"])
    for later in steps[steps.index(step) + 1:]:
        assert not any(record["sent"][later].values()), (later, record["sent"][later])
    assert record["error"] is None or "DropoutError" in record["error"]


def stopped(federation: LocalFederation) -> None:
    pids = federation.stop()
    assert pids and not [p for p in pids if _alive(p)]


def test_key_substitution_and_policy_downgrades_are_refused_by_every_supernode():
    """One federation (its start-up is the expensive part) for every attack: key
    substitution by a modified ServerApp (link members, secure-sum keys); plaintext mode and a
    planted crypto seed through the run config (an honest ServerApp runs them: the operator
    writes the run config); a cohort of one through a modified ServerApp."""
    federation = LocalFederation(nodes=3, mode="fast", poll=0.1, submit_in_process=True)
    try:
        federation.start()
        links = launch(federation, {"program": "link-check", "rounds": 1, "frames": 2,
                                    "timeout": 60.0}, "link-members", "link-members")
        sums = launch(federation, fedavg(), "sum-keys", "sum-keys")["attack"]
        plaintext = launch(federation, fedavg(secure="plaintext"), "plaintext", None)["attack"]
        seeded = launch(federation, fedavg("crypto_seed=11"), "crypto-seed", None)["attack"]
        cohort = launch(federation, fedavg(), "cohort", "cohort")["attack"]
    finally:
        stopped(federation)
    # link members: every client derived keys its peers do not hold; no batch verified
    assert links["verified"] is False and not any(links["links"].values())
    refused_by_all(links["attack"], "links/receive", "MAC check failed")
    # secure-sum keys: the clients advertised (public keys only), then refused the forged
    # key list; no share ciphertext was ever requested or sent, and the run failed
    assert set(sums["sent"]["train"]) == set(CLIENTS)
    refused_by_all(sums, "secagg/keys", "does not verify under roster")
    assert "secagg/ciphertexts" not in sums["sent"] and sums["error"].startswith("DropoutError")
    # policy downgrades: refused at the first request, nothing sent
    refused_by_all(plaintext, "train", "requires 'real' (it never uploads in the clear)")
    refused_by_all(seeded, "train", "run config carries a crypto_seed")
    refused_by_all(cohort, "train", "a secure sum of 1 members is below this node's minimum cohort 2")
    for record in (plaintext, seeded, cohort):
        assert record["error"].startswith("DropoutError")
