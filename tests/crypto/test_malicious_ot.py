"""What SHADE's OT gives against a *malicious client* (securefl.crypto.ot, "Against a
malicious client"): nothing beyond semi-honest, shown as the attack.  The X25519 base OT
is not secure against a malicious base-OT receiver -- in IKNP the extension *sender*,
i.e. a SHADE party -- which answers ``(b G, b' G)`` instead of ``(b G, b T)`` and so
learns both keys of every base OT, and with them the peer's IKNP choice bits (its LSH
code bits).  docs/security.md lists this as a gap of the malicious-client column.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefl.crypto import ot
from securefl.crypto.ot import KAPPA, BaseOTSender, IKNPReceiver, RowPRG, prg_nonce, setup_context


def test_a_malicious_base_ot_receiver_learns_both_keys_and_the_peers_choices():
    context = setup_context(b"federation", 0, 1)
    sender = BaseOTSender(context)  # the honest IKNP receiver plays the base-OT sender
    a_point = sender.point()
    secrets = [[X25519PrivateKey.generate() for _ in range(2)] for _ in range(KAPPA)]
    points = np.array([[np.frombuffer(k.public_key().public_bytes_raw(), np.uint8) for k in pair]
                       for pair in secrets])  # (b G, b' G): both points with known logarithms
    keys0, keys1 = sender.finish(points)  # accepted: nothing distinguishes them from (b G, b T)
    public_a = ot._public(a_point.tobytes())
    for index, pair in enumerate(secrets):
        p0, p1 = points[index, 0].tobytes(), points[index, 1].tobytes()
        for choice, keys in ((0, keys0), (1, keys1)):
            learned = ot._kdf(context, index, choice, a_point.tobytes(), p0, p1,
                              pair[choice].exchange(public_a))
            assert learned == keys[index].tobytes()
    # the honest IKNP receiver extends with its choice bits r (in SHADE, its code bits);
    # holding both keys of base OT 0, the cheating sender reads r off U's first row
    choices = np.random.default_rng(0).integers(0, 2, 256).astype(np.uint8)
    receiver = IKNPReceiver(keys0, keys1)
    message, _ = receiver.extend(choices, chunk=0, sender=1, receiver=0)
    words = message.arrays[0].shape[1]
    nonce = prg_nonce(0, 0)
    pads = RowPRG(keys0).fill(nonce, words)[0] ^ RowPRG(keys1).fill(nonce, words)[0]
    read = np.unpackbits((message.arrays[0][0] ^ pads).view(np.uint8), bitorder="little")
    np.testing.assert_array_equal(read[: choices.size], choices)
