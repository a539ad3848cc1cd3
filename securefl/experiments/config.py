"""Experiment configurations: TOML files, command-line overrides, validation.

A configuration names the methods to run, the dataset and its federated partition, the
cryptography mode, the number of rounds, the seed and the methods' hyper-parameters::

    name = "digits-default"
    methods = ["fedprop", "protofssl", "fedsemi-mt", "fedanchor", "fedavg-labeled"]
    secure = "real"            # real | plaintext | both
    aggregation = "secagg"     # real-mode secure sums: secagg (pairwise masks) | he (TenSEAL BFV)
    rounds = 10
    seed = 0
    # crypto_seed = 12345      # fixes the secrets (see below); normally left out
    threads = 1                # torch CPU threads (1 is fastest for small models on busy cores)
    device = "auto"            # auto | cpu | cuda | cuda:<index> (auto: CUDA when torch sees one)
    eval_every = 1             # evaluate every N rounds (the last round always)

    [dataset]
    name = "digits"            # digits | mnist | fashion-mnist | cifar10 | svhn | a path
    # data_dir = "/data"       # else $SECUREFL_DATA, else ./data

    [partition]                # keywords of securefl.data.partitioning
    scheme = "iid"
    num_clients = 20
    validation_fraction = 0.1  # held out for selection (the default; 0 = none)
    [partition.fedanchor]      # one method's split (FedAnchor: labels at the server)
    labels_at = "server"

    [hyper]                    # keywords for every method that takes them
    clients_per_round = 5
    [hyper.fedprop]            # keywords for one method (override [hyper])
    L = 1024

``seed`` is the simulation seed (partition, sampling, initialisation).  ``crypto_seed``
(an integer below 2^63) fixes the secrets that shape a method's outputs (FedProp's LSH
hyperplanes, ProtoFSSL's DP noise; :mod:`securefl.methods.base`); without it the runner
draws one per run (:mod:`securefl.experiments.runner` says how each mode uses it).

The digits default (what ``securefl run`` runs with no arguments) is the file
``default.toml`` next to this module: the single source of truth, shipped as package
data.  Command-line flags override the file; ``--set KEY=VALUE`` (:func:`apply_settings`)
overrides any key of it by its dotted path, e.g. ``--set hyper.fedprop.alpha=0.9``.
Everything is validated here, before any data is loaded or any file is written, and every
problem is a :class:`~securefl.errors.ConfigError` naming the key and the bad value; a
method's hyper-parameters are checked by building its dataclass
(:mod:`securefl.methods.hyper`), whose errors are InputErrors naming
``hyper.<method>.<key>``.

``device`` is where the methods' models train and predict (:mod:`securefl.fl.device`);
the configuration checks its spelling, ``securefl run`` whether this machine has it,
before any work.  ``eval_every`` = N scores the model on the validation and test sets
after rounds N, 2N, ... and always after the last round; the other rounds record no
accuracy (``None``), and selection chooses among the evaluated rounds (evaluation of a
CIFAR model costs about a fifth of a round).

**Validation split.**  ``[partition] validation_fraction`` (default
:data:`DEFAULT_VALIDATION_FRACTION` = 0.1, FedProp's 10 %) of the training data is held
out before the split (:func:`securefl.data.partition`); the runner selects each job's
round by accuracy on it.  It is one set per run, so it may not be set per method.
"""

from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from securefl.errors import ConfigError
from securefl.runtime import sum_backends

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

DEFAULT_CONFIG = Path(__file__).with_name("default.toml")
"""The digits default configuration (package data)."""

SECURE_CHOICES = ("real", "plaintext", "both")
TOP_LEVEL_KEYS = {
    "name", "description", "methods", "secure", "aggregation", "rounds", "seed", "crypto_seed",
    "threads", "device", "eval_every", "dataset", "partition", "hyper",
}
DATASET_KEYS = {"name", "data_dir"}
DEFAULT_VALIDATION_FRACTION = 0.1
"""Share of the training data held out for validation unless ``[partition]`` says otherwise."""


def method_names() -> tuple[str, ...]:
    """The registered method names (from :mod:`securefl.methods`)."""
    from securefl.methods import METHOD_NAMES

    return tuple(METHOD_NAMES)


def method_parameters(name: str) -> set[str]:
    """The hyper-parameter keywords method ``name`` takes."""
    from securefl.methods import hyper_parameters

    return set(hyper_parameters(name))


def method_hyper(name: str, hyper: dict[str, Any]) -> Any:
    """Method ``name``'s hyper-parameter dataclass built from ``hyper``, every value checked
    (:func:`securefl.methods.build_hyper`)."""
    from securefl.methods import build_hyper

    return build_hyper(name, hyper)


