"""securefl's secure aggregation vs Flower's SecAgg+ on the same workload, back to back.

Workload: ``--clients`` N clients each holding a float vector of ``--dim`` D entries
(uniform in [-1, 1), one seed), a fraction ``--dropout`` of them (the same clients for
both) silent from the masked-input round on -- the case where the server must rebuild
every dropped client's pairwise masks.  Both protocols run on the complete graph (every
client shares keys with every other) with the same Shamir threshold ``--threshold``
(default ceil(2N/3)), all parties in this process, one after another:

* **securefl**: :func:`securefl.runtime.secure_sum` (Bonawitz et al. over Z_(2^64),
  fixed point scale 2^32, AES-CTR masks, Shamir over F_(2^61-1), vectorised); CPU
  seconds and bytes from its report.
* **Flower**: ``SecAggPlusWorkflow`` (server) and ``secaggplus_mod`` (client) of flwr
  1.42 with ``num_shares=N``, ``reconstruction_threshold=t``, ``max_weight=1`` (every
  client weighs 1, so no precision is lost to weight scaling) and Flower's default
  quantisation (clip 8, 2^22 levels, masks mod 2^32), driven through an in-memory
  ``Grid`` that hands every message to the addressed client's mod (no network, no
  processes: the protocols' own cost only).  CPU seconds are process CPU time around
  each party's handler (Flower's Shamir runs in threads); bytes are the sizes of the
  objects Flower would ship for every message (``Message`` deflated, as its object store
  sends them).

Both sums are checked against the plain sum of the survivors' vectors (securefl's within
its fixed-point bound; Flower's within its quantisation error).

**Flower's server time from its components** (``flower.model``, always recorded): the
unmask stage does one Shamir reconstruction per client (``combine_shares`` of all the
shares the survivors returned, not just t; pure-Python GF(2^128) in pycryptodome, per
16-byte chunk: a survivor's 32-byte mask seed, or a dropped client's ~300-byte serialised
EC private key), one self-mask per survivor, and for every dropped
client one X25519 agreement and one mask per other client (Flower loops over all of the
dropped client's neighbours); each mask is a Mersenne-Twister expansion of D entries
(``pseudo_rand_gen``) plus one vector addition; the masked vectors are summed.  Each
component is timed here on real inputs and the counts multiply them.  Above
``--flower-max-clients`` clients the Flower run is skipped and this model is the figure
(``flower_extrapolated: true``); below it, ``model_over_measured`` shows how well the
model matches the measured run.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import time
import uuid
from typing import Any

import numpy as np
from rich.progress import Progress

from securefl.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``securefl bench flower-secagg``."""
    parser.add_argument("--clients", type=int, default=100, help="number of clients N")
    parser.add_argument("--dim", type=int, default=10_000, help="entries per client vector D")
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="fraction of clients silent from the masked-input round on")
    parser.add_argument("--threshold", type=int, default=None, help="Shamir threshold t (default ceil(2N/3))")
    parser.add_argument("--seed", type=int, default=0, help="inputs and who drops")
    parser.add_argument("--flower-max-clients", type=int, default=200,
                        help="above this N, extrapolate Flower's server time from measured components")


def validate(args: argparse.Namespace) -> None:
    """Reject bad options before any work (InputError naming the option)."""
    if args.clients < 3:
        raise InputError("clients", args.clients, "must be >= 3 (Flower's SecAgg+ needs > 2 shares)")
    if args.dim < 1:
        raise InputError("dim", args.dim, "must be >= 1")
    if not 0.0 <= args.dropout < 1.0:
        raise InputError("dropout", args.dropout, "must lie in [0, 1)")
    threshold = _threshold(args)
    if not 2 <= threshold < args.clients:
        raise InputError("threshold", threshold, f"must lie in 2..{args.clients - 1}")
    if args.clients - math.floor(args.dropout * args.clients) < threshold:
        raise InputError("dropout", args.dropout, f"leaves fewer than t = {threshold} clients")


def _threshold(args: argparse.Namespace) -> int:
    return args.threshold if args.threshold is not None else math.ceil(2 * args.clients / 3)


