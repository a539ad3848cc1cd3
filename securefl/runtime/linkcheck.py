"""``link-check``: verify a federation's client-to-client links and time its message rounds.

Program (server half :class:`LinkCheckServer`, client half :class:`LinkCheckClient`):

1. ``links/open``: the server names the members (party ``i`` is roster client ``i``); every
   client checks the list and derives its link keys
   (:func:`securefl.runtime.links.open_links`).  Clients that answer are the live ones.
2. For each of ``rounds`` rounds, two exchanges:
   ``links/send`` -- every client seals,
   for every other client, one batch of ``frames`` messages of ``payload-bytes`` random
   bytes each and reports the SHA-256 of what it sent to each peer;
   ``links/receive`` -- every client opens the batches the live senders relayed to it and reports the
   SHA-256 of what it received from each peer.
3. The server compares the digests pair by pair: ``verified`` is true when every
   directed link delivered exactly what was sent, and reports the seconds of every
   exchange (the deployment's message-round latency).

A client whose batch fails verification raises ProtocolError (reported in ``failed``).
:meth:`LinkCheckServer.forward` is the relay step; a test subclass that alters, replays
or reorders frames there is the "modified ServerApp" of the tamper tests.

Who learns what: the server sees sealed batches of random bytes and digests of random
bytes; nothing about any client's data (there is none in this program).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np

from securefl.crypto.channel import Message
from securefl.errors import InputError, ProtocolError
from securefl.runtime import links
from securefl.runtime.transport import ClientHalf, NodeContext, Record, ServerHalf, Transport

PROGRAM = "link-check"
DEFAULTS: dict[str, Any] = {"rounds": 1, "frames": 1, "payload-bytes": 1024, "timeout": 0.0}
TAG = "link-check/payload"


def _settings(run_config: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(DEFAULTS)
    merged.update({k: v for k, v in run_config.items() if k in DEFAULTS})
    for name in ("rounds", "frames", "payload-bytes"):
        if int(merged[name]) < 1:
            raise InputError(name, merged[name], "must be a positive integer")
    return merged


def _digest(messages: list[Message]) -> str:
    digest = hashlib.sha256()
    for message in messages:
        for array in message.arrays:
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


class LinkCheckClient(ClientHalf):
    """Client half of ``link-check``."""

    program = PROGRAM

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        me = node.partition
        run = _settings(node.run_config)
        reply = Record()
        if step == "links/open":
            links.open_links(state, node.credentials(), me=me,
                             members=np.asarray(request.arrays["members"]).tolist())
        elif step == "links/send":
            for peer in links.peers(state):
                if peer == me:
                    continue
                messages = [Message(me, peer, TAG, (np.frombuffer(
                    secrets.token_bytes(int(run["payload-bytes"])), np.uint8),))
                    for _ in range(int(run["frames"]))]
                links.send_batch(reply, state, messages, me=me, peer=peer)
                reply.config[f"sent/{peer}"] = _digest(messages)
        elif step == "links/receive":
            for peer in links.peers(state):
                if peer != me and peer in self._live(request):
                    received = links.receive_batch(request, state, me=me, peer=peer)
                    if any(m.tag != TAG for m in received):
                        raise ProtocolError(f"client {me}: unexpected tag from {peer}")
                    reply.config[f"received/{peer}"] = _digest(received)
        else:
            raise InputError("step", step, f"not a step of {PROGRAM}")
        return reply

    @staticmethod
    def _live(request: Record) -> set[int]:
        return set(np.asarray(request.arrays.get("live", np.zeros(0, np.int64))).tolist())


class LinkCheckServer(ServerHalf):
    """Server half of ``link-check`` (relays, compares digests, times exchanges)."""

    program = PROGRAM

    def forward(self, round_index: int, routed: dict[int, dict[str, np.ndarray]]
                ) -> dict[int, dict[str, np.ndarray]]:
        """The relay: batches for each receiver as the server passes them on (unchanged)."""
        return routed

    def run(self, transport: Transport, run_config: Mapping[str, Any]) -> dict[str, Any]:
        run = _settings(run_config)
        timeout = float(run["timeout"]) or None
        clients = transport.clients
        members = np.arange(max(clients) + 1, dtype=np.int64)  # party i is roster client i
        opened = transport.exchange("links/open", {c: Record({"members": members}) for c in clients},
                                    timeout=timeout)
        live = sorted(int(c) for c in opened.replies)
        seconds = {"links/open": [opened.seconds], "links/send": [], "links/receive": []}
        failed: dict[str, str] = {f"open/{c}": t for c, t in opened.failed.items()}
        pairs: dict[str, bool] = {}
        for r in range(int(run["rounds"])):
            sent = transport.exchange("links/send", {c: Record() for c in live}, timeout=timeout)
            routed = self.forward(r, links.relay(sent.replies))
            alive = np.array(sorted(sent.replies), dtype=np.int64)
            received = transport.exchange(
                "links/receive", {c: Record({**routed.get(c, {}), "live": alive}) for c in live},
                timeout=timeout)
            seconds["links/send"].append(sent.seconds)
            seconds["links/receive"].append(received.seconds)
            for step, exchange in (("send", sent), ("receive", received)):
                failed.update({f"{r}/{step}/{c}": t for c, t in exchange.failed.items()})
                failed.update({f"{r}/{step}/{c}": "dropped" for c in exchange.dropped})
            for j, reply in sent.replies.items():
                for k in live:
                    if k == j:
                        continue
                    got = received.replies.get(k, Record()).config.get(f"received/{j}")
                    pairs[f"{r}/{j}->{k}"] = got is not None and got == reply.config.get(f"sent/{k}")
        return {"program": PROGRAM, "settings": run, "clients": list(clients), "links": pairs,
                "verified": bool(pairs) and all(pairs.values()) and not failed,
                "failed": failed, "exchange_seconds": seconds}
