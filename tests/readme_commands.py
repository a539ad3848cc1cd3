"""The README doc-check: every command the README and the docs pages show, checked against
the real CLI.

    python -m tests.readme_commands [README.md docs/security.md ...] [--run]

With no file named it checks every document: ``README.md`` and every page under ``docs/``
(:func:`documents`); the commands of each are run from the repository root.

**Extraction** is generic, so commands added to the README later are checked too:

- shell code blocks (```` ```bash ````, ``sh``, ``shell``, ``console`` or no language), split
  as a shell would (``shlex``; ``;``, ``&&``, ``||`` and ``|`` separate commands, ``\\``
  continues a line, ``#`` starts a comment, ``for V in a b; do ...; done`` binds ``V`` to
  its first value, ``$V`` expands, a ``<placeholder>`` is one literal word, globs expand
  where they match);
- inline code spans of the prose and tables that start with ``securefl `` (or ``bench
  NAME`` of a known benchmark), unless they are a synopsis (``[``, ``...``, ``|``, ``<``
  or an upper-case placeholder such as ``NAME``); a span that only names a command group
  (``securefl bench``) is a reference, not a command.

**Checks** (no work is done):

- ``securefl ...``: parsed by :func:`securefl.cli.build_parser` (so a removed flag, a
  bad number or choice fails), then :func:`securefl.cli.validate_arguments`, the
  pre-work validation (a benchmark's ``validate`` hook; for ``run`` the configuration
  file, flags, methods, datasets and hyper-parameters).  Folders the command would
  create or read (``--out``, ``--resume``, ``--data-dir``) are not looked at: the README
  shows them as placeholders.
- ``python[3] SCRIPT.py ...``: the script exists, parses its arguments with argparse,
  and its parser accepts them (it runs until ``parse_args``, which is intercepted).
- ``python -m pytest ...``: every path argument exists.
- anything else (``pip``, ``python3 -m venv``, ``.``) is not checked.

**Runs for real** (:func:`run_cheap`): ``--help`` and ``--version`` invocations, and every
``securefl bench`` command whose benchmark declares ``SMOKE`` caps, with its sizes capped
(``bench ot --m 4194304`` runs with ``--m 65536``) and ``--json`` redirected to a
temporary file.  ``securefl run`` commands are validated only (minutes to hours each).

Markdown tables are checked too (:func:`table_problems`): every row of a table has the
header's number of cells, and no stray line interrupts one.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import os
import re
import runpy
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console", "zsh"}
SEPARATORS = {";", "&&", "||", "|", "&"}


@dataclass
class Command:
    """One simple command of the README: where it is, and its words after expansion."""

    line: int
    words: list[str]
    text: str
    notes: list[str] = field(default_factory=list)
    source: str = "README"

    @property
    def program(self) -> str:
        return self.words[0] if self.words else ""

    def __str__(self) -> str:
        return f"{self.source} line {self.line}: {shlex.join(self.words)}"


class CheckError(Exception):
    """A README command that the code rejects (the message says why)."""


# ----------------------------------------------------------------------------- extraction

def fenced_blocks(text: str) -> Iterator[tuple[int, str, str]]:
    """``(first line number, language, body)`` of every fenced code block."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = re.match(r"^\s*(```+|~~~+)\s*([\w+-]*)", lines[index])
        if not match:
            index += 1
            continue
        fence, language = match.group(1), match.group(2).lower()
        start = index + 1
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            index += 1
        yield start + 1, language, "\n".join(lines[start:index])
        index += 1


def _without_fences(text: str) -> str:
    """``text`` with fenced blocks blanked (line numbers kept)."""
    lines = text.splitlines()
    inside = None
    for number, line in enumerate(lines):
        match = re.match(r"^\s*(```+|~~~+)", line)
        if inside is None and match:
            inside = match.group(1)
            lines[number] = ""
        elif inside is not None:
            if line.strip().startswith(inside):
                inside = None
            lines[number] = ""
    return "\n".join(lines)


def _shell_words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def _expand(word: str, bindings: dict[str, str]) -> list[str]:
    """A word after placeholder, variable and glob expansion (a glob without match stays)."""
    word = re.sub(r"<[^<>\s]+>", "placeholder", word)
    word = re.sub(r"\$\{(\w+)\}|\$(\w+)",
                  lambda m: bindings.get(m.group(1) or m.group(2), m.group(0)), word)
    if any(c in word for c in "*?[") and not word.startswith("-"):
        matches = sorted(glob.glob(word))
        if matches:
            return matches
    return [word]


