"""The one protocol driver: steps run in order over a transport, state threads through,
a client refuses a step its table lacks, and a generator of steps can depend on replies."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from securefl.fl.engine import Step, StepTable, drive
from securefl.fl.transport import InProcessTransport, NodeContext, Record


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
