"""Cost of active security (issue 20): the authenticated SecAgg against the semi-honest one,
back to back in one sitting, plus the signature primitives' costs.

    python benchmarks/active_security.py --out benchmarks/results/active_security_<date>.json \
        --size 100x1000 --size 500x100000 [--checkout before=/path/to/old/checkout
        [--checkout-size 100x1000]] [--dropout 0.1]

For every ``--size`` N x D and every checkout (this one, ``after``, and any ``--checkout
LABEL=PATH``: that tree's ``securefl`` on ``PYTHONPATH``) it runs ``securefl bench secagg
--clients N --dim D --dropout F`` with ``--no-authenticated`` (semi-honest) and then
``--authenticated`` (roster identities, signed keys, consistency round), each in a fresh
process, ``--repeat`` times alternating, and records every JSON, the medians and the
ratios of medians active / semi-honest of: the server's CPU
seconds, the clients' mean and max CPU seconds, the **critical path** with the clients in
parallel (server CPU + the slowest client's CPU; a round cannot finish sooner on any
number of machines), bytes sent, received and both per client, and all bytes.  The
machine's load average is recorded around every run (it is shared: quote CPU ratios).

``setup`` (``--setup-clients P``, repeatable): one round's per-client key setups outside
SecAgg, with signatures (today) against the semi-honest variant, in this process:

* ``links`` (:mod:`securefl.runtime.links`, FedProp's relayed SHADE/LWE frames): P clients
  :func:`~securefl.runtime.links.open_links` from the roster (no bytes; the CPU of a later
  round, pair keys kept, and of a federation's first, pair keys derived), against the
  semi-honest links a deployment without identities would run: unsigned ephemeral X25519
  keys relayed (32 bytes and an 8-byte id up, P rows down; a key pair and P - 1
  agreements of CPU per client).
* ``lsh`` (:func:`securefl.protocols.lsh.agree_seed`): run twice over a metered
  :class:`~securefl.crypto.channel.Network`, with credentials and without (its switch);
  CPU and frame bytes measured.
* ``lwe`` (:mod:`securefl.crypto.lwe_keys`): the key part of an LWE session -- each party
  draws an X25519 key and derives a pair secret with each peer (semi-honest), plus
  :meth:`~securefl.crypto.lwe_keys.KeyBinding.sign` once and ``verify`` per peer (active);
  bytes are the broadcast keys (32 per party) plus 64 per signature.

CPU is process time per client (every party runs in this process, one after another).

``primitives``: process CPU microseconds per call of Ed25519 sign and verify and ECDSA
P-256 verify (``cryptography``), Ed25519 verify in ``pycryptodome``, and an X25519
exchange -- the numbers behind the choice of verifier in :mod:`securefl.crypto.identity`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def primitives() -> dict:
    """CPU microseconds per call of the signature and key-agreement primitives."""
    from Crypto.PublicKey import ECC
    from Crypto.Signature import eddsa
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519

    def per_call(work, calls: int) -> float:
        work()
        begin = time.process_time()
        for _ in range(calls):
            work()
        return (time.process_time() - begin) / calls * 1e6

    message = os.urandom(160)  # about one key-binding statement
    signer = ed25519.Ed25519PrivateKey.generate()
    public, signature = signer.public_key(), signer.sign(message)
    ours, theirs = x25519.X25519PrivateKey.generate(), x25519.X25519PrivateKey.generate().public_key()
    ecdsa = ec.generate_private_key(ec.SECP256R1())
    ecdsa_public, ecdsa_signature = ecdsa.public_key(), ecdsa.sign(message, ec.ECDSA(hashes.SHA256()))
    dome_key = ECC.generate(curve="ed25519")
    dome_signature = eddsa.new(dome_key, "rfc8032").sign(message)
    dome_verifier = eddsa.new(dome_key.public_key(), "rfc8032")
    record = {
        "ed25519_verify_us": per_call(lambda: public.verify(signature, message), 3000),
        "ed25519_sign_us": per_call(lambda: signer.sign(message), 3000),
        "x25519_exchange_us": per_call(lambda: ours.exchange(theirs), 3000),
        "ecdsa_p256_verify_us": per_call(
            lambda: ecdsa_public.verify(ecdsa_signature, message, ec.ECDSA(hashes.SHA256())), 3000),
        "pycryptodome_ed25519_verify_us": per_call(lambda: dome_verifier.verify(message, dome_signature), 200),
    }
    record["ed25519_verify_per_x25519_exchange"] = record["ed25519_verify_us"] / record["x25519_exchange_us"]
    return record


def bench(checkout: Path, clients: int, dim: int, dropout: float, authenticated: bool) -> dict:
    """One ``securefl bench secagg`` in a fresh process with ``checkout`` on PYTHONPATH."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "record.json"
        command = [sys.executable, "-m", "securefl", "bench", "secagg", "--clients", str(clients),
                   "--dim", str(dim), "--dropout", str(dropout), "--json", str(out),
                   "--authenticated" if authenticated else "--no-authenticated"]
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        # cwd: ``python -m`` puts the working folder first on sys.path
        subprocess.run(command, env=env, cwd=checkout, check=True, stdout=subprocess.DEVNULL)
        record = json.loads(out.read_text())
    record["critical_path_cpu_seconds"] = record["server_cpu_seconds"] + record["client_cpu_seconds_max"]
    record["bytes_sent_and_received_per_client"] = (record["bytes_per_client"]
                                                    + record["bytes_received_per_client"])
    record["commit"] = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                                      check=True, capture_output=True, text=True).stdout.strip()
    return record