def shell_commands(body: str, first_line: int) -> Iterator[Command]:
    """The simple commands of a shell code block."""
    bindings: dict[str, str] = {}
    logical: list[tuple[int, str]] = []
    pending, pending_line = "", 0
    for offset, raw in enumerate(body.splitlines()):
        if not pending:
            pending_line = first_line + offset
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        logical.append((pending_line, pending + raw))
        pending = ""
    if pending:
        logical.append((pending_line, pending))
    for number, line in logical:
        line = re.sub(r"^\s*\$\s+", "", line)  # a console prompt
        current: list[str] = []
        for word in _shell_words(line) + [";"]:
            if word in SEPARATORS:
                if current:
                    command = _simple_command(current, bindings, number, line)
                    if command is not None:
                        yield command
                current = []
            else:
                current.append(word)


def _simple_command(words: list[str], bindings: dict[str, str], number: int,
                    line: str) -> Command | None:
    if words[0] == "for" and len(words) >= 4 and words[2] == "in":
        bindings[words[1]] = words[3]
        return None
    while words and (words[0] in ("do", "then", "time", "done", "fi")
                     or re.match(r"^\w+=", words[0])):
        words = words[1:]
    if not words:
        return None
    expanded = [part for word in words for part in _expand(word, bindings)]
    return Command(line=number, words=expanded, text=line.strip())


SYNOPSIS = re.compile(r"\[|\.\.\.|\||<|(^|\s)[A-Z][A-Z_]*(\s|$)")


def inline_commands(text: str, benchmarks: set[str]) -> Iterator[Command]:
    """``securefl ...`` (or ``bench NAME ...``) inline code spans that are not a synopsis."""
    prose = _without_fences(text)
    for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", prose):
        span = " ".join(match.group(1).split())
        words = span.split(" ")
        if words[0] == "bench" and len(words) > 1 and words[1] in benchmarks:
            span = "securefl " + span
        if not span.startswith("securefl ") and span != "securefl":
            continue
        if SYNOPSIS.search(span.replace("securefl ", "", 1)):
            continue
        line = prose.count("\n", 0, match.start()) + 1
        yield Command(line=line, words=shlex.split(span), text=match.group(0), notes=["inline"])


def readme_commands(text: str) -> list[Command]:
    """Every command of ``text`` (a README), code blocks first, then inline spans."""
    from securefl.bench import BENCHMARKS

    commands: list[Command] = []
    for first_line, language, body in fenced_blocks(text):
        if language in SHELL_LANGUAGES:
            commands += shell_commands(body, first_line)
    commands += inline_commands(text, set(BENCHMARKS))
    return commands


# ----------------------------------------------------------------------------- checks

