"""``securefl bench ...``: micro- and protocol benchmarks, each writing JSON.

Each benchmark is a module here exposing

- ``add_arguments(parser: argparse.ArgumentParser) -> None``: its flags (``type=int`` /
  ``float`` / ``choices=`` for what argparse can check; help texts without the default,
  which ``--help`` adds);
- ``validate(args: argparse.Namespace) -> None``: every check of the arguments' values and
  of their combinations, done before any work.  A bad value raises
  :class:`securefl.errors.InputError` with the *flag* as parameter, e.g.
  ``InputError("--m", -1, "must be an integer >= 1")`` (helpers:
  :func:`securefl.bench.common.require_int`, :func:`~securefl.bench.common.require_float`),
  which the CLI prints as the one line ``securefl: InputError: --m=-1: must be an integer
  >= 1`` with exit status 2.  A module may also call it at the top of ``run`` so that
  programmatic calls are checked as well.  (Modules that do not define it yet are run
  unchecked; the CLI tolerates that for now.)
- ``run(args: argparse.Namespace, progress: Progress) -> dict`` returning the JSON record
  (raw numbers; the CLI prints them in human units chosen by field name, see
  :func:`securefl.bench.common.format_field`);
- optionally ``SMOKE: dict[str, int | float]``: caps on size flags (``{"m": 65536}``) under
  which the benchmark runs in about a second; the README check (``tests/test_readme.py``)
  runs README commands of this benchmark for real with their sizes capped so.

The CLI checks ``--json PATH`` (a file whose folder exists and is writable) before the
run, adds the machine description, prints the record as a table and writes the JSON
atomically (no partial file on any failure).  Speed is always reported as a ratio
measured in the same run (real vs plaintext, ours vs a bound), because the machines are
shared and noisy.
"""

BENCHMARKS = {
    "ot": "securefl.bench.ot",
    "hamming": "securefl.bench.hamming",
    "secagg": "securefl.bench.secagg",
    "lp": "securefl.bench.lp",
    "crossclient": "securefl.bench.crossclient",
    "flower-secagg": "securefl.bench.flower_secagg",
    "flower-rounds": "securefl.bench.flower_rounds",
    "flower-methods": "securefl.bench.flower_methods",
}
"""Benchmark name -> module implementing it."""
