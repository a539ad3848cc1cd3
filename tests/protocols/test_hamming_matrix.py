"""The all-pairs matrix is SecureHamming driven on a transport: a relaying server that alters,
truncates or replays what it forwards is refused (ProtocolError), never a wrong matrix; the
bytes are the model's; setups persist across calls."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto.hamming import link_bytes_model, plaintext_hamming_matrix
from securefl.crypto.projection import busiest_link_bytes
from securefl.errors import ProtocolError
from securefl.protocols import secure_hamming_matrix


class Tampering:
    """A transport between the server and the clients that changes the first request array of
    ``step`` (its ``occurrence``-th exchange) whose name starts with ``prefix``: ``flip`` a
    byte, ``truncate`` it, or ``replay`` the array the same client got under that name before."""

    def __init__(self, inner, step, prefix, action, occurrence=0):
        self.inner, self.step, self.prefix, self.action = inner, step, prefix, action
        self.occurrence, self.seen, self.done, self.count = occurrence, {}, False, {}

    def exchange(self, step, requests, timeout=None):
        number = self.count[step] = self.count.get(step, -1) + 1
        for client in sorted(requests):
            arrays = requests[client].arrays
            for name in sorted(arrays):
                if not name.startswith(self.prefix):
                    continue
                if not self.done and step == self.step and number == self.occurrence:
                    self.done = self._attack(arrays, name, self.seen.get((client, name)))
                self.seen[(client, name)] = np.array(arrays[name], copy=True)
        return self.inner.exchange(step, requests, timeout=timeout)

    def _attack(self, arrays, name, earlier):
        value = np.array(arrays[name], copy=True)
        if self.action == "replay":
            if earlier is None or np.array_equal(earlier, value):
                return False
            arrays[name] = earlier
            return True
        raw = value.reshape(-1).view(np.uint8)
        if self.action == "flip":
            raw[len(raw) // 2] ^= 1
            arrays[name] = value
        else:
            arrays[name] = raw[:-2].copy()
        return True


def _codes(sizes, length, seed=11):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2, (n, length)) for n in sizes]


@pytest.mark.parametrize("step, prefix, action, occurrence", [
    ("cclp/shade/1", "relay/from/", "flip", 0),       # the hello (base-OT point A)
    ("cclp/shade/2", "relay/from/", "flip", 0),       # the base-OT answer
    ("cclp/shade/3", "relay/from/", "flip", 0),       # IKNP matrices U
    ("cclp/shade/3", "relay/from/", "truncate", 1),   # correction frames u
    ("cclp/shade/3", "relay/from/", "replay", 2),     # an older exchange's batch
    ("hamming/keys", "hamming/members", "flip", 0),   # a relabelled member list (link keys)
])
def test_shade_relay_tampering_is_refused(step, prefix, action, occurrence, monkeypatch):
    from securefl.crypto import shade

    monkeypatch.setattr(shade, "CHUNK_OTS", 64)
    monkeypatch.setattr(shade, "FRAME_BYTES", 64)
    monkeypatch.setattr(shade, "TILE_BYTES", 16)
    attacks = []

    def wrap(transport):
        attacks.append(Tampering(transport, step, prefix, action, occurrence))
        return attacks[-1]

    with pytest.raises(ProtocolError):
        secure_hamming_matrix(_codes([5, 4], 40), wrap=wrap, chunk_bytes=64)
    assert attacks[0].done


# Two parties: party 1 encrypts (pair_roles(0, 1) == (1, 0)), party 0 evaluates.
@pytest.mark.parametrize("step, prefix, action", [
    ("cclp/lwe/1", "cclp/lwe/in/", "flip"),      # a relayed public key
    ("cclp/lwe/2", "cclp/lwe/in/", "flip"),      # a relayed block of C
    ("cclp/lwe/2", "cclp/lwe/in/", "truncate"),
    ("cclp/lwe/3", "cclp/lwe/in/", "flip"),      # a relayed hint
    ("cclp/lwe/3", "relay/from/", "flip"),       # the answer D, sealed client to client
    ("cclp/lwe/3", "relay/from/", "truncate"),
])
def test_lwe_relay_tampering_is_refused(step, prefix, action):
    attacks = []

    def wrap(transport):
        attacks.append(Tampering(transport, step, prefix, action))
        return attacks[-1]

    with pytest.raises(ProtocolError):
        secure_hamming_matrix(_codes([3, 2], 20), backend="lwe", wrap=wrap)
    assert attacks[0].done


@pytest.mark.parametrize("action", ["flip", "truncate"])
def test_packed_rlwe_relay_tampering_is_refused(action):
    """A relayed block of a packed ring ``C`` (L = 20: 204 points per ciphertext) altered or cut."""
    attacks = []

    def wrap(transport):
        attacks.append(Tampering(transport, "cclp/lwe/2", "cclp/lwe/in/", action))
        return attacks[-1]

    with pytest.raises(ProtocolError):
        secure_hamming_matrix(_codes([3, 2], 20), backend="rlwe", wrap=wrap)
    assert attacks[0].done


@pytest.mark.parametrize("backend", ["shade", "rlwe"])
def test_measured_bytes_are_the_models(backend):
    """The busiest client's bytes measured on the transport's Records equal the model's but
    for the frame headers, tags, keys and base OTs it leaves out (2 % and 8 KiB per peer)."""
    sizes, length = [9, 8, 7], 256
    codes = _codes(sizes, length, seed=3)
    result = secure_hamming_matrix(codes, backend=backend)
    np.testing.assert_array_equal(result.matrix, plaintext_hamming_matrix(codes).matrix)
    measured = busiest_link_bytes(result.bytes_sent, result.bytes_received)
    model = link_bytes_model(backend, sizes, length)
    assert model <= measured <= 1.02 * model + 8192 * (len(sizes) - 1), (measured, model)


def test_the_server_learns_only_shares_and_own_blocks_and_reconstructs_exactly():
    sizes = [4, 3, 5]
    codes = _codes(sizes, 64, seed=5)
    seen = []

    class Observer:
        def __init__(self, inner):
            self.inner = inner

        def exchange(self, step, requests, timeout=None):
            done = self.inner.exchange(step, requests, timeout=timeout)
            seen.extend(name for reply in done.replies.values() for name in reply.arrays)
            return done

    result = secure_hamming_matrix(codes, wrap=Observer, seed=2)
    np.testing.assert_array_equal(result.matrix, plaintext_hamming_matrix(codes).matrix)
    plain = {name for name in seen if not name.startswith("relay/to/")}
    assert plain and all(name.startswith(("cclp/own", "cclp/share/"))
                         for name in plain), sorted(plain)


def test_a_client_runs_its_own_backend_not_the_one_the_server_asks_for():
    """The server's setup request names the backend; a client configured for SHADE refuses
    a request that asks it to run LWE (its backend is its node's, checked by its policy)."""

    class Downgrade:
        def __init__(self, inner):
            self.inner = inner

        def exchange(self, step, requests, timeout=None):
            if step == "hamming/keys":
                for record in requests.values():
                    record.config["hamming/backend"] = "lwe"
            return self.inner.exchange(step, requests, timeout=timeout)

    with pytest.raises(ProtocolError, match="asks for backend 'lwe'"):
        secure_hamming_matrix(_codes([3, 2], 20), backend="shade", wrap=Downgrade)
