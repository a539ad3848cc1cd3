"""A SuperNode with securefl's latency settings: ``python -m securefl.fl.flower.node``.

Usage::

    python -m securefl.fl.flower.node [--poll S] [--cold] FLOWER-SUPERNODE-OPTIONS...

runs Flower's own ``flower-supernode`` with every option passed through (``--superlink``,
``--insecure`` or ``--root-certificates``, ``--auth-supernode-private-key``,
``--node-config``, ``--port``, ...) after :func:`securefl.fl.flower.tuning.tune_supernode_polling`
(``--poll``, default 0.1 s) and :func:`~securefl.fl.flower.tuning.tune_object_pulls`.

By default the node is *warm*: it runs Flower's ``--isolation process`` and starts, as
its child, a task executor (:func:`run_executor`) that has already imported flwr, torch
and securefl's app, polls the SuperNode's Runtime API for ClientApp tasks every
``--poll`` seconds and runs each task in a ``fork()`` of itself -- still a fresh process
per message, as Flower requires (state travels in ``Context.state``), without the import
cost; it dies with its SuperNode (``PR_SET_PDEATHSIG`` on Linux).  ``--cold`` keeps
Flower's default subprocess isolation (a new ``flwr-clientapp``
per message) and only sets ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``.  The executor stops when
its SuperNode exits.  The executor uses Flower's Runtime API (``AcquireTask``) exactly as
Flower's SuperExec does; it is tied to the pinned flwr version like
:mod:`securefl.fl.flower.tuning`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

QUIET_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
"""Environment every Flower process securefl starts gets: no telemetry, no update check
(both would contact flower.ai)."""


def run_executor(address: str, *, kind: str, poll: float, parent_pid: int,
                 root_certificates: str | None = None, node_config: str | None = None) -> None:
    """Serve ``kind`` ("client" or "server") app tasks of the Runtime API at ``address``
    in forks of this process, which has imported and warmed up everything first, and, where
    ``node_config`` (the SuperNode's ``--node-config``) names the node's identity and roster,
    derived its pair keys with every roster member (:func:`warm_credentials`)."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient

    from securefl.fl.flower.app import warm_up
    from securefl.fl.flower.tuning import tune_object_pulls

    _die_with_parent(parent_pid)
    certificates = None if root_certificates is None else open(root_certificates, "rb").read()
    task = _task_runner(kind, address, certificates)
    tune_object_pulls()
    warm_up()
    if node_config:
        warm_credentials(node_config)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the kernel
    client = RuntimeHttpClient.from_server_address(
        server_address=address, insecure=certificates is None, root_certificates=certificates,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
        retry_invoker=make_simple_http_retry_invoker())
    task_type = TaskType.CLIENT_APP if kind == "client" else TaskType.SERVER_APP
    request = AcquireTaskRequest(supported_task_types=[str(task_type)])
    while os.getppid() == parent_pid:
        response = client.AcquireTask(request)
        if response.HasField("task") and response.token:
            if os.fork() == 0:
                code = 0
                try:
                    task(response.token)
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else 1
                except BaseException:  # noqa: BLE001 -- a fork must never return into the loop
                    code = 1
                os._exit(code)
            continue
        time.sleep(poll)


def _die_with_parent(parent_pid: int) -> None:
    """Have the kernel send this process SIGTERM when its parent dies (Linux
    ``PR_SET_PDEATHSIG``): an executor whose SuperNode crashed would otherwise wait in
    ``AcquireTask`` retries for ever as an orphan.  Elsewhere the loop's own check of the
    parent PID remains."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(0)


def _task_runner(kind: str, address: str, certificates: bytes | None):
    """What a fork runs for one task token: Flower's own ClientApp or ServerApp process body."""
    insecure = certificates is None
    if kind == "client":
        from flwr.supernode.runtime.run_clientapp import run_clientapp

        return lambda token: run_clientapp(runtime_api_address=address, token=token,
                                           insecure=insecure, certificates=certificates,
                                           parent_pid=None)
    if kind == "server":
        from queue import Queue

        from flwr.supercore.logger import mirror_output_to_queue, restore_output
        from flwr.superlink.runtime import run_serverapp

        def run(token: str) -> None:
            log_queue: Queue[str | None] = Queue()
            mirror_output_to_queue(log_queue)
            try:
                run_serverapp(runtime_api_address=address, log_queue=log_queue, token=token,
                              insecure=insecure, certificates=certificates, parent_pid=None)
            finally:
                restore_output()

        return run
    raise ValueError(f"kind {kind!r}")


def warm_credentials(node_config: str) -> int:
    """Parse the node's credentials from its ``--node-config`` (Flower's syntax) and derive
    its pair keys (:meth:`securefl.crypto.identity.Credentials.derive_pair_keys`), so that
    every forked message handler finds them in the parsed-credentials cache.  A config
    without an identity, or unreadable files: nothing is warmed (the message handlers then
    refuse with the error).  Returns the number of pair keys derived."""
    from flwr.common.config import parse_config_args

    from securefl.crypto.identity import IDENTITY_FILE, ROSTER_FILE_KEY, node_credentials
    from securefl.errors import SecureFLError

    config = parse_config_args([node_config])
    if not (config.get(IDENTITY_FILE) and config.get(ROSTER_FILE_KEY) and "partition-id" in config):
        return 0
    try:
        return node_credentials(config, int(config["partition-id"])).derive_pair_keys()
    except SecureFLError:
        return 0


def start_executor(kind: str, address: str, poll: float, root_certificates: str | None = None,
                   node_config: str | None = None) -> subprocess.Popen:
    """Start the warm executor for this process (it exits when this process does)."""
    command = [sys.executable, "-m", "securefl.fl.flower.node", "--executor", kind,
               "--runtime-api-address", address, "--poll", str(poll),
               "--parent-pid", str(os.getpid())]
    if root_certificates:
        command += ["--executor-root-certificates", root_certificates]
    if node_config:
        command += ["--executor-node-config", node_config]
    return subprocess.Popen(command)


def _node_config(passthrough: Sequence[str]) -> str | None:
    """The ``--node-config`` string in ``passthrough``, if any."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--node-config")
    known, _ = parser.parse_known_args(list(passthrough))
    return known.node_config


def _runtime_address(passthrough: Sequence[str], default_port: int) -> str:
    """The Runtime API address ``--host``/``--port`` in ``passthrough`` give."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=default_port)
    known, _ = parser.parse_known_args(list(passthrough))
    return f"{known.host}:{known.port}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m securefl.fl.flower.node",
        description="Flower SuperNode with securefl's latency settings (other options go to "
                    "flower-supernode)")
    parser.add_argument("--poll", type=float, default=0.1,
                        help="seconds between polls of the SuperLink and for tasks (default 0.1)")
    parser.add_argument("--cold", action="store_true",
                        help="Flower's subprocess isolation: a fresh flwr-clientapp per message")
    parser.add_argument("--executor", choices=("client", "server"), help=argparse.SUPPRESS)
    parser.add_argument("--runtime-api-address", help=argparse.SUPPRESS)
    parser.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--executor-root-certificates", dest="executor_root", help=argparse.SUPPRESS)
    parser.add_argument("--executor-node-config", dest="executor_config", help=argparse.SUPPRESS)
    args, passthrough = parser.parse_known_args(argv)
    os.environ.update(QUIET_ENV)
    if args.executor:
        run_executor(args.runtime_api_address, kind=args.executor, poll=args.poll,
                     parent_pid=args.parent_pid, root_certificates=args.executor_root,
                     node_config=args.executor_config)
        return
    if any(a == "--isolation" or a.startswith("--isolation=") for a in passthrough):
        parser.error("--isolation is chosen by --cold (subprocess) or the default (process)")
    from securefl.fl.flower.tuning import tune_object_pulls, tune_supernode_polling

    tune_supernode_polling(min(args.poll, 3.0))
    tune_object_pulls()
    if args.cold:
        os.environ["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = str(args.poll)
        passthrough = [*passthrough, "--isolation", "subprocess"]
    else:
        passthrough = [*passthrough, "--isolation", "process"]
        start_executor("client", _runtime_address(passthrough, 9094), args.poll,
                       node_config=_node_config(passthrough))
    from flwr.supernode.cli import flower_supernode

    sys.argv = ["flower-supernode", *passthrough]
    flower_supernode()


if __name__ == "__main__":
    main()