def _workload(args: argparse.Namespace) -> tuple[list[np.ndarray], list[int]]:
    rng = np.random.default_rng(args.seed)
    inputs = [rng.uniform(-1.0, 1.0, args.dim) for _ in range(args.clients)]
    dropped = sorted(int(u) for u in rng.choice(args.clients, size=math.floor(args.dropout * args.clients),
                                                replace=False))
    return inputs, dropped


def run(args: argparse.Namespace, progress: Progress) -> dict:
    """Run both protocols on the same workload and return the JSON record."""
    validate(args)
    inputs, dropped = _workload(args)
    threshold = _threshold(args)
    survivors = [u for u in range(args.clients) if u not in dropped]
    expected = np.sum([inputs[u] for u in survivors], axis=0)
    task = progress.add_task(f"securefl vs Flower SecAgg+ {args.clients} x {args.dim}", total=2)
    ours = _securefl(inputs, dropped, threshold, expected)
    progress.advance(task)
    model = _flower_model(args.clients, args.dim, threshold, len(dropped))
    if args.clients <= args.flower_max_clients:
        theirs = _flower(inputs, dropped, threshold, expected)
        theirs["model"] = model
        theirs["model_over_measured"] = model["server_cpu_seconds"] / theirs["server_cpu_seconds"]
    else:
        theirs = {"server_cpu_seconds": model["server_cpu_seconds"], "flower_extrapolated": True,
                  "model": model, "num_shares": args.clients, "reconstruction_threshold": threshold}
    progress.advance(task)
    record: dict[str, Any] = {
        "clients": args.clients, "dim": args.dim, "dropout": args.dropout,
        "dropped": len(dropped), "threshold": threshold, "graph": "complete",
        "load_average": list(os.getloadavg()),
        "securefl": ours, "flower": theirs,
    }
    if theirs.get("server_cpu_seconds") and ours["server_cpu_seconds"]:
        record["server_cpu_ratio"] = theirs["server_cpu_seconds"] / ours["server_cpu_seconds"]
    if theirs.get("client_cpu_seconds_mean") and ours["client_cpu_seconds_mean"]:
        record["client_cpu_ratio"] = theirs["client_cpu_seconds_mean"] / ours["client_cpu_seconds_mean"]
    if theirs.get("bytes_total") and ours["bytes_total"]:
        record["bytes_ratio"] = theirs["bytes_total"] / ours["bytes_total"]
    record["verified"] = bool(ours["verified"] and theirs.get("verified", True))
    return record


# ----------------------------------------------------------------------------- securefl


def _securefl(inputs: list[np.ndarray], dropped: list[int], threshold: int,
              expected: np.ndarray) -> dict[str, Any]:
    from securefl.runtime.summation import secure_sum

    start = time.perf_counter()
    result = secure_sum(inputs, threshold=threshold, backend="secagg",
                        dropouts={u: "masked_input" for u in dropped})
    seconds = time.perf_counter() - start
    report = result.report
    error = float(np.max(np.abs(result.total - expected)))
    return {
        "seconds": seconds, "server_cpu_seconds": report.server_cpu_seconds,
        "client_cpu_seconds_mean": report.client_cpu_seconds_mean,
        "bytes_total": report.bytes_total, "bytes_max_client": report.bytes_max_client,
        "max_abs_error": error, "error_bound": report.error_bound,
        "verified": error <= report.error_bound and len(result.survivors) == len(inputs) - len(dropped),
    }


# ----------------------------------------------------------------------------- Flower


