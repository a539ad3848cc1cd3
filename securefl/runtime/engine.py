"""One driver for every protocol: a server step table run over any :class:`Transport`.

A protocol is written once, as I/O-free parties:

* the **client side** is a :class:`StepTable`: a :class:`~securefl.runtime.transport.ClientHalf`
  whose ``handle`` looks the step up in a table ``{step name: handler}``, each handler
  ``(request, state, node) -> reply`` reading and updating the client's state Record;
* the **server side** is a sequence of :class:`Step`\\ s over a server state object ``S``:
  ``requests(S)`` builds the step's requests (client -> Record), ``collect(S, exchange)``
  absorbs the replies.

:func:`drive` is the only loop: for each step it sends the requests through the transport
and hands the :class:`~securefl.runtime.records.Exchange` to ``collect``.  The in-process
simulator is :func:`drive` on :class:`~securefl.runtime.transport.InProcessTransport`, a
deployment is :func:`drive` on the Flower transport: the benchmarks time the code that
deployments run.  ``steps`` may be a generator, so a protocol whose next step depends on
the replies (a retry, a variable number of hops) is still one table read in order.

Who learns what is the protocol's business; the engine only moves Records, and every
request it sends is stamped (session, sequence) by the transport, so a replayed or
reordered step is refused by the client (:func:`~securefl.runtime.transport.serve`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from securefl.errors import ProtocolError
from securefl.runtime.transport import ClientHalf, Exchange, NodeContext, Record, Transport

S = TypeVar("S")

Handler = Callable[[Record, Record, NodeContext], Record]
"""A client step: ``(request, state, node) -> reply``; updates ``state`` in place."""


@dataclass(frozen=True)
class Step(Generic[S]):
    """One message round of a protocol, seen from the server.

    ``name``: the transport step (the client's table key); ``requests(state)``: what each
    addressed client is sent; ``collect(state, exchange)``: absorb replies, dropped and
    failed clients into ``state``.
    """

    name: str
    requests: Callable[[S], Mapping[int, Record]]
    collect: Callable[[S, Exchange], None]


def drive(transport: Transport, steps: Iterable[Step[S]], state: S, *,
          timeout: float | None = None) -> S:
    """Run ``steps`` in order over ``transport``, threading the server ``state``; return it."""
    for step in steps:
        exchange = transport.exchange(step.name, dict(step.requests(state)), timeout=timeout)
        step.collect(state, exchange)
    return state


def within(steps: Iterable[Step[S]], state: S) -> Iterator[Step[Any]]:
    """Another protocol's ``steps`` run inside this one's, each on that protocol's own
    ``state`` whatever state the outer :func:`drive` threads (a sub-protocol, such as the
    secure sum that ends CrossClientLP)."""
    for step in steps:
        yield Step(step.name, lambda _outer, step=step: step.requests(state),
                   lambda _outer, exchange, step=step: step.collect(state, exchange))


class StepTable(ClientHalf):
    """A client half answering each step with the handler its table names.

    Subclasses set ``program`` and ``handlers``; a step missing from the table is refused
    (:class:`ProtocolError`): a server cannot make a client run what its protocol lacks.
    """

    handlers: ClassVar[Mapping[str, Handler]]

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        handler = self.handlers.get(step)
        if handler is None:
            raise ProtocolError(f"program {self.program!r} has no step {step!r}")
        return handler(request, state, node)
