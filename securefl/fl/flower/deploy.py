"""Start a SuperLink and N SuperNodes on 127.0.0.1, run a program on them, stop them.

:class:`LocalFederation` is what the deployment test, the benchmark and
``python -m securefl.fl.flower local`` use; ``docs/flower.md`` shows the same commands
by hand and across machines (TLS, node authentication).

* :meth:`LocalFederation.start` picks free ports, writes a private ``FLWR_HOME`` with a
  SuperLink connection named ``securefl``, starts ``flower-superlink --insecure`` (in-memory
  state, no runtime dependency installation: securefl is already installed) and the
  nodes, each with node config ``partition-id=i num-partitions=N identity-file=...
  roster-file=...``: the identities are those of ``keys`` (a folder written by ``securefl
  keys new``) or, by default, of a fresh federation written to ``<workdir>/keys`` -- the
  operator's job in a real deployment, where each node gets only its own key file and the
  roster, out of band -- and ``privacy-ledger=<workdir>/ledger-i.json`` (the node's DP
  release ledger, :mod:`securefl.runtime.policy`).  The nodes' privacy policy is the strict
  default unless ``node_config`` sets ``policy-*`` keys.  ``mode="fast"``:
  :mod:`securefl.fl.flower.link` and :mod:`securefl.fl.flower.node` (warm executors,
  ``poll`` s); ``"cold"``: the same with Flower's subprocess isolation (a fresh process
  per message and per run); ``"stock"``: plain ``flower-superlink`` / ``flower-supernode``
  with every Flower default (the baseline of the latency figures).
  Every process gets :data:`~securefl.fl.flower.node.QUIET_ENV` (no telemetry, no update
  check: nothing leaves the machine).
* :meth:`LocalFederation.run` writes the app (:func:`write_app`: a ``pyproject.toml``
  whose run config holds the program's settings and ``out``), submits it with
  ``flwr run`` and waits for ``<out>/result.json`` (or ``error.json``).  With
  ``submit_in_process=True`` the submission calls the same command's function (flwr's
  ``flwr.cli.run.run.run``) in this process, with the federation's environment, instead of
  starting the ``flwr`` CLI: the same FAB and Control API request without a process that
  imports flwr (2-8 s per run on the 2-core project machine; the deployment tests submit
  eleven runs).
* :meth:`LocalFederation.stop` stops every process of the federation, pass or fail:
  SIGTERM, then SIGKILL after ``grace`` seconds, by PID.  *Which* processes: each one
  securefl starts is the leader of a session of its own (``start_new_session``), and
  everything it starts inherits that session unless it detaches (Flower's SuperExec
  does); :meth:`LocalFederation.track` scans ``/proc`` for every process in one of the
  federation's sessions or descended from one of its processes, and adopts the sessions
  of detached descendants.  It runs after start-up, on every launch and wait, and again
  inside :meth:`stop` until nothing is left, so a process orphaned by a crash (PPID 1,
  e.g. a node's warm executor whose node died) is still found by its session and killed.
  Each PID is signalled only while its start time is the one recorded (a PID reused by
  another process is never signalled).  Use the federation as a context manager.
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

from securefl.crypto.identity import IDENTITY_FILE, ROSTER_FILE, ROSTER_FILE_KEY, write_federation
from securefl.errors import ConfigError, InputError
from securefl.fl.flower.node import QUIET_ENV
from securefl.runtime.policy import LEDGER

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


def _stat(pid: int) -> tuple[int, int, int, int] | None:
    """``(ppid, process group, session, start time)`` of ``pid`` from /proc (None if gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])