def _message_bytes(message: Any) -> int:
    """Bytes of the objects Flower ships for ``message`` (content and metadata)."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    return sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values())


def _shipped(message: Any) -> Any:
    """A copy of ``message`` rebuilt from the bytes Flower would ship (deflate, inflate)."""
    from flwr.app import Message
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
    from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

    content = message.content
    contents = {oid: obj.deflate() for oid, obj in get_all_nested_objects(content).items()}
    copy = Message(inflate_object_from_contents(content.object_id, contents),
                   message.metadata.dst_node_id, message.metadata.message_type,
                   group_id=message.metadata.group_id)
    for key in ("_message_id", "_src_node_id", "_run_id"):
        copy.metadata.__dict__[key] = message.metadata.__dict__[key]
    return copy


def _flower(inputs: list[np.ndarray], dropped: list[int], threshold: int,
            expected: np.ndarray) -> dict[str, Any]:
    """Run Flower's SecAgg+ workflow and mod in this process; measure CPU and bytes."""
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.client.mod import secaggplus_mod
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
    from flwr.compat.common import recorddict_compat as compat
    from flwr.server import ServerConfig
    from flwr.server.client_manager import SimpleClientManager
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.serverapp import Grid
    from flwr.supercore.task_identity import TaskIdentity

    # what a ServerApp process sets from its task before creating messages
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    n = len(inputs)
    node_ids = list(range(1, n + 1))
    contexts = {nid: Context(run_id=1, node_id=nid, node_config={}, state=RecordDict(),
                             run_config={}) for nid in node_ids}
    client_cpu = dict.fromkeys(node_ids, 0.0)
    traffic = {"down": 0, "up": 0}
    harness = {"cpu": 0.0}  # copying and measuring messages: neither party's cost
    silent = {node_ids[u] for u in dropped}
    pending: dict[str, Any] = {}  # message id -> the node's reply, until pulled

    def fit(nid: int):
        def call_next(message: Any, context: Any) -> Any:
            res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([inputs[nid - 1]]), 1, {})
            return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=message)
        return call_next

    class MemoryGrid(Grid):
        """Delivers every message to its node's secaggplus_mod, in this process."""

        def set_run(self, run: Any) -> None:
            self._run = run

        @property
        def run(self) -> Any:
            return self._run

        def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
            return Message(content, dst_node_id, message_type, group_id=group_id)

        def get_node_ids(self):
            return list(node_ids)

        def push_messages(self, messages):
            """Deliver each message to its node now; its reply waits for ``pull_messages``
            (a silent node -- a dropout -- leaves none)."""
            ids = []
            for message in messages:
                begin = time.process_time()
                nid = message.metadata.dst_node_id
                message_id = uuid.uuid4().hex
                message.metadata.__dict__["_message_id"] = message_id
                message.metadata.__dict__["_src_node_id"] = 0
                message.metadata.__dict__["_run_id"] = 1
                ids.append(message_id)
                stage = message.content.config_records[RECORD_KEY_CONFIGS][Key.STAGE]
                if nid in silent and stage in (Stage.COLLECT_MASKED_VECTORS, Stage.UNMASK):
                    harness["cpu"] += time.process_time() - begin
                    continue
                traffic["down"] += _message_bytes(message)
                delivered = _shipped(message)  # each node decodes its own copy, as on a network
                harness["cpu"] += time.process_time() - begin
                begin = time.process_time()
                reply = secaggplus_mod(delivered, contexts[nid], fit(nid))
                client_cpu[nid] += time.process_time() - begin
                begin = time.process_time()
                traffic["up"] += _message_bytes(reply)
                harness["cpu"] += time.process_time() - begin
                pending[message_id] = reply
            return ids

        def pull_messages(self, message_ids):
            """The replies that arrived for ``message_ids`` (each handed out once)."""
            return [pending.pop(i) for i in message_ids if i in pending]

        def send_and_receive(self, messages, *, timeout=None):
            return self.pull_messages(self.push_messages(messages))

    grid = MemoryGrid()
    manager = SimpleClientManager()
    for nid in node_ids:
        manager.register(GridClientProxy(nid, grid, 1))
    strategy = FedAvg(fraction_fit=1.0, min_fit_clients=n, min_available_clients=n,
                      fraction_evaluate=0.0)
    context = LegacyContext(Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                    run_config={}),
                            config=ServerConfig(num_rounds=1), strategy=strategy,
                            client_manager=manager)
    context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({"current_round": 1})
    context.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
        ndarrays_to_parameters([np.zeros_like(inputs[0])]), keep_input=True)
    workflow = SecAggPlusWorkflow(num_shares=n, reconstruction_threshold=threshold, max_weight=1.0)
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.WARNING)
    start, cpu = time.perf_counter(), time.process_time()
    try:
        workflow(grid, context)
    finally:
        flwr_logger.setLevel(level)
    seconds, total_cpu = time.perf_counter() - start, time.process_time() - cpu
    record = context.state.array_records.get(MAIN_PARAMS_RECORD, ArrayRecord())
    average = parameters_to_ndarrays(compat.arrayrecord_to_parameters(record, keep_input=True))[0]
    survivors = n - len(dropped)
    error = float(np.max(np.abs(average * survivors - expected)))
    quantum = 16.0 / 2**22 * survivors  # one quantisation level per summand, 2 clip / 2^22
    return {
        "seconds": seconds,
        "server_cpu_seconds": total_cpu - sum(client_cpu.values()) - harness["cpu"],
        "client_cpu_seconds_mean": float(np.mean([client_cpu[nid] for nid in node_ids
                                                  if nid not in silent])),
        "bytes_total": traffic["down"] + traffic["up"], "bytes_down": traffic["down"],
        "bytes_up": traffic["up"], "max_abs_error": error, "error_bound": quantum,
        "verified": error <= quantum, "flower_extrapolated": False,
        "num_shares": n, "reconstruction_threshold": threshold,
    }