@contextlib.contextmanager
def _in_folder(folder: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def is_securefl(command: Command) -> bool:
    return command.program == "securefl"


def is_script(command: Command) -> bool:
    return (command.program in ("python", "python3") and len(command.words) > 1
            and command.words[1].endswith(".py"))


def is_pytest(command: Command) -> bool:
    return command.program in ("python", "python3", "pytest") and (
        command.program == "pytest" or command.words[1:3] == ["-m", "pytest"]
    )


def parse_securefl(argv: list[str]) -> argparse.Namespace | None:
    """Parse ``securefl ARGV`` with the real parser; None for ``--help`` / ``--version``."""
    from securefl.cli import build_parser

    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            return build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code in (0, None):
            return None
        raise CheckError(errors.getvalue().strip() or f"exit status {exc.code}") from None


def check_securefl(command: Command) -> str:
    """Parse and validate a ``securefl`` command; returns what was checked."""
    from securefl.cli import validate_arguments
    from securefl.errors import SecureFLError

    try:
        args = parse_securefl(command.words[1:])
    except CheckError as exc:
        if "inline" in command.notes and _names_a_command_group(command, str(exc)):
            return "names a command group"
        raise
    if args is None:
        return "help/version"
    try:
        validate_arguments(args)
    except SecureFLError as exc:
        raise CheckError(f"securefl: {type(exc).__name__}: {exc}") from None
    return "parsed and validated"


def _names_a_command_group(command: Command, problem: str) -> bool:
    """Prose such as "speed goals live in `securefl bench`": subcommand words only, and the
    parser asks for the next subcommand."""
    return (all(not word.startswith("-") for word in command.words)
            and "the following arguments are required" in problem)


class _Parsed(Exception):
    pass


def check_script(command: Command) -> str:
    """The script exists and its argparse parser accepts the README's arguments."""
    script = Path(command.words[1])
    if not script.is_file():
        raise CheckError(f"no such script: {script}")
    if "parse_args" not in script.read_text():
        raise CheckError(f"{script} does not parse its arguments with argparse; "
                         "cannot check them without running it")
    original = argparse.ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        raise _Parsed(original(self, args, namespace))

    errors = io.StringIO()
    argv = sys.argv
    argparse.ArgumentParser.parse_args = parse_only  # type: ignore[method-assign]
    sys.argv = [str(script), *command.words[2:]]
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(str(script), run_name="__main__")
    except _Parsed:
        return "arguments parsed"
    except SystemExit as exc:
        if exc.code in (0, None):
            return "help"
        raise CheckError(errors.getvalue().strip() or f"exit status {exc.code}") from None
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        sys.argv = argv
    raise CheckError(f"{script} ran to the end without parsing its arguments")


def check_pytest(command: Command) -> str:
    """Every path named by a ``python -m pytest`` command exists."""
    for word in command.words[1:]:
        if not word.startswith("-") and ("/" in word or word.endswith(".py")):
            if not Path(word.split("::")[0]).exists():
                raise CheckError(f"no such test path: {word}")
    return "paths exist"


def check_command(command: Command) -> str | None:
    """Check one command (CheckError if the code rejects it); None if not ours to check."""
    if is_securefl(command):
        return check_securefl(command)
    if is_pytest(command):
        return check_pytest(command)
    if is_script(command):
        return check_script(command)
    return None


def documents() -> list[Path]:
    """Every document whose commands, tables and names are checked: the README and every
    Markdown page of the docs site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def source_name(path: Path, root: Path) -> str:
    """``path`` as the failure messages name it: relative to ``root`` where it lies inside."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def check_readme(
    path: Path = README, root: Path | None = None,
) -> tuple[list[tuple[Command, str]], list[tuple[Command, str]]]:
    """``(checked, failures)`` for every command of the document at ``path``, run from
    ``root`` (default: the document's folder), the repository root where its relative paths
    point."""
    root = path.parent if root is None else root
    commands = readme_commands(path.read_text())
    for command in commands:
        command.source = source_name(path, root)
    checked, failures = [], []
    with _in_folder(root):
        for command in commands:
            try:
                outcome = check_command(command)
            except CheckError as exc:
                failures.append((command, str(exc)))
                continue
            if outcome is not None:
                checked.append((command, outcome))
    return checked, failures


# ----------------------------------------------------------------------------- real runs

def is_cheap(command: Command) -> bool:
    """``--help`` / ``--version``, or a benchmark that declares SMOKE caps."""
    if not is_securefl(command):
        return False
    if {"--help", "-h", "--version"} & set(command.words):
        return True
    try:
        args = parse_securefl(command.words[1:])
    except CheckError:  # a reference such as `securefl bench`
        return False
    if args is None or args.command != "bench":
        return False
    return hasattr(_bench_module(args.bench), "SMOKE")


def _bench_module(name: str):  # type: ignore[no-untyped-def]
    import importlib

    from securefl.bench import BENCHMARKS

    return importlib.import_module(BENCHMARKS[name])


def run_cheap(command: Command, scratch: Path) -> str:
    """Run a cheap README command for real; returns its output (CheckError on failure)."""
    from securefl.cli import main, run_bench
    from rich.console import Console

    if {"--help", "-h", "--version"} & set(command.words):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                main(command.words[1:])
            except SystemExit as exc:
                if exc.code not in (0, None):
                    raise CheckError(f"exit status {exc.code}") from None
        if not out.getvalue().strip():
            raise CheckError("printed nothing")
        return out.getvalue()
    args = parse_securefl(command.words[1:])
    for key, cap in _bench_module(args.bench).SMOKE.items():
        setattr(args, key, min(getattr(args, key), cap))
    if args.json:
        args.json = str(scratch / Path(args.json).name)
    buffer = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):
        status = run_bench(args, Console(file=buffer, width=100))
    if status != 0:
        raise CheckError(f"exit status {status}:\n{buffer.getvalue()}")
    if args.json and not Path(args.json).is_file():
        raise CheckError(f"--json {args.json} was not written")
    return buffer.getvalue()


