"""Start a SuperLink and N SuperNodes on 127.0.0.1, run a program on them, stop them.

:class:`LocalFederation` is what the deployment test, the benchmark and
``python -m securefl.fl.flower local`` use; ``docs/flower.md`` shows the same commands
by hand and across machines (TLS, node authentication).

* :meth:`LocalFederation.start` picks free ports, writes a private ``FLWR_HOME`` with a
  SuperLink connection named ``securefl``, starts ``flower-superlink --insecure`` (in-memory
  state, no runtime dependency installation: securefl is already installed) and the
  nodes, each with node config ``partition-id=i num-partitions=N``.  ``mode="fast"``:
  :mod:`securefl.fl.flower.link` and :mod:`securefl.fl.flower.node` (warm executors,
  ``poll`` s); ``"cold"``: the same with Flower's subprocess isolation (a fresh process
  per message and per run); ``"stock"``: plain ``flower-superlink`` / ``flower-supernode``
  with every Flower default (the baseline of the latency figures).
  Every process gets :data:`~securefl.fl.flower.node.QUIET_ENV` (no telemetry, no update
  check: nothing leaves the machine).
* :meth:`LocalFederation.run` writes the app (:func:`write_app`: a ``pyproject.toml``
  whose run config holds the program's settings and ``out``), submits it with
  ``flwr run`` and waits for ``<out>/result.json`` (or ``error.json``).
* :meth:`LocalFederation.stop` signals every process it started, and every process
  those started (found through ``/proc`` before signalling: Flower detaches its
  SuperExec into its own session), by PID: SIGTERM, then SIGKILL after ``grace``
  seconds.  Use it as a context manager so this happens pass or fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from securefl.errors import ConfigError, InputError
from securefl.fl.flower.node import QUIET_ENV

MODES = ("fast", "cold", "stock")
CONNECTION = "securefl"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise InputError("run_config", value, "values must be bool, int, float or str")


def write_app(directory: str | os.PathLike, run_config: dict[str, Any], *,
              server_app: str = "securefl.fl.flower.app:server_app",
              client_app: str = "securefl.fl.flower.app:client_app") -> Path:
    """Write a Flower app directory (``pyproject.toml``) running ``run_config``."""
    from securefl import __version__

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    lines = [
        "[build-system]", 'requires = ["hatchling"]', 'build-backend = "hatchling.build"', "",
        "[project]", 'name = "securefl-app"', f'version = "{__version__}"',
        'description = "securefl programs on Flower"', 'license = "Apache-2.0"',
        "dependencies = []", "",
        "[tool.flwr.app]", 'publisher = "securefl"', "",
        "[tool.flwr.app.components]", f'serverapp = "{server_app}"', f'clientapp = "{client_app}"', "",
        "[tool.flwr.app.config]",
    ]
    lines += [f"{key} = {_toml_value(value)}" for key, value in sorted(run_config.items())]
    (target / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return target


def _children(pid: int) -> set[int]:
    """All descendants of ``pid`` (from /proc)."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent_of[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parent_of.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class LocalFederation:
    """A SuperLink and ``nodes`` SuperNodes on 127.0.0.1 (see module docstring)."""

    nodes: int = 3
    mode: str = "fast"
    poll: float = 0.1
    node_config: dict[str, Any] = field(default_factory=dict)
    grace: float = 10.0
    workdir: Path | None = None
    superlink_port: int = 0
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    _own_workdir: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InputError("mode", self.mode, f"must be one of {MODES}")
        if not isinstance(self.nodes, int) or self.nodes < 1:
            raise InputError("nodes", self.nodes, "must be a positive integer")

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "LocalFederation":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(QUIET_ENV)
        env["FLWR_HOME"] = str(self.home)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    @property
    def home(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "flwr-home"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.superlink_port}"

    def _spawn(self, name: str, command: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                                env=self.env(), start_new_session=True,
                                                cwd=self.workdir)
        log.close()

    def start(self, *, wait: float = 60.0) -> None:
        """Start the SuperLink and the nodes; returns when the SuperLink accepts connections."""
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="securefl-flower-"))
            self._own_workdir = True
        self.home.mkdir(parents=True, exist_ok=True)
        self.superlink_port = free_port()
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "{self.address}"\ninsecure = true\n')
        bin_dir = Path(sys.executable).parent
        link_args = ["--insecure", "--disable-runtime-dependency-installation",
                     "--host", "127.0.0.1", "--port", str(self.superlink_port)]
        if self.mode == "stock":
            link = [str(bin_dir / "flower-superlink"), *link_args]
        else:
            link = [sys.executable, "-m", "securefl.fl.flower.link", "--poll", str(self.poll),
                    *(["--cold"] if self.mode == "cold" else []), *link_args]
        self._spawn("superlink", link)
        self._await_port(self.superlink_port, wait, "superlink")
        for i in range(self.nodes):
            config = {"partition-id": i, "num-partitions": self.nodes, **self.node_config}
            node_args = ["--insecure", "--superlink", self.address, "--port", str(free_port()),
                         "--node-config", " ".join(f"{k}={_toml_value(v)}" for k, v in config.items())]
            if self.mode == "stock":
                command = [str(bin_dir / "flower-supernode"), *node_args]
            else:
                command = [sys.executable, "-m", "securefl.fl.flower.node", "--poll", str(self.poll),
                           *(["--cold"] if self.mode == "cold" else []), *node_args]
            self._spawn(f"node{i}", command)

    def _await_port(self, port: int, wait: float, name: str) -> None:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.processes[name].poll() is not None:
                raise ConfigError(f"{name} exited early: see {self.workdir}/{name}.log")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise ConfigError(f"{name} did not open port {port} within {wait:g} s")

    def kill_node(self, index: int) -> list[int]:
        """SIGKILL node ``index`` and everything it started (a crashed machine)."""
        process = self.processes[f"node{index}"]
        pids = [process.pid, *sorted(_children(process.pid))]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait(timeout=self.grace)
        return pids

    def stop(self) -> list[int]:
        """Stop every process started (and their descendants) by PID; returns the PIDs."""
        pids: list[int] = []
        for process in self.processes.values():
            if process.poll() is None:
                pids += [process.pid, *sorted(_children(process.pid))]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            for process in self.processes.values():
                process.poll()
            time.sleep(0.1)
        for pid in pids:
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for process in self.processes.values():
            try:
                process.wait(timeout=self.grace)
            except subprocess.TimeoutExpired:
                pass
        if self._own_workdir and self.workdir is not None and os.environ.get("SECUREFL_KEEP_FLOWER") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)
        return pids

    # ------------------------------------------------------------------ runs
    def submit(self, app_dir: Path) -> None:
        """``flwr run app_dir securefl`` (raises ConfigError with Flower's output on failure)."""
        flwr = Path(sys.executable).parent / "flwr"
        done = subprocess.run([str(flwr), "run", str(app_dir), CONNECTION], env=self.env(),
                              capture_output=True, text=True, timeout=120, cwd=self.workdir)
        if done.returncode != 0 or "Successfully started run" not in done.stdout:
            raise ConfigError(f"flwr run failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")

    def launch(self, run_config: dict[str, Any], *, name: str,
               server_app: str = "securefl.fl.flower.app:server_app",
               extra_files: dict[str, str] | None = None) -> Path:
        """Submit one program run; returns its ``out`` directory (see :func:`wait_result`).

        ``extra_files`` are written into the app directory (the FAB), e.g. a modified
        ServerApp named by ``server_app``."""
        assert self.workdir is not None, "start() first"
        out = self.workdir / "runs" / name
        config = {"num-partitions": self.nodes, "poll": self.poll, **run_config, "out": str(out)}
        app_dir = write_app(self.workdir / "apps" / name, config, server_app=server_app)
        for filename, text in (extra_files or {}).items():
            (app_dir / filename).write_text(text)
        self.submit(app_dir)
        return out

    def run(self, run_config: dict[str, Any], *, name: str, timeout: float = 600.0,
            **options: Any) -> dict[str, Any]:
        """:meth:`launch` and wait; returns ``result.json`` (ConfigError on error/timeout)."""
        return wait_result(self.launch(run_config, name=name, **options), timeout,
                           processes=self.processes)



def progress(out: Path) -> list[dict[str, Any]]:
    """The progress events a run has written to ``out`` so far."""
    path = Path(out) / "progress.jsonl"
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written right now
            break
    return events


def wait_result(out: Path, timeout: float, *, processes: dict[str, subprocess.Popen] | None = None
                ) -> dict[str, Any]:
    """Wait for ``out/result.json``; ``error.json``, a dead SuperLink or the timeout: ConfigError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (out / "result.json").exists():
            return json.loads((out / "result.json").read_text())
        if (out / "error.json").exists():
            raise ConfigError(f"server app failed: {json.loads((out / 'error.json').read_text())['error']}")
        if processes and processes["superlink"].poll() is not None:
            raise ConfigError("the SuperLink exited during the run")
        time.sleep(0.2)
    raise ConfigError(f"no result in {out} after {timeout:g} s")