def dataset_names() -> tuple[str, ...]:
    """The dataset names :func:`securefl.data.load_dataset` knows."""
    from securefl.data import DATASET_NAMES

    return tuple(DATASET_NAMES)


@dataclass(frozen=True)
class ExperimentConfig:
    """A validated experiment configuration (see the module docstring for the fields)."""

    name: str
    methods: tuple[str, ...]
    dataset: str
    secure: str
    rounds: int
    seed: int
    partition: dict[str, Any]
    threads: int = 1
    method_partition: dict[str, dict[str, Any]] = field(default_factory=dict)
    hyper: dict[str, Any] = field(default_factory=dict)
    method_hyper: dict[str, dict[str, Any]] = field(default_factory=dict)
    data_dir: str | None = None
    description: str = ""
    source: str | None = None
    aggregation: str = "secagg"
    crypto_seed: int | None = None
    device: str = "auto"
    eval_every: int = 1

    @property
    def secure_modes(self) -> tuple[str, ...]:
        """The cryptography modes each method runs with, in order."""
        return ("real", "plaintext") if self.secure == "both" else (self.secure,)

    def partition_for(self, method: str) -> dict[str, Any]:
        """Keywords for ``securefl.data.partitioning``: ``[partition]`` updated by
        ``[partition.<method>]``."""
        return {**self.partition, **self.method_partition.get(method, {})}

    def hyper_for(self, method: str) -> dict[str, Any]:
        """Keywords for ``build_method(method, ...)``.

        The ``[hyper]`` keys the method takes, ``rounds`` (the run's, for methods whose
        schedules depend on the total number of rounds), then ``[hyper.<method>]``.
        """
        accepted = method_parameters(method)
        hyper = {key: value for key, value in self.hyper.items() if key in accepted}
        if "rounds" in accepted:
            hyper["rounds"] = self.rounds
        return {**hyper, **self.method_hyper.get(method, {})}

    def to_dict(self) -> dict[str, Any]:
        """The configuration as a TOML-shaped dict; :func:`config_from_dict` inverts it."""
        dataset: dict[str, Any] = {"name": self.dataset}
        if self.data_dir is not None:
            dataset["data_dir"] = self.data_dir
        crypto = {} if self.crypto_seed is None else {"crypto_seed": self.crypto_seed}
        return {
            "name": self.name,
            "description": self.description,
            "methods": list(self.methods),
            "secure": self.secure,
            "aggregation": self.aggregation,
            "rounds": self.rounds,
            "seed": self.seed,
            **crypto,
            "threads": self.threads,
            "device": self.device,
            "eval_every": self.eval_every,
            "dataset": dataset,
            "partition": {
                **self.partition, **{m: dict(p) for m, p in self.method_partition.items()}
            },
            "hyper": {**self.hyper, **{m: dict(h) for m, h in self.method_hyper.items()}},
        }


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a TOML file; unreadable or invalid files raise :class:`ConfigError`."""
    target = Path(path)
    try:
        with open(target, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"config={str(target)!r}: cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config={str(target)!r}: invalid TOML ({exc})") from None


def load_config(
    path: str | os.PathLike | None = None, **overrides: Any
) -> ExperimentConfig:
    """Read ``path`` (default: the digits default), apply ``overrides``, validate.

    ``overrides`` are the command-line flags: ``methods`` (list; ``["all"]`` means every
    method), ``dataset``, ``data_dir``, ``secure``, ``aggregation``, ``rounds``, ``seed``,
    ``threads``, ``device``, ``eval_every``, and ``settings`` (``--set`` strings
    ``KEY=VALUE``, applied first, so the flags win); ``None`` values are ignored.
    """
    source = Path(path) if path is not None else DEFAULT_CONFIG
    raw = merge_overrides(read_toml(source), **overrides)
    return config_from_dict(raw, source=str(source))


def apply_settings(raw: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """A copy of the TOML dict ``raw`` with each ``"dotted.key=value"`` of ``settings`` set.

    The key is a path of tables ending in a key (``hyper.fedprop.alpha``, ``rounds``,
    ``partition.validation_fraction``); missing tables are created.  The value is read as a
    TOML value (``0.9``, ``10``, ``true``, ``"cnn"``, ``[1, 2]``); anything that is not one
    is taken as a string (``--set hyper.fedprop.model=cnn``).  What the key and value mean
    is validated with the rest of the configuration.

    A shared key set here, ``hyper.K``, is the user's word for every method: it also
    replaces ``K`` in each method table that holds it (``[hyper.fedprop] warmup_rounds =
    10`` of the file does not silently win over ``--set hyper.warmup_rounds=1``); a
    per-method setting after it (``--set hyper.protofssl.lr=0.001``) refines it again.
    """
    merged = copy.deepcopy(raw)
    for setting in settings:
        key, sep, text = setting.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise ConfigError(f"set={setting!r}: must be KEY=VALUE with a dotted KEY")
        try:
            value = tomllib.loads(f"value = {text.strip()}")["value"]
        except tomllib.TOMLDecodeError:
            value = text.strip()
        table = merged
        for depth, part in enumerate(path[:-1]):
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise ConfigError(
                    f"set={setting!r}: {'.'.join(path[: depth + 1])} is not a table"
                )
        table[path[-1]] = value
        if len(path) == 2 and path[0] == "hyper":
            for sub in table.values():
                if isinstance(sub, dict) and path[1] in sub:
                    sub[path[1]] = value
    return merged


def merge_overrides(raw: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A copy of the TOML dict ``raw`` with the given (non-``None``) flag values applied."""
    unknown = set(overrides) - {
        "methods", "dataset", "data_dir", "secure", "aggregation", "rounds", "seed", "threads",
        "device", "eval_every", "settings",
    }
    if unknown:
        raise ConfigError(f"overrides={sorted(unknown)!r}: unknown option")
    merged = apply_settings(raw, overrides.get("settings") or [])
    for key in ("methods", "secure", "aggregation", "rounds", "seed", "threads", "device",
                "eval_every"):
        if overrides.get(key) is not None:
            merged[key] = overrides[key]
    dataset = merged.get("dataset", {})
    if isinstance(dataset, dict):
        dataset = dict(dataset)
        if overrides.get("dataset") is not None:
            dataset["name"] = overrides["dataset"]
        if overrides.get("data_dir") is not None:
            dataset["data_dir"] = overrides["data_dir"]
        merged["dataset"] = dataset
    return merged


