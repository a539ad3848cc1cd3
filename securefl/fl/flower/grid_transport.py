""":class:`FlowerTransport`: exchanges as Flower messages through a ServerApp's ``Grid``.

An exchange pushes one ``query`` message per addressed node (content: the request Record,
:mod:`securefl.fl.flower.records`; ``group_id``: the step) and pulls replies every
``poll_interval`` seconds until all have arrived or ``timeout`` has passed.  Flower's own
``Grid.send_and_receive`` sleeps 3 s between pulls; polling ourselves cuts up to 3 s off
every message round.  A node whose reply has not arrived by the deadline is reported as
``dropped`` (its message expires at its TTL, ``timeout`` plus a margin); a node whose
ClientApp raised is reported in ``failed`` with the error text (``ProtocolError: ...``).

Nodes are found by :meth:`FlowerTransport.discover`: it waits until the expected number
of nodes is connected, asks each for its ``partition-id`` (a ``_hello`` query answered
by :mod:`securefl.fl.flower.app` outside any program) and maps client index -> node id;
two nodes claiming one partition, or a partition outside 0..n-1, is a ConfigError.

Bytes are metered as Record payloads (array data plus config values), the same measure as
:class:`~securefl.runtime.transport.InProcessTransport`; Flower's own framing (protobuf, HTTP,
5 MiB array chunks) is not counted.
"""

from __future__ import annotations

import re
import time
from typing import Any

from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from securefl.errors import ConfigError
from securefl.fl.flower.records import CONFIG, from_recorddict, to_recorddict
from securefl.runtime.transport import Exchange, Record, Transport

HELLO = "_hello"
_REASON = re.compile(r"<class '(?:[\w.]*\.)?(\w+)'>:<'(.*)'>$", re.S)


def error_text(reason: str) -> str:
    """Flower's ``<class 'pkg.ProtocolError'>:<'text'>`` as ``ProtocolError: text``."""
    match = _REASON.match(reason.strip())
    return f"{match.group(1)}: {match.group(2)}" if match else reason


class FlowerTransport(Transport):
    """Exchanges through a Flower ``Grid`` (see module docstring)."""

    def __init__(self, grid: Any, node_of: dict[int, int], *, program: str,
                 poll_interval: float = 0.1, ttl_margin: float = 60.0,
                 session: bytes | None = None) -> None:
        super().__init__(program=program, session=session)
        self.grid = grid
        self.node_of = dict(node_of)
        self.poll_interval = poll_interval
        self.ttl_margin = ttl_margin

    @property
    def clients(self) -> tuple[int, ...]:
        return tuple(sorted(self.node_of))

    @classmethod
    def discover(cls, grid: Any, *, program: str, expected: int, wait: float = 120.0,
                 poll_interval: float = 0.1, **options: Any) -> "FlowerTransport":
        """Wait for ``expected`` nodes, learn their partition ids, return the transport."""
        deadline = time.monotonic() + wait
        nodes: list[int] = []
        while time.monotonic() < deadline:
            nodes = sorted(grid.get_node_ids())
            if len(nodes) >= expected:
                break
            time.sleep(poll_interval)
        if len(nodes) < expected:
            raise ConfigError(f"only {len(nodes)} of {expected} SuperNodes connected within {wait:g} s")
        messages = [grid.create_message(RecordDict({CONFIG: ConfigRecord({"_step": HELLO})}),
                                        MessageType.QUERY, node, HELLO, ttl=wait)
                    for node in nodes]
        replies = _collect(grid, messages, deadline, poll_interval)
        node_of: dict[int, int] = {}
        for message in replies.values():
            if message.has_error():
                raise ConfigError(f"node {message.metadata.src_node_id}: {error_text(message.error.reason)}")
            partition = int(message.content[CONFIG]["partition-id"])
            if partition in node_of or not 0 <= partition < expected:
                raise ConfigError(f"partition-id {partition} duplicated or outside 0..{expected - 1}")
            node_of[partition] = message.metadata.src_node_id
        if len(node_of) != expected:
            raise ConfigError(f"{len(node_of)} of {expected} nodes answered the hello query")
        return cls(grid, node_of, program=program, poll_interval=poll_interval, **options)

    def _exchange(self, step: str, requests: dict[int, Record], timeout: float | None) -> Exchange:
        ttl = (timeout or 3600.0) + self.ttl_margin
        messages, client_of = [], {}
        for client, request in requests.items():
            self.stats.add(client, request.nbytes, 0)
            message = self.grid.create_message(to_recorddict(request), MessageType.QUERY,
                                               self.node_of[client], step, ttl=ttl)
            messages.append(message)
            client_of[self.node_of[client]] = client
        deadline = time.monotonic() + timeout if timeout else float("inf")
        replies = _collect(self.grid, messages, deadline, self.poll_interval)
        result = Exchange(step, {})
        for message in replies.values():
            client = client_of[message.metadata.src_node_id]
            if message.has_error():
                result.failed[client] = error_text(message.error.reason)
                continue
            reply = from_recorddict(message.content)
            result.client_seconds[client] = float(reply.config.pop("_handler_seconds", 0.0))
            self.stats.add(client, 0, reply.nbytes)
            result.replies[client] = reply
        result.dropped = tuple(sorted(set(requests) - set(result.replies) - set(result.failed)))
        return result


def _collect(grid: Any, messages: list[Message], deadline: float, poll_interval: float
             ) -> dict[str, Message]:
    """Push ``messages``; pull replies until all arrived or ``deadline`` (monotonic)."""
    pending = set(grid.push_messages(messages))
    replies: dict[str, Message] = {}
    while pending:
        for reply in grid.pull_messages(list(pending)):
            replies[reply.metadata.reply_to_message_id] = reply
            pending.discard(reply.metadata.reply_to_message_id)
        if pending:
            if time.monotonic() >= deadline:
                break
            time.sleep(poll_interval)
    return replies