def _processes() -> dict[int, tuple[int, int, int, int]]:
    """Every live process: pid -> :func:`_stat`."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                table[int(entry.name)] = stat
    return table


def _children(pid: int) -> set[int]:
    """All live descendants of ``pid`` (from /proc)."""
    parent_of = {p: stat[0] for p, stat in _processes().items()}
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
    return _stat(pid) is not None


@dataclass
class LocalFederation:
    """A SuperLink and ``nodes`` SuperNodes on 127.0.0.1 (see module docstring)."""

    nodes: int = 3
    mode: str = "fast"
    poll: float = 0.1
    node_config: dict[str, Any] = field(default_factory=dict)
    keys: Path | None = None
    grace: float = 10.0
    workdir: Path | None = None
    superlink_port: int = 0
    submit_in_process: bool = False
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    _own_workdir: bool = False
    _sessions: set[int] = field(default_factory=set)
    _known: dict[int, int] = field(default_factory=dict)

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
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                   start_new_session=True, cwd=self.workdir)
        log.close()
        self.processes[name] = process
        self._sessions.add(process.pid)  # its own session: the session id is its PID
        stat = _stat(process.pid)
        if stat is not None:
            self._known[process.pid] = stat[3]

    def track(self) -> set[int]:
        """Record every live process of the federation (module docstring); returns them."""
        table = _processes()
        roots = {pid for pid in self._known if pid in table and table[pid][3] == self._known[pid]}
        members = {pid for pid, (_, group, session, _) in table.items()
                   if session in self._sessions or group in self._sessions}
        frontier = roots | members
        while frontier:
            found = {pid for pid, stat in table.items() if stat[0] in frontier} - members - roots
            members |= found
            frontier = found
        members |= roots
        for pid in members:
            self._known.setdefault(pid, table[pid][3])
            self._sessions.add(table[pid][2])
        return {pid for pid in members if table[pid][3] == self._known[pid]}

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
        keys = self._keys()
        for i in range(self.nodes):
            config = {"partition-id": i, "num-partitions": self.nodes,
                      IDENTITY_FILE: str(keys / f"client-{i}.key"),
                      ROSTER_FILE_KEY: str(keys / ROSTER_FILE),
                      LEDGER: str(self.workdir / f"ledger-{i}.json"), **self.node_config}
            node_args = ["--insecure", "--superlink", self.address, "--port", str(free_port()),
                         "--node-config", " ".join(f"{k}={_toml_value(v)}" for k, v in config.items())]
            if self.mode == "stock":
                command = [str(bin_dir / "flower-supernode"), *node_args]
            else:
                command = [sys.executable, "-m", "securefl.fl.flower.node", "--poll", str(self.poll),
                           *(["--cold"] if self.mode == "cold" else []), *node_args]
            self._spawn(f"node{i}", command)

    def _keys(self) -> Path:
        """The identities' folder: ``keys``, or a fresh federation of ``nodes`` clients."""
        if self.keys is not None:
            keys = Path(self.keys)
            if not (keys / ROSTER_FILE).is_file():
                raise InputError("keys", str(keys), f"holds no {ROSTER_FILE} (create it with `securefl keys new`)")
            return keys
        assert self.workdir is not None
        return write_federation(self.workdir / "keys", f"local-{self.superlink_port}", self.nodes)

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
        self.track()
        process = self.processes[f"node{index}"]
        table = _processes()
        pids = [pid for pid, stat in table.items() if stat[2] == process.pid]
        pids = sorted(set(pids) | {process.pid} | _children(process.pid))
        self._signal(pids, signal.SIGKILL)
        process.wait(timeout=self.grace)
        return pids

    def _signal(self, pids: set[int] | list[int], signum: int) -> None:
        """Send ``signum`` to each PID still running the process recorded under it."""
        for pid in pids:
            stat = _stat(pid)
            if stat is None or self._known.get(pid, stat[3]) != stat[3]:
                continue
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def stop(self) -> list[int]:
        """Stop every process of the federation (module docstring); returns their PIDs."""
        stopped: set[int] = set()
        for signum, wait in ((signal.SIGTERM, self.grace), (signal.SIGKILL, self.grace)):
            deadline = time.monotonic() + wait
            while True:
                running = self.track()
                stopped |= running
                if not running:
                    break
                self._signal(running, signum)
                for process in self.processes.values():
                    process.poll()
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.1)
            if not self.track():
                break
        for process in self.processes.values():
            try:
                process.wait(timeout=self.grace)
            except subprocess.TimeoutExpired:
                pass
        if self._own_workdir and self.workdir is not None and os.environ.get("SECUREFL_KEEP_FLOWER") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)
        return sorted(stopped)

    # ------------------------------------------------------------------ runs
    def submit(self, app_dir: Path) -> None:
        """``flwr run app_dir securefl`` (raises ConfigError with Flower's output on failure),
        in this process where :attr:`submit_in_process` (module docstring)."""
        if self.submit_in_process:
            stdout, stderr, failure = _flwr_run_in_process(app_dir, self.env())
        else:
            flwr = Path(sys.executable).parent / "flwr"
            done = subprocess.run([str(flwr), "run", str(app_dir), CONNECTION], env=self.env(),
                                  capture_output=True, text=True, timeout=120, cwd=self.workdir)
            stdout, stderr, failure = done.stdout, done.stderr, done.returncode != 0
        if failure or "Successfully started run" not in stdout:
            raise ConfigError(f"flwr run failed: {stdout[-2000:]} {stderr[-2000:]}")

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
        self.track()
        return out

    def run(self, run_config: dict[str, Any], *, name: str, timeout: float = 600.0,
            **options: Any) -> dict[str, Any]:
        """:meth:`launch` and wait; returns ``result.json`` (ConfigError on error/timeout)."""
        return wait_result(self.launch(run_config, name=name, **options), timeout,
                           processes=self.processes, track=self.track)


