"""securefl's Flower app: one ServerApp and one ClientApp serving every registered program.

The FAB that :func:`securefl.fl.flower.deploy.write_app` writes names these two objects
as its components (``securefl.fl.flower.app:server_app`` / ``:client_app``); securefl
itself is installed on every machine, the FAB carries only ``pyproject.toml``.

**ServerApp** (``server_app``): reads the run config (``program``, ``num-partitions``,
``out`` and the program's own keys), finds the nodes (:meth:`FlowerTransport.discover`),
runs the program's server half and writes ``<out>/result.json`` (the half's result plus
the transport's bytes and exchange count), appending progress events to
``<out>/progress.jsonl`` as they happen; a failure is written to ``<out>/error.json``.
``out`` is a directory on the machine running the ServerApp (the SuperLink's machine).

**ClientApp** (``client_app``): one ``query`` handler.  ``_hello`` requests are answered
with the node's ``partition-id``; every other request goes to the program's client half
through :func:`securefl.runtime.transport.serve`, with the client's state Record in
``Context.state`` (Flower keeps it on the SuperNode between messages and discards the
update when the handler raises, exactly as the in-process transport does).
"""

from __future__ import annotations

import importlib
import json
import os
import traceback
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from securefl.errors import ConfigError, InputError
from securefl.fl.flower.grid_transport import HELLO, FlowerTransport
from securefl.fl.flower.records import CONFIG, from_recorddict, store, to_recorddict
from securefl.runtime.transport import ClientHalf, NodeContext, ServerHalf, serve

PROGRAMS: dict[str, tuple[str, str]] = {
    "method": ("securefl.experiments.deployment:ExperimentServer",
               "securefl.experiments.deployment:ExperimentClient"),
    "link-check": ("securefl.runtime.linkcheck:LinkCheckServer", "securefl.runtime.linkcheck:LinkCheckClient"),
}
"""Program name -> (server half, client half) as ``module:class``, imported when first
used: ``method`` runs one job of an experiment with any split method
(:mod:`securefl.experiments.deployment`; a program's halves may live in a room above
this one, hence names, not imports), ``link-check`` verifies the client-to-client
links (:mod:`securefl.runtime.linkcheck`)."""


def _resolve(reference: str) -> Any:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def server_half(program: str) -> ServerHalf:
    if program not in PROGRAMS:
        raise InputError("program", program, f"must be one of {sorted(PROGRAMS)}")
    return _resolve(PROGRAMS[program][0])()


def client_half(program: str) -> ClientHalf:
    if program not in PROGRAMS:
        raise InputError("program", program, f"must be one of {sorted(PROGRAMS)}")
    return _resolve(PROGRAMS[program][1])()


def warm_up() -> None:
    """Import every program's halves and run each client half's
    :meth:`~securefl.runtime.transport.ClientHalf.warm_up`, once, before a warm executor forks:
    otherwise every forked message handler would import and initialise them again.  What a
    program needs (for ``method``: the methods, the configuration, the default dataset and
    torch's first training step) is the program's own business, in its own room."""
    for server, client in PROGRAMS.values():
        _resolve(server)
        _resolve(client).warm_up()


# ----------------------------------------------------------------------------- ServerApp

server_app = ServerApp()


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    tmp.replace(path)


def run_program(grid: Grid, context: Context, half: ServerHalf) -> dict[str, Any]:
    """Discover the nodes and run ``half``; results and progress go to ``run_config['out']``."""
    run = dict(context.run_config)
    out = Path(str(run.get("out", ""))).expanduser()
    if not str(run.get("out", "")):
        raise ConfigError("run config 'out' (a directory for result.json) is not set")
    progress = out / "progress.jsonl"
    out.mkdir(parents=True, exist_ok=True)

    def log_event(event: dict[str, Any]) -> None:
        with progress.open("a") as handle:
            handle.write(json.dumps(event) + "\n")

    try:
        transport = FlowerTransport.discover(
            grid, program=half.program, expected=int(run["num-partitions"]),
            wait=float(run.get("node-wait", 120.0)), poll_interval=float(run.get("poll", 0.1)))
        transport.on_event = log_event
        transport.log({"event": "nodes", "node_of": {str(k): v for k, v in transport.node_of.items()}})
        result = half.run(transport, run)
        result["transport"] = {"exchanges": transport.stats.exchanges,
                               "bytes_down": transport.stats.bytes_down,
                               "bytes_up": transport.stats.bytes_up,
                               "seconds_by_step": transport.stats.seconds,
                               "pid": os.getpid()}
    except Exception as exc:
        write_json(out / "error.json", {"error": f"{type(exc).__name__}: {exc}",
                                        "traceback": traceback.format_exc()})
        raise
    write_json(out / "result.json", result)
    return result


@server_app.main()
def _server_main(grid: Grid, context: Context) -> None:
    from securefl.fl.flower.tuning import tune_object_pulls

    tune_object_pulls()
    run_program(grid, context, server_half(str(context.run_config["program"])))


# ----------------------------------------------------------------------------- ClientApp

client_app = ClientApp()


@client_app.query()
def _client_query(message: Message, context: Context) -> Message:
    request = from_recorddict(message.content)
    partition = context.node_config.get("partition-id")
    if partition is None:
        raise ConfigError("this SuperNode has no node config 'partition-id'")
    if request.config.get("_step") == HELLO:
        return Message(RecordDict({CONFIG: ConfigRecord({"partition-id": int(partition)})}),
                       reply_to=message)
    half = client_half(str(request.config.get("_program")))
    node = NodeContext(int(partition), dict(context.node_config), dict(context.run_config))
    reply, state, seconds = serve(half, request, from_recorddict(context.state), node)
    store(context.state, state)
    reply.config["_handler_seconds"] = seconds
    return Message(to_recorddict(reply), reply_to=message)
