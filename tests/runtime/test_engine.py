"""The one protocol driver: steps run in order over a transport, state threads through,
a client refuses a step its table lacks, and a generator of steps can depend on replies."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from securefl.runtime.engine import Step, StepTable, drive
from securefl.runtime.transport import InProcessTransport, NodeContext, Record


def _add(request: Record, state: Record, node: NodeContext) -> Record:
    total = state.arrays.get("total", np.zeros(1)) + request.arrays["x"]
    state.arrays["total"] = total
    return Record({"total": total})


class Adder(StepTable):
    program = "test-adder"
    handlers = {"add": _add}


@dataclass
class Server:
    rounds: int
    seen: list = field(default_factory=list)
    failed: dict = field(default_factory=dict)


def _steps(server: Server):
    for r in range(server.rounds):
        yield Step("add" if r < server.rounds - 1 else "nope",
                   lambda s, r=r: {c: Record({"x": np.array([float(c + r)])}) for c in (0, 1)},
                   lambda s, ex: (s.seen.append({c: float(v.arrays["total"][0])
                                                 for c, v in ex.replies.items()}),
                                  s.failed.update(ex.failed)))


def test_drive_threads_state_and_refuses_unknown_steps():
    transport = InProcessTransport(Adder(), [NodeContext(c, {}, {}) for c in (0, 1)])
    server = drive(transport, _steps(Server(rounds=3)), Server(rounds=3))
    assert server.seen[:2] == [{0: 0.0, 1: 1.0}, {0: 1.0, 1: 3.0}]
    assert server.seen[2] == {}
    assert set(server.failed) == {0, 1}
    assert all("no step 'nope'" in text for text in server.failed.values())


@dataclass
class Outer:
    inner: Server
    log: list = field(default_factory=list)


def test_within_runs_a_sub_protocol_on_its_own_state_inside_the_outer_drive():
    """``within`` hands each inner step its own state while the driver threads the outer one:
    the inner steps see and update ``Server``, never ``Outer``."""
    from securefl.runtime.engine import within

    transport = InProcessTransport(Adder(), [NodeContext(c, {}, {}) for c in (0, 1)])
    inner = Server(rounds=2)

    def outer_steps(state: Outer):
        yield Step("add", lambda s: (s.log.append("outer"), {0: Record({"x": np.array([5.0])})})[1],
                   lambda s, ex: s.log.append(float(ex.replies[0].arrays["total"][0])))
        yield from within(_steps(state.inner), state.inner)

    state = drive(transport, outer_steps(Outer(inner)), Outer(inner))
    assert state.log == ["outer", 5.0]
    assert inner.seen[0] == {0: 5.0, 1: 1.0}  # client 0 continues from the outer step's total
    assert set(inner.failed) == {0, 1}  # the inner protocol's last step is one Adder lacks
