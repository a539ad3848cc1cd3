"""Modified servers for the tamper tests, usable in process and as a Flower ServerApp
(``tests/deploy``): one that tampers with relayed client-to-client link batches
(link-check), one that tampers with a method's own traffic (program ``method``).

Batch layout (:mod:`securefl.runtime.links`): ``count u32 | (tag length u16 | tag | frame
length u64 | frame) * count``.  Round 0 flips a byte of the 0 -> 1 batch, round 1 replays
round 0's 0 -> 2 batch, round 2 swaps the two frames of the 1 -> 0 batch.
"""

from __future__ import annotations

import struct

import numpy as np

from securefl.runtime.linkcheck import LinkCheckServer

TARGETS = {0: (0, 1, "flip"), 1: (0, 2, "replay"), 2: (1, 0, "reorder")}
"""round -> (sender, receiver, attack)."""


def frames(blob: np.ndarray) -> list[bytes]:
    """The (tag, frame) records of a batch, as raw byte strings."""
    raw = blob.tobytes()
    (count,) = struct.unpack_from(">I", raw, 0)
    offset, records = 4, []
    for _ in range(count):
        (tag_len,) = struct.unpack_from(">H", raw, offset)
        (frame_len,) = struct.unpack_from(">Q", raw, offset + 2 + tag_len)
        end = offset + 2 + tag_len + 8 + frame_len
        records.append(raw[offset:end])
        offset = end
    return records


def reorder(blob: np.ndarray) -> np.ndarray:
    records = frames(blob)
    swapped = struct.pack(">I", len(records)) + b"".join(records[::-1])
    return np.frombuffer(swapped, dtype=np.uint8).copy()


def flip(blob: np.ndarray) -> np.ndarray:
    """Flip one bit in the middle of the first frame (inside its payload)."""
    first = frames(blob)[0]
    out = blob.copy()
    out[4 + len(first) // 2 + len(first) // 4] ^= 1
    return out


class TamperingLinkCheck(LinkCheckServer):
    """link-check whose relay attacks one link per round (:data:`TARGETS`)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, int, int], np.ndarray] = {}

    def forward(self, round_index, routed):
        for receiver, batches in routed.items():
            for name, blob in batches.items():
                self.seen[(round_index, int(name.rsplit("/", 1)[1]), receiver)] = blob
        sender, receiver, attack = TARGETS.get(round_index, (None, None, None))
        if attack is None:
            return routed
        name = f"relay/from/{sender}"
        blob = routed[receiver][name]
        if attack == "flip":
            routed[receiver][name] = flip(blob)
        elif attack == "replay":
            routed[receiver][name] = self.seen[(0, sender, receiver)]
        else:
            routed[receiver][name] = reorder(blob)
        return routed


def expected_failures() -> dict[str, str]:
    """failed-key -> text the targeted client must raise."""
    return {"0/receive/1": "MAC check failed", "1/receive/2": "another session",
            "2/receive/0": "out-of-order"}


# ----------------------------------------------------------------------------- method traffic

METHOD_ATTACKS = {0: ("secagg/ciphertexts", 1, "flip"), 1: ("train", 2, "replay"),
                  2: ("secagg/keys", 0, "reorder")}
"""round -> (step, client, attack) on program ``method`` (FedAvg with secure aggregation):
round 0 flips a bit of a share ciphertext relayed to client 1, round 1 replays client 2's
round-0 train request, round 2 delivers a later-stamped copy of client 0's request before
the genuine one."""


def method_failures() -> dict[int, tuple[str, str]]:
    """round -> (client, text its ProtocolError must contain)."""
    return {0: ("1", "AES-GCM"), 1: ("2", "replayed or reordered"), 2: ("0", "replayed or reordered")}


def tamper_method_traffic(transport):
    """Make ``transport`` relay like a modified server (:data:`METHOD_ATTACKS`)."""
    from securefl.runtime.transport import RESERVED, Record

    deliver = transport._exchange
    seen = {}
    rounds = {"current": -1}

    def exchange(step, requests, timeout):
        if step == "train":
            rounds["current"] += 1
        current = rounds["current"]
        for client, request in requests.items():
            seen[(current, step, client)] = request
        target_step, client, attack = METHOD_ATTACKS.get(current, (None, None, None))
        if step == target_step and client in requests:
            requests = dict(requests)
            if attack == "flip":
                request = requests[client].copy(writable=True)
                blob = request.arrays["secagg/model/in/1"]
                blob[0, 20] ^= 1
                requests[client] = request
            elif attack == "replay":
                requests[client] = seen[(0, "train", client)]
            else:
                genuine = requests[client]
                body = Record(dict(genuine.arrays),
                              {k: v for k, v in genuine.config.items() if k not in RESERVED})
                deliver(step, {client: transport.stamp(client, step, body)}, timeout)
        return deliver(step, requests, timeout)

    transport._exchange = exchange
    return transport


class TamperingMethod:
    """Program ``method`` served by a modified server that tampers with its own relaying
    (:func:`tamper_method_traffic`); a ServerHalf for any transport."""

    program = "method"

    def run(self, transport, run_config):
        from securefl.experiments.deployment import ExperimentServer

        return ExperimentServer().run(tamper_method_traffic(transport), run_config)
