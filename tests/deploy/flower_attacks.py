"""Deviating servers for the Flower attack tests, shipped in the app bundle (FAB) beside
``tests/adversary.py`` and run as a modified ServerApp against honest SuperNodes; the same
halves run in process, on any :class:`~securefl.runtime.transport.Transport`.

:class:`AttackingServer` wraps an honest server half: its transport hands every stamped
request to an :class:`~adversary.Adversary` before delivery (as the in-process
transport's ``intercept`` does), and it records, per step, each client's refusal text and
the names of the arrays each client sent back.  A run the attack makes fail does not
raise out of the ServerApp: its error is part of the result, so that ``result.json``
carries the evidence (who refused, why, and that nothing was sent after the attack).

Attacks (:data:`ATTACKS`):

* ``link-members`` -- program ``link-check``: no link key crosses the network (each is
  derived from the two clients' roster identities), so the attacker relabels: every
  client is told a member list with the two other clients swapped
  (``tests/runtime/test_malicious_transport.py`` in process);
* ``sum-keys`` -- program ``method``: in the secure sum's ``secagg/keys`` request every
  peer's (c^PK, s^PK) is the attacker's, the owners' tags kept;
* ``cohort`` -- program ``method``: the upload request says ``members=1, threshold=1``,
  the "sum of one" that reveals the update (``tests/runtime/test_policy_attacks.py``).

Downgrades that need no modified code -- ``secure=plaintext`` or a planted
``crypto_seed`` in the run config the operator writes -- run through :class:`Recording`,
the honest server with the same records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from securefl.runtime.transport import Exchange, Record, ServerHalf, Transport

try:  # in the test process
    from tests.adversary import Adversary
except ImportError:  # in the app bundle, beside adversary.py
    from adversary import Adversary

KEY_BYTES = 32
"""An X25519 public key; a secure-sum key row starts with c^PK then s^PK."""


def _relabel_link_members(adversary: Adversary) -> Callable[[int, Record], Record]:
    def swap(client: int, request: Record) -> Record:
        members = np.array(request.arrays["members"], copy=True)
        others = [p for p in range(len(members)) if p != client][:2]
        members[others] = members[others[::-1]]
        request.arrays["members"] = members
        return request
    return swap


def _swap_sum_keys(adversary: Adversary) -> Callable[[int, Record], Record]:
    def swap(client: int, request: Record) -> Record:
        for name in [n for n in request.arrays if n.startswith("secagg/") and n.endswith("/in/1")]:
            ids = request.arrays[name[:-1] + "0"]
            keys = np.array(request.arrays[name], copy=True)
            for row, index in enumerate(ids):
                if int(index) != client:
                    keys[row, :2 * KEY_BYTES] = np.concatenate(
                        [adversary.public(("c", int(index))), adversary.public(("s", int(index)))])
            request.arrays[name] = keys
        return request
    return swap


def _cohort_of_one(client: int, request: Record) -> Record:
    from securefl.fl import uploads

    if uploads.THRESHOLD in request.config:
        request.config.update({uploads.MEMBERS: 1, uploads.INDEX: 0, uploads.THRESHOLD: 1})
    return request


ATTACKS: dict[str, tuple[str, Callable[[Adversary], Callable[[int, Record], Record]]]] = {
    "link-members": ("links/open", _relabel_link_members),
    "sum-keys": ("secagg/keys", _swap_sum_keys),
    "cohort": ("train", lambda adversary: _cohort_of_one),
}
"""attack -> (the step whose requests it rewrites, rule maker)."""


class Recording(ServerHalf):
    """An honest server half run with records of refusals and replies (module docstring)."""

    def __init__(self, inner: ServerHalf, adversary: Adversary | None = None) -> None:
        self.inner = inner
        self.program = inner.program
        self.adversary = adversary

    def run(self, transport: Transport, run_config: Mapping[str, Any]) -> dict[str, Any]:
        failed: dict[str, dict[str, str]] = {}
        sent: dict[str, dict[str, list[str]]] = {}
        deliver = transport._exchange

        def exchange(step: str, requests: dict[int, Record], timeout: float | None) -> Exchange:
            if self.adversary is not None:
                requests = {c: self.adversary(c, r.copy(writable=True)) for c, r in requests.items()}
            result = deliver(step, requests, timeout)
            failed.setdefault(step, {}).update({str(c): t for c, t in result.failed.items()})
            sent.setdefault(step, {}).update({str(c): sorted(r.arrays) for c, r in result.replies.items()})
            return result

        transport._exchange = exchange
        try:
            result = self.inner.run(transport, run_config)
            error = None
        except Exception as exc:  # noqa: BLE001 -- the failure is the evidence (docstring)
            result, error = {}, f"{type(exc).__name__}: {exc}"
        return {**result, "attack": {"error": error, "failed": failed, "sent": sent}}


class AttackingServer(Recording):
    """``inner`` with the attack ``name`` of :data:`ATTACKS` applied to its requests."""

    def __init__(self, inner: ServerHalf, name: str) -> None:
        step, rule = ATTACKS[name]
        adversary = Adversary()
        super().__init__(inner, adversary.on(step, rule(adversary)))


def server_app_source(attack: str | None) -> str:
    """A ServerApp module serving the run config's program through :class:`AttackingServer`
    (``attack``) or :class:`Recording` (None)."""
    wrap = "Recording(half)" if attack is None else f"AttackingServer(half, {attack!r})"
    return f'''
from flwr.serverapp import ServerApp

from flower_attacks import AttackingServer, Recording
from securefl.fl.flower.app import run_program, server_half
from securefl.fl.flower.tuning import tune_object_pulls

app = ServerApp()


@app.main()
def main(grid, context):
    tune_object_pulls()
    half = server_half(str(context.run_config["program"]))
    run_program(grid, context, {wrap})
'''