RATIOS = ("server_cpu_seconds", "client_cpu_seconds_mean", "client_cpu_seconds_max",
          "critical_path_cpu_seconds", "bytes_per_client", "bytes_received_per_client",
          "bytes_sent_and_received_per_client", "bytes_total")


def setup_costs(parties: int) -> dict:
    """One round's link, LSH-seed and LWE key setup for ``parties`` clients (docstring)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from securefl.crypto.channel import Network
    from securefl.crypto.identity import new_federation
    from securefl.crypto.keys import KeyPair, pairwise_secret
    from securefl.crypto.lwe_keys import KeyBinding
    from securefl.protocols.lsh import SeedAgreementClient, agree_seed
    from securefl.runtime import links
    from securefl.runtime.transport import Record

    _, credentials = new_federation("setup", parties)
    out: dict = {"parties": parties}
    # links: semi-honest = unsigned ephemeral X25519 keys relayed (a key pair and P - 1
    # agreements per client); active = open_links from the roster (nothing sent), cold (pair
    # keys derived: a federation's first round) and warm (kept: every later round)
    session = b"s" * 16
    begin = time.process_time()
    pairs = [KeyPair.generate() for _ in range(parties)]
    publics = [pair.public_array() for pair in pairs]
    for j in range(parties):
        for k in range(parties):
            if k != j:
                pairwise_secret(pairs[j].private, publics[k], session=session, me=j, peer=k,
                                label="link")
    semi = (time.process_time() - begin) / parties
    opened = {}
    for label in ("cold", "warm"):
        states = [Record(config={"_session": session}) for _ in range(parties)]
        begin = time.process_time()
        for j in range(parties):
            links.open_links(states[j], credentials[j], me=j, members=range(parties), label=label)
        opened[label] = (time.process_time() - begin) / parties
    out["links"] = {
        "active": {"cpu_seconds_per_client": opened["warm"], "bytes_sent_per_client": 0,
                   "bytes_received_per_client": 0},
        "semi_honest": {"cpu_seconds_per_client": semi, "bytes_sent_per_client": 32 + 8,
                        "bytes_received_per_client": (32 + 8) * parties},
        "active_first_round_cpu_seconds_per_client": opened["cold"]}
    # LSH seed agreement (a real switch: credentials or none)
    cohort = list(range(parties))
    for side, held in (("semi_honest", None), ("active", credentials)):
        network = Network()
        clients = [SeedAgreementClient(j, b"s" * 16, credentials=held[j] if held else None,
                                       cohort=cohort if held else (), binding=b"lsh-round")
                   for j in range(parties)]
        begin = time.process_time()
        agree_seed(clients, network)
        cpu = (time.process_time() - begin) / parties
        stats = [network.stats[j] for j in range(parties)]
        out.setdefault("lsh", {})[side] = {
            "cpu_seconds_per_client": cpu,
            "bytes_sent_per_client": sum(s.bytes_sent for s in stats) / parties,
            "bytes_received_per_client": sum(s.bytes_received for s in stats) / parties}
    # LWE keys
    members = {j: j for j in range(parties)}
    bindings = [KeyBinding(credentials[j], members, b"lwe-round") for j in range(parties)]
    begin = time.process_time()
    keys = [X25519PrivateKey.generate() for _ in range(parties)]
    publics = [k.public_key() for k in keys]
    for j in range(parties):
        for k in range(parties):
            if k != j:
                keys[j].exchange(publics[k])
    semi = (time.process_time() - begin) / parties
    raw = [p.public_bytes_raw() for p in publics]
    begin = time.process_time()
    signatures = [bindings[j].sign(j, raw[j]) for j in range(parties)]
    for j in range(parties):
        for k in range(parties):
            if k != j:
                bindings[j].verify(k, raw[k], signatures[k])
    extra = (time.process_time() - begin) / parties
    out["lwe"] = {
        "semi_honest": {"cpu_seconds_per_client": semi, "bytes_sent_per_client": 32,
                        "bytes_received_per_client": 32 * (parties - 1)},
        "active": {"cpu_seconds_per_client": semi + extra, "bytes_sent_per_client": 96,
                   "bytes_received_per_client": 96 * (parties - 1)}}
    for part in ("links", "lsh", "lwe"):
        a, h = out[part]["active"], out[part]["semi_honest"]
        out[part]["ratio_active_to_semi_honest"] = {k: a[k] / h[k] for k in a}
        out[part]["ratio_active_to_semi_honest"]["bytes_sent_and_received_per_client"] = (
            (a["bytes_sent_per_client"] + a["bytes_received_per_client"])
            / (h["bytes_sent_per_client"] + h["bytes_received_per_client"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--size", action="append", default=[], help="N x D, e.g. 500x100000")
    parser.add_argument("--setup-clients", action="append", type=int, default=[],
                        help="also measure one round's link/LSH/LWE key setup at P clients")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=1,
                        help="pairs per size and checkout, alternating; the ratios are of medians")
    parser.add_argument("--checkout", action="append", default=[], help="LABEL=PATH of another tree")
    parser.add_argument("--checkout-size", action="append", default=None,
                        help="run the other trees at these sizes only (default: every --size)")
    args = parser.parse_args()
    checkouts = {"after": ROOT}
    for item in args.checkout:
        label, _, path = item.partition("=")
        if not label or not Path(path, "securefl").is_dir():
            parser.error(f"--checkout {item!r}: needs LABEL=PATH of a tree holding securefl/")
        checkouts[label] = Path(path).resolve()
    if not args.size and not args.setup_clients:
        parser.error("give --size and/or --setup-clients")
    record = {"what": __doc__.split("\n")[0], "argv": sys.argv, "dropout": args.dropout,
              "primitives": primitives(), "runs": [], "setup": []}
    for parties in args.setup_clients:
        before = os.getloadavg()
        record["setup"].append({**setup_costs(parties), "load_average_before": before,
                                "load_average_after": os.getloadavg()})
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    for size in args.size:
        clients, dim = (int(x) for x in size.lower().split("x"))
        for label, checkout in checkouts.items():
            if label != "after" and args.checkout_size is not None and size not in args.checkout_size:
                continue
            sides: dict[str, list[dict]] = {"semi_honest": [], "active": []}
            for _ in range(args.repeat):
                for name, authenticated in (("semi_honest", False), ("active", True)):
                    before = os.getloadavg()
                    begin = time.perf_counter()
                    run = bench(checkout, clients, dim, args.dropout, authenticated)
                    run["wall_seconds_of_process"] = time.perf_counter() - begin
                    run["load_average_before_process"] = before
                    sides[name].append(run)
                    print(f"{label} {size} {name}: {run['wall_seconds_of_process']:.0f} s", flush=True)
            medians = {name: {k: statistics.median(r[k] for r in runs) for k in RATIOS}
                       for name, runs in sides.items()}
            ratios = {k: medians["active"][k] / medians["semi_honest"][k] for k in RATIOS}
            record["runs"].append({"checkout": label, "clients": clients, "dim": dim, **sides,
                                   "medians": medians, "ratio_active_to_semi_honest": ratios})
            Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
