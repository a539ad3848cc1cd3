"""Key substitution by a deviating server on the transport (tests/adversary.py's harness as
the in-process transport's ``intercept``): the relayed link-key table and the secure sum's
key list are rewritten in the requests; every attacked client refuses (ProtocolError) and
nothing derived from a forged key is ever sent.
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto.channel import Message
from securefl.crypto.identity import new_federation
from securefl.errors import DropoutError
from securefl.runtime import links
from securefl.runtime.linkcheck import LinkCheckClient, LinkCheckServer
from securefl.runtime.transport import InProcessTransport, Record
from tests.adversary import Adversary
from tests.runtime.test_transport import nodes, summed


def test_a_server_relabelling_link_members_is_refused_by_the_clients_it_lied_to():
    """No link key crosses the network (each is derived from the two clients' roster
    identities), so the server's only lever is the member list: told that party 1 is
    client 2 and party 2 client 1, client 0 derives keys its peers do not hold, and every
    batch to or from it fails its MAC (each client stops at its first failed batch)."""
    def swap(client, request):
        if client == 0:
            request.arrays["members"] = np.array([0, 2, 1], np.int64)
        return request

    transport = InProcessTransport(LinkCheckClient(), nodes(3, {"rounds": 1, "frames": 2}),
                                   intercept=Adversary().on("links/open", swap))
    result = LinkCheckServer().run(transport, {"rounds": 1, "frames": 2})
    assert not result["verified"]
    assert all("MAC check failed" in result["failed"][f"0/receive/{c}"] for c in range(3))
    assert not any(result["links"].values())


def test_a_stranger_in_the_member_list_or_a_batch_forged_outside_the_roster_is_refused():
    """A member list naming a client outside the roster is refused before any link opens;
    a batch sealed by an identity of another federation, presented as client 0's, fails
    its MAC."""
    def stranger(client, request):
        request.arrays["members"] = np.array([c if c == client else 100 + c for c in range(3)],
                                             np.int64)
        return request

    transport = InProcessTransport(LinkCheckClient(), nodes(3, {"rounds": 1, "frames": 1}),
                                   intercept=Adversary().on("links/open", stranger))
    result = LinkCheckServer().run(transport, {"rounds": 1, "frames": 1})
    assert all("no pair key" in result["failed"][f"open/{c}"] for c in range(3))

    _, outsiders = new_federation("other", 3)

    def forged(client, request):
        if client == 0:
            return request
        state = Record(config={"_session": bytes(request.config["_session"])})
        links.open_links(state, outsiders[0], me=0, members=range(3))
        request.arrays["relay/from/0"] = links.seal(
            state, [Message(0, client, "link-check/payload", (np.zeros(4, np.uint8),))],
            me=0, peer=client)
        return request

    transport = InProcessTransport(LinkCheckClient(), nodes(3, {"rounds": 1, "frames": 1}),
                                   intercept=Adversary().on("links/receive", forged))
    result = LinkCheckServer().run(transport, {"rounds": 1, "frames": 1})
    assert all("MAC check failed" in result["failed"][f"0/receive/{c}"] for c in (1, 2))


def test_a_server_substituting_secure_sum_keys_is_refused_before_any_share_is_sent():
    """On the transport, the server replaces every peer's (c^PK, s^PK) in the
    ``secagg/keys`` request: no client sends a share ciphertext, the sum fails."""
    adversary = Adversary()

    def swap(client, request):
        ids, keys = request.arrays["secagg/sum/in/0"], np.array(request.arrays["secagg/sum/in/1"], copy=True)
        for row, index in enumerate(ids):
            if int(index) != client:
                keys[row] = np.concatenate([adversary.public(("c", int(index))),
                                            adversary.public(("s", int(index)))])
        request.arrays["secagg/sum/in/1"] = keys
        return request

    adversary.on("secagg/keys", swap)
    values = [np.arange(4, dtype=np.uint64) + c for c in range(5)]
    with pytest.raises(DropoutError):  # every client refused: nobody answered the share round
        summed(values, [0, 1, 2, 3, 4], 3, intercept=adversary)
    shares_sent = [c for c, step, _ in adversary.seen if step == "secagg/ciphertexts"]
    assert shares_sent == []


def test_different_survivor_lists_to_different_clients_get_no_share_on_the_transport():
    """The server shows client 3 a survivor list without client 4 (so that 3 would reveal
    s_4^SK's share while the others reveal b_4's): 3 endorses that list, which counts for
    no one (its tags cover another list), and the t - 1 tags relayed to it are on the other
    list, so it refuses the endorsements step and sends no unmask share; the sum that
    completes is the one over the list t clients endorsed, all five, from which the server
    learns nothing more; the same when two clients are shown the shorter list."""
    def split(*shown_less):
        adversary = Adversary()

        def edit(client, request):
            if client in shown_less:
                request.arrays["secagg/sum/in/0"] = np.array([0, 1, 2, 3], dtype=np.int32)
            return request

        adversary.on("secagg/survivors", edit)
        return adversary

    values = [np.arange(4, dtype=np.uint64) + c for c in range(5)]
    outcome = summed(values, [0, 1, 2, 3, 4], 3, intercept=split(3))
    assert "does not verify" in outcome.failed[3] and 3 in outcome.dropped["unmask"]
    assert list(outcome.total) == list(sum(values)) and outcome.survivors == (0, 1, 2, 3, 4)
    # 0, 1 and 4 endorse {0..4}, 2 and 3 {0..3}: only the first list has t endorsers; 2 and
    # 3 refuse its tags and reveal nothing, the sum is the one over all five
    outcome = summed(values, [0, 1, 2, 3, 4], 3, intercept=split(2, 3))
    assert all("does not verify" in outcome.failed[c] for c in (2, 3))
    assert list(outcome.total) == list(sum(values)) and outcome.survivors == (0, 1, 2, 3, 4)