def _flwr_run_in_process(app_dir: Path, env: dict[str, str]) -> tuple[str, str, bool]:
    """``flwr run app_dir securefl`` as flwr's own command function in this process, with the
    environment variables of ``env`` that differ from this process's set while it runs
    (``FLWR_HOME``, :data:`~securefl.fl.flower.node.QUIET_ENV`) and restored after; returns
    ``(stdout, stderr, failed)``.  The DeprecationWarnings of flwr's dependencies (the FAB
    builder's pathspec) stay inside the call, as they stay in a ``flwr`` process.  Tied to
    the pinned flwr like :mod:`securefl.fl.flower.tuning`."""
    import contextlib
    import io
    import warnings

    import click
    from flwr.cli.run.run import run as flwr_run

    from securefl.fl.flower.tuning import check_flwr_version

    check_flwr_version()
    changed = {key: value for key, value in env.items() if os.environ.get(key) != value}
    saved = {key: os.environ.get(key) for key in changed}
    stdout, stderr = io.StringIO(), io.StringIO()
    failed = False
    os.environ.update(changed)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            flwr_run(app=str(app_dir), superlink=CONNECTION)
    except (click.ClickException, click.exceptions.Exit) as exc:
        failed = True
        stderr.write(f"{type(exc).__name__}: {exc}")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return stdout.getvalue(), stderr.getvalue(), failed


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


def wait_result(out: Path, timeout: float, *, processes: dict[str, subprocess.Popen] | None = None,
                track: Any = None) -> dict[str, Any]:
    """Wait for ``out/result.json``; ``error.json``, a dead SuperLink or the timeout: ConfigError.
    ``track``: called about once a second while waiting (:meth:`LocalFederation.track`)."""
    deadline = time.monotonic() + timeout
    tracked = 0.0
    while time.monotonic() < deadline:
        if track is not None and time.monotonic() - tracked >= 1.0:
            track()
            tracked = time.monotonic()
        if (out / "result.json").exists():
            return json.loads((out / "result.json").read_text())
        if (out / "error.json").exists():
            raise ConfigError(f"server app failed: {json.loads((out / 'error.json').read_text())['error']}")
        if processes and processes["superlink"].poll() is not None:
            raise ConfigError("the SuperLink exited during the run")
        time.sleep(0.2)
    raise ConfigError(f"no result in {out} after {timeout:g} s")