def _flower_model(clients: int, dim: int, threshold: int, dropped: int) -> dict[str, Any]:
    """Flower's server CPU seconds for a workload, from its components timed here."""
    from flwr.common.secure_aggregation.crypto.shamir import combine_shares, create_shares
    from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
    from flwr.common.secure_aggregation.ndarrays_arithmetic import parameters_addition
    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
    from flwr.supercore.primitives.asymmetric import generate_key_pairs, private_key_to_bytes

    survivors = clients - dropped
    (private, _), (_, public) = generate_key_pairs(), generate_key_pairs()
    combine = {}
    # a survivor's self-mask seed is 32 bytes; a dropped client's key is its serialised
    # EC private key (~300 bytes): 16-byte chunks, each one GF(2^128) interpolation
    for kind, secret in (("seed", os.urandom(32)), ("key", private_key_to_bytes(private))):
        shares = create_shares(secret, threshold, clients)
        begin, repeats = time.process_time(), 2
        for _ in range(repeats):  # the server combines every share it collected, not just t
            if combine_shares(shares[:survivors]) != secret:
                raise AssertionError("Flower's Shamir did not reconstruct its secret")
        combine[kind] = (time.process_time() - begin) / repeats
    begin = time.process_time()
    for _ in range(20):
        generate_shared_key(private, public)
    agree = (time.process_time() - begin) / 20
    begin = time.process_time()
    mask = pseudo_rand_gen(os.urandom(32), 2**32, [(dim,)])
    expand = time.process_time() - begin
    vector = [np.zeros(dim, dtype=np.int64)]
    begin = time.process_time()
    for _ in range(5):
        vector = parameters_addition(vector, mask)
    add = (time.process_time() - begin) / 5
    # unmask: one reconstruction per client; a survivor's self mask; for a dropped client,
    # one key agreement and one mask per other client (Flower loops over all neighbours);
    # plus the sum of the masked vectors
    expansions = survivors + dropped * (clients - 1)
    terms = {
        "seed_reconstructions": survivors, "seconds_per_seed_reconstruction": combine["seed"],
        "key_reconstructions": dropped, "seconds_per_key_reconstruction": combine["key"],
        "key_agreements": dropped * (clients - 1), "seconds_per_key_agreement": agree,
        "mask_expansions": expansions, "seconds_per_expansion": expand,
        "vector_additions": expansions + survivors, "seconds_per_addition": add,
    }
    seconds = (survivors * combine["seed"] + dropped * combine["key"]
               + terms["key_agreements"] * agree + expansions * expand
               + terms["vector_additions"] * add)
    return {"server_cpu_seconds": seconds, "terms": terms}
