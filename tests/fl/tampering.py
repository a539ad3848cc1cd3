"""A modified server that tampers with relayed client-to-client batches (the attack of the
tamper tests), usable in process and as a Flower ServerApp (``tests/deploy``).

Batch layout (:mod:`securefl.fl.links`): ``count u32 | (tag length u16 | tag | frame
length u64 | frame) * count``.  Round 0 flips a byte of the 0 -> 1 batch, round 1 replays
round 0's 0 -> 2 batch, round 2 swaps the two frames of the 1 -> 0 batch.
"""

from __future__ import annotations

import struct

import numpy as np

from securefl.fl.linkcheck import LinkCheckServer

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