def config_from_dict(raw: dict[str, Any], *, source: str | None = None) -> ExperimentConfig:
    """Validate a TOML-shaped dict into an :class:`ExperimentConfig`."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config={raw!r}: must be a table")
    unknown = set(raw) - TOP_LEVEL_KEYS
    if unknown:
        raise ConfigError(
            f"{sorted(unknown)[0]}: unknown config key (known: {', '.join(sorted(TOP_LEVEL_KEYS))})"
        )
    known_methods = method_names()
    methods = _methods(raw.get("methods"), known_methods)
    dataset_table = _table(raw, "dataset")
    unknown = set(dataset_table) - DATASET_KEYS
    if unknown:
        raise ConfigError(f"dataset.{sorted(unknown)[0]}: unknown key (known: name, data_dir)")
    dataset = _dataset(dataset_table.get("name", "digits"))
    data_dir = dataset_table.get("data_dir")
    if data_dir is not None and not isinstance(data_dir, str):
        raise ConfigError(f"dataset.data_dir={data_dir!r}: must be a path string")
    secure = raw.get("secure", "real")
    if secure not in SECURE_CHOICES:
        raise ConfigError(f"secure={secure!r}: must be one of {', '.join(SECURE_CHOICES)}")
    aggregation = raw.get("aggregation", "secagg")
    if aggregation not in sum_backends.names(secure=True):
        raise ConfigError(
            f"aggregation={aggregation!r}: must be one of "
            f"{', '.join(sum_backends.names(secure=True))} "
            "(the secure-sum backend of real mode)"
        )
    rounds = _int(raw.get("rounds", 10), "rounds", minimum=1)
    seed = _int(raw.get("seed", 0), "seed", minimum=0)
    crypto_seed = raw.get("crypto_seed")
    if crypto_seed is not None:
        crypto_seed = _int(crypto_seed, "crypto_seed", minimum=0)
        if crypto_seed >= 2**63:
            raise ConfigError(f"crypto_seed={crypto_seed!r}: must be below 2^63 (a TOML integer)")
    threads = _int(raw.get("threads", 1), "threads", minimum=1)
    device = _device(raw.get("device", "auto"))
    eval_every = _int(raw.get("eval_every", 1), "eval_every", minimum=1)
    partition, method_partition = _partition(_table(raw, "partition"), known_methods)
    hyper, method_hyper = _hyper(_table(raw, "hyper"), known_methods)
    name = raw.get("name", Path(source).stem if source else "experiment")
    description = raw.get("description", "")
    for key, value in (("name", name), ("description", description)):
        if not isinstance(value, str):
            raise ConfigError(f"{key}={value!r}: must be a string")
    config = ExperimentConfig(
        name=name,
        methods=methods,
        dataset=dataset,
        secure=secure,
        rounds=rounds,
        seed=seed,
        threads=threads,
        partition=partition,
        method_partition=method_partition,
        hyper=hyper,
        method_hyper=method_hyper,
        data_dir=data_dir,
        description=description,
        source=source,
        aggregation=aggregation,
        crypto_seed=crypto_seed,
        device=device,
        eval_every=eval_every,
    )
    check_hyper(config)
    return config


def check_hyper(config: ExperimentConfig) -> None:
    """Build every method's hyper-parameter dataclass (:func:`securefl.methods.build_hyper`)
    from what :meth:`ExperimentConfig.hyper_for` gives it: every value is checked here,
    and an InputError names ``hyper.<method>.<key>`` and the value."""
    for method in config.methods:
        method_hyper(method, config.hyper_for(method))


def _table(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{key}={value!r}: must be a table ([{key}])")
    return value


def _int(value: Any, key: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}={value!r}: must be an integer")
    if value < minimum:
        raise ConfigError(f"{key}={value!r}: must be >= {minimum}")
    return value


def _device(value: Any) -> str:
    from securefl.errors import InputError
    from securefl.fl.device import DEVICE_NAMES, check_device_name

    try:
        return check_device_name(value)
    except InputError:
        raise ConfigError(f"device={value!r}: must be one of {', '.join(DEVICE_NAMES)}") from None


def _methods(value: Any, known: tuple[str, ...]) -> tuple[str, ...]:
    if value is None:
        raise ConfigError("methods=None: the config names no methods")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(f"methods={value!r}: must be a non-empty list of method names")
    if "all" in value:
        return known
    seen: list[str] = []
    for name in value:
        if name not in known:
            raise ConfigError(
                f"method={name!r}: unknown method (known: all, {', '.join(known)})"
            )
        if name in seen:
            raise ConfigError(f"method={name!r}: listed twice")
        seen.append(name)
    return tuple(seen)


def _dataset(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"dataset={value!r}: must be a dataset name or a path")
    known = dataset_names()
    if value in known or Path(value).exists():
        return value
    raise ConfigError(
        f"dataset={value!r}: unknown dataset and no such path (known: {', '.join(known)})"
    )


def _partition(
    table: dict[str, Any], known: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    common = {key: value for key, value in table.items() if not isinstance(value, dict)}
    per_method: dict[str, dict[str, Any]] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            if key not in known:
                raise ConfigError(f"partition.{key}: unknown method (known: {', '.join(known)})")
            per_method[key] = dict(value)
    common.setdefault("scheme", "iid")
    common.setdefault("num_clients", 10)
    common.setdefault("validation_fraction", DEFAULT_VALIDATION_FRACTION)
    fraction = common["validation_fraction"]
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not (
        0 <= fraction < 1
    ):
        raise ConfigError(f"partition.validation_fraction={fraction!r}: must be a number in [0, 1)")
    for prefix, options in [("partition", common)] + [
        (f"partition.{name}", options) for name, options in per_method.items()
    ]:
        if "scheme" in options and not isinstance(options["scheme"], str):
            raise ConfigError(f"{prefix}.scheme={options['scheme']!r}: must be a string")
        if "num_clients" in options:
            _int(options["num_clients"], f"{prefix}.num_clients", minimum=1)
        if "seed" in options:
            raise ConfigError(f"{prefix}.seed: set the top-level seed instead (one seed per run)")
        if "validation_fraction" in options and options is not common:
            raise ConfigError(
                f"{prefix}.validation_fraction: set it in [partition] (every method of a run "
                "is selected on the same validation set)"
            )
    return common, per_method


def _hyper(
    table: dict[str, Any], known: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    common: dict[str, Any] = {}
    per_method: dict[str, dict[str, Any]] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            if key not in known:
                raise ConfigError(f"hyper.{key}: unknown method (known: {', '.join(known)})")
            if "rounds" in value:
                raise ConfigError(f"hyper.{key}.rounds: set the top-level rounds instead")
            per_method[key] = dict(value)
        elif key == "rounds":
            raise ConfigError("hyper.rounds: set the top-level rounds instead")
        else:
            common[key] = value
    # A shared key no method knows is a typo; one that only the methods left out by
    # ``--method`` take is not (``hyper_for`` passes each method just what it accepts).
    accepted = set().union(*(method_parameters(name) for name in known))
    for key in common:
        if key not in accepted:
            raise ConfigError(f"hyper.{key}={common[key]!r}: no method takes it")
    return common, per_method


def with_data_dir(config: ExperimentConfig, data_dir: str | None) -> ExperimentConfig:
    """``config`` with its data folder replaced (used when resuming on another machine)."""
    return config if data_dir is None else replace(config, data_dir=data_dir)