# ----------------------------------------------------------------------------- tables

def _cells(row: str) -> int:
    body = row.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    body = re.sub(r"`[^`]*`", "code", body)
    return len(re.split(r"(?<!\\)\|", body))


def table_problems(text: str, source: str = "README") -> list[str]:
    """Rows of Markdown tables whose cell count differs from the header, or lines that
    interrupt a table (a table runs from its header to the next blank line); ``source``
    names the document in the messages."""
    problems = []
    lines = _without_fences(text).splitlines()
    index = 0
    while index < len(lines) - 1:
        header, rule = lines[index], lines[index + 1]
        if header.lstrip().startswith("|") and re.match(r"^\s*\|?\s*:?-{3,}", rule):
            width = _cells(header)
            index += 2
            while index < len(lines) and lines[index].strip():
                row = lines[index]
                if not row.lstrip().startswith("|"):
                    problems.append(f"{source} line {index + 1}: stray line inside a table: "
                                    f"{row!r}")
                elif _cells(row) != width:
                    problems.append(f"{source} line {index + 1}: {_cells(row)} cells, the header "
                                    f"has {width}: {row[:60]!r}")
                index += 1
        index += 1
    return problems


def _tables_tool():  # type: ignore[no-untyped-def]
    """``experiments/tables.py`` as a module (it is a script, not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tables", REPO / "experiments" / "tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stale_tables(text: str, root: Path = REPO) -> tuple[int, list[str]]:
    """``(blocks, stale)``: how many ``<!-- tables.py[ goals]: FOLDER ... -->`` blocks ``text`` has,
    and the folders of those whose body differs from ``experiments/tables.py``'s output over
    the records they name (folders relative to ``root``, the folder of the document that
    holds the blocks, as ``experiments/tables.py --readme FILE`` reads them)."""
    tables = _tables_tool()
    stale = []
    matches = list(tables.BLOCK.finditer(text))
    for match in matches:
        try:
            body = tables.match_body(match, baseline="fedavg-labeled", root=root)
        except SystemExit as exc:  # folders that hold no setting, or several
            stale.append(f"{match['folders']}: {exc}")
            continue
        if body != match["body"]:
            stale.append(match["folders"])
    return len(matches), stale


def dotted_names(text: str) -> list[str]:
    """``securefl.room.name`` references of a document (documented entry points)."""
    return sorted(set(re.findall(r"\bsecurefl(?:\.[A-Za-z_]\w*)+", text)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Check the commands and tables of the README and the docs pages.")
    parser.add_argument("paths", nargs="*", type=Path,
                        help="documents to check (default: README.md and every docs page)")
    parser.add_argument("--run", action="store_true", help="also run the cheap ones for real")
    args = parser.parse_args(argv)
    paths = [path.resolve() for path in args.paths] or documents()
    failed = False
    for path in paths:
        failed |= _check_document(path, run=args.run)
    return 1 if failed else 0


def _check_document(path: Path, *, run: bool) -> bool:
    """Print the outcome of every check of one document; True if any failed."""
    checked, failures = check_readme(path, REPO)
    for command, outcome in checked:
        print(f"ok    {command}  ({outcome})")
    for command, problem in failures:
        print(f"FAIL  {command}\n      {problem}")
    problems = table_problems(path.read_text(), source_name(path, REPO))
    problems += [f"{source_name(path, REPO)}: stale results table {folders} (run python "
                 f"experiments/tables.py --readme {source_name(path, REPO)})"
                 for folders in stale_tables(path.read_text())[1]]
    for problem in problems:
        print(f"FAIL  {problem}")
    if run:
        with tempfile.TemporaryDirectory() as scratch, _in_folder(REPO):
            for command, _ in checked:
                if is_cheap(command):
                    try:
                        run_cheap(command, Path(scratch))
                        print(f"ran   {command}")
                    except CheckError as exc:
                        failures.append((command, str(exc)))
                        print(f"FAIL  {command} (run)\n      {exc}")
    return bool(failures or problems)


if __name__ == "__main__":
    sys.exit(main())
