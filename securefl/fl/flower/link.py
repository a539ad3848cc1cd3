"""A SuperLink with securefl's latency settings: ``python -m securefl.fl.flower.link``.

Usage::

    python -m securefl.fl.flower.link [--poll S] [--cold] FLOWER-SUPERLINK-OPTIONS...

runs Flower's own ``flower-superlink`` with every option passed through (``--insecure``
or ``--ssl-certfile/--ssl-keyfile/--ssl-ca-certfile``, ``--enable-supernode-auth``,
``--host``, ``--port``, ``--database``, ...) after
:func:`securefl.fl.flower.tuning.tune_object_pulls`.  By default it runs Flower's
``--isolation process`` and starts a warm executor for ServerApp tasks
(:func:`securefl.fl.flower.node.run_executor`): each run's ServerApp is a fork of a process
that has imported flwr, torch and securefl already, instead of a fresh ``flwr-serverapp``
(several seconds per run on the project machine).  With TLS the executor verifies the
SuperLink's Runtime API with ``--ssl-ca-certfile``.  ``--cold`` keeps Flower's subprocess
isolation and only sets ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from securefl.fl.flower.node import QUIET_ENV, start_executor


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m securefl.fl.flower.link",
        description="Flower SuperLink with securefl's latency settings (other options go to "
                    "flower-superlink)")
    parser.add_argument("--poll", type=float, default=0.1,
                        help="seconds between the executor's polls for tasks (default 0.1)")
    parser.add_argument("--cold", action="store_true",
                        help="Flower's subprocess isolation: a fresh flwr-serverapp per run")
    args, passthrough = parser.parse_known_args(argv)
    if any(a == "--isolation" or a.startswith("--isolation=") for a in passthrough):
        parser.error("--isolation is chosen by --cold (subprocess) or the default (process)")
    os.environ.update(QUIET_ENV)
    from securefl.fl.flower.tuning import tune_object_pulls

    tune_object_pulls()
    if args.cold:
        os.environ["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = str(args.poll)
        passthrough = [*passthrough, "--isolation", "subprocess"]
    else:
        known = argparse.ArgumentParser(add_help=False)
        known.add_argument("--host", default="127.0.0.1")
        known.add_argument("--port", type=int, default=8000)
        known.add_argument("--ssl-ca-certfile", default=None)
        found, _ = known.parse_known_args(passthrough)
        tls = "--insecure" not in passthrough
        passthrough = [*passthrough, "--isolation", "process"]
        start_executor("server", f"{found.host}:{found.port}", args.poll,
                       found.ssl_ca_certfile if tls else None)
    from flwr.superlink.cli import flower_superlink

    sys.argv = ["flower-superlink", *passthrough]
    flower_superlink()


if __name__ == "__main__":
    main()
