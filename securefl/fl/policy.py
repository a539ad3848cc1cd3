"""The privacy a client insists on: its own policy, and its own ledger of DP releases.

**Why.**  The server writes every request and, on Flower, the operator writes the run
config every node receives.  A client that took its privacy settings from either did
whatever the server asked: a request with ``members=1, threshold=1`` had it submit its
model update as a "sum" of one; ``secure=plaintext`` in the run config had it upload in
the clear; a planted ``crypto_seed`` made its DP noise reproducible; 64 release requests
in one round had it publish 64 independently noised copies of its per-class sums (the
server's accountant saw one).  Here the client decides.

**Policy** (:class:`PrivacyPolicy`), from the node's own configuration
(:func:`node_policy`): in process the simulator's object (``node_config["policy"]``,
:meth:`PrivacyPolicy.for_method`: exactly what the run configured, so the simulator's
results are unchanged); on a deployment the node config keys ``policy-secure``,
``policy-sum-backends`` (comma separated), ``policy-min-cohort``, ``policy-dp-min-noise``,
``policy-dp-max-clip``, ``policy-epsilon``, ``policy-dp-max-delta``,
``policy-allow-crypto-seed``; absent keys take the strict defaults of the dataclass.
The run config may ask for *more* privacy (real mode where plaintext is allowed, more
noise, a smaller clip), never less:

* :meth:`PrivacyPolicy.check_method` -- the configured method (from the run config):
  secure mode, sum backend, a public ``crypto_seed`` (refused unless
  ``allow_crypto_seed``: it makes every secret of the client derivable by whoever holds the
  run config), DP noise multiplier >= ``dp_min_noise``, clip <= ``dp_max_clip``, delta <=
  ``dp_max_delta``;
* :meth:`PrivacyPolicy.check_cohort` -- a secure sum of ``n`` members with threshold
  ``t``: n >= ``min_cohort`` and n/2 < t <= n (the majority the Bonawitz et al. analysis
  needs against inconsistent survivor lists, for the cohort *this client verified*: the
  signed keys bind its digest, :mod:`securefl.crypto.identity`).

A request below the policy raises :class:`~securefl.errors.ProtocolError` before the
client computes or sends anything from its data.

**Ledger** (:class:`PrivacyLedger`): the client's own count of its Gaussian releases, kept
where the server cannot reset it (in process an object of the node; on a deployment the
JSON file ``privacy-ledger`` of its node config, which outlives sessions and processes).
A release is allowed once per (session, round): a second request for the same round is
refused, and so is a release that would take the client's composed epsilon (PLD,
:func:`securefl.crypto.dp.epsilon_for`, every release counted in full) past
``epsilon``.  The server can make a round fail; it cannot obtain more releases than the
budget pays for.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from securefl.errors import ConfigError, InputError, ProtocolError
from securefl.fl.sum_backends import names as sum_backend_names

POLICY = "policy"
"""In-process node config entry: a :class:`PrivacyPolicy` object."""
LEDGER = "privacy-ledger"
"""Node config entry: a :class:`PrivacyLedger` (in process) or the path of its JSON file."""
MODES = ("real", "plaintext")


@dataclass(frozen=True)
class PrivacyPolicy:
    """What this client accepts (module docstring).  Defaults: a deployment's strict ones."""

    secure: str = "real"
    sum_backends: tuple[str, ...] = ("secagg",)
    min_cohort: int = 2
    dp_min_noise: float = 1.0
    dp_max_clip: float | None = None
    dp_max_delta: float = 1e-5
    epsilon: float | None = 10.0
    allow_crypto_seed: bool = False

    def __post_init__(self) -> None:
        if self.secure not in MODES:
            raise InputError("policy-secure", self.secure, f"must be one of {MODES}")
        backends = tuple(self.sum_backends)
        if not backends or any(b not in sum_backend_names(secure=True) for b in backends):
            raise InputError("policy-sum-backends", self.sum_backends,
                             f"must be some of {sum_backend_names(secure=True)}")
        object.__setattr__(self, "sum_backends", backends)
        if not isinstance(self.min_cohort, int) or isinstance(self.min_cohort, bool) or self.min_cohort < 1:
            raise InputError("policy-min-cohort", self.min_cohort, "must be a positive integer")
        for name, value in (("policy-dp-min-noise", self.dp_min_noise), ("policy-dp-max-delta", self.dp_max_delta)):
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InputError(name, value, "must be a positive number")
        for name, value in (("policy-dp-max-clip", self.dp_max_clip), ("policy-epsilon", self.epsilon)):
            if value is not None and (not isinstance(value, (int, float)) or not value > 0):
                raise InputError(name, value, "must be a positive number (or absent)")

    @classmethod
    def simulator(cls) -> "PrivacyPolicy":
        """The policy of an in-process node that names none: any mode and backend, any
        cohort a majority threshold allows, no DP floor or cap beyond the one-release-per-
        round rule (the simulator runs every party; deployments use the strict defaults)."""
        return cls(secure="plaintext", sum_backends=sum_backend_names(secure=True), min_cohort=1,
                   dp_min_noise=1e-9,
                   dp_max_delta=1.0, epsilon=None, allow_crypto_seed=True)

    @classmethod
    def for_method(cls, method: Any) -> "PrivacyPolicy":
        """The in-process simulator's policy: exactly what ``method`` is configured with
        (mode, backend, DP parameters; any cohort a majority threshold allows; the
        simulator holds the crypto seed anyway; no epsilon cap, the one-release-per-round
        rule still holds)."""
        noise = getattr(method, "noise_multiplier", None)
        return cls(secure=method.secure, sum_backends=(method.sum_backend,), min_cohort=1,
                   dp_min_noise=float(noise) if noise is not None else 1.0,
                   dp_max_clip=getattr(method, "clip", None),
                   dp_max_delta=float(getattr(method, "dp_delta", 1e-5)), epsilon=None,
                   allow_crypto_seed=True)

    @classmethod
    def from_node_config(cls, config: Mapping[str, Any]) -> "PrivacyPolicy":
        """A deployment's policy from its ``policy-*`` node config keys."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = "policy-" + f.name.replace("_", "-")
            if key not in config:
                continue
            value = config[key]
            if f.name == "sum_backends":
                value = tuple(part.strip() for part in str(value).split(",") if part.strip())
            elif f.name == "allow_crypto_seed":
                if not isinstance(value, bool):
                    raise InputError(key, value, "must be true or false")
            elif f.name == "min_cohort":
                value = int(value) if isinstance(value, int) and not isinstance(value, bool) else value
            elif f.name != "secure":
                value = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
            values[f.name] = value
        return cls(**values)

    # --------------------------------------------------------------- checks
    def check_method(self, method: Any) -> None:
        """Refuse (ProtocolError) a run config asking for less than this policy."""
        if self.secure == "real" and method.secure != "real":
            raise ProtocolError(f"run config asks for secure={method.secure!r}; this node's policy "
                                "requires 'real' (it never uploads in the clear)")
        if method.secure == "real" and method.sum_backend not in self.sum_backends:
            raise ProtocolError(f"run config asks for sum_backend={method.sum_backend!r}; this node "
                                f"allows {self.sum_backends}")
        if getattr(method, "crypto_seed", None) is not None and not self.allow_crypto_seed:
            raise ProtocolError("run config carries a crypto_seed: it would make this client's "
                                "secrets (keys, masks, DP noise) public; this node's policy refuses it")
        noise = getattr(method, "noise_multiplier", None)
        if noise is not None:
            self.check_release(noise, getattr(method, "clip", None), getattr(method, "dp_delta", 0.0))

    def check_release(self, noise_multiplier: float, clip: float | None, delta: float) -> None:
        """A Gaussian release with these parameters is within this policy, else ProtocolError."""
        if not noise_multiplier >= self.dp_min_noise:
            raise ProtocolError(f"noise_multiplier={noise_multiplier} is below this node's minimum "
                                f"{self.dp_min_noise}")
        if self.dp_max_clip is not None and (clip is None or not clip <= self.dp_max_clip):
            raise ProtocolError(f"clip={clip} exceeds this node's maximum {self.dp_max_clip}")
        if not 0 < delta <= self.dp_max_delta:
            raise ProtocolError(f"dp_delta={delta} exceeds this node's maximum {self.dp_max_delta}")

    def check_cohort(self, members: int, threshold: int) -> None:
        """A secure sum of ``members`` with ``threshold``: at least ``min_cohort`` members
        and n/2 < t <= n, else ProtocolError (nothing is sent)."""
        if members < self.min_cohort:
            raise ProtocolError(f"a secure sum of {members} members is below this node's minimum "
                                f"cohort {self.min_cohort}")
        if not members // 2 < threshold <= members:
            raise ProtocolError(f"threshold {threshold} for {members} members is not a majority "
                                f"(needs {members // 2 + 1}..{members})")


def node_policy(node_config: Mapping[str, Any]) -> PrivacyPolicy:
    """The policy of a node's own configuration (module docstring); never the server's."""
    held = node_config.get(POLICY)
    if held is None:
        return PrivacyPolicy.from_node_config(node_config)
    if not isinstance(held, PrivacyPolicy):
        raise InputError(POLICY, held, "must be a securefl.fl.policy.PrivacyPolicy")
    return held


@dataclass
class PrivacyLedger:
    """A client's own record of its Gaussian releases (module docstring).  ``path``: the
    JSON file it lives in (a deployment), or ``None`` (in memory, in process)."""

    path: Path | None = None
    releases: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | os.PathLike) -> "PrivacyLedger":
        path = Path(path)
        if not path.exists():
            return cls(path)
        try:
            releases = json.loads(path.read_text())["releases"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{LEDGER}={str(path)!r}: unreadable ledger ({exc})") from None
        return cls(path, list(releases))

    def epsilon(self, noise_multiplier: float, delta: float, extra: int = 0) -> float:
        """epsilon at ``delta`` of every recorded release plus ``extra`` more, composed
        (PLD), each at the *smallest* noise multiplier recorded (an upper bound)."""
        from securefl.crypto.dp import epsilon_for

        z = min([float(r["noise_multiplier"]) for r in self.releases] + [float(noise_multiplier)])
        return epsilon_for(z, len(self.releases) + extra, delta)

    def release(self, *, session: bytes, round_index: int, noise_multiplier: float, delta: float,
                budget: float | None) -> None:
        """Record one release of (``session``, ``round_index``) or refuse it (ProtocolError):
        a second one for the same round, or one past ``budget``.  Call it *before* the
        release leaves the client."""
        key = f"{bytes(session).hex()}/{int(round_index)}"
        if any(r["round"] == key for r in self.releases):
            raise ProtocolError(f"a second DP release for round {round_index} of this session "
                                "(one release per round; averaging repeats would remove the noise)")
        if budget is not None:
            spent = self.epsilon(noise_multiplier, delta, extra=1)
            if spent > budget:
                raise ProtocolError(f"a DP release would take this client to epsilon {spent:.3f} "
                                    f"> its budget {budget} (at delta {delta})")
        self.releases.append({"round": key, "noise_multiplier": float(noise_multiplier)})
        if self.path is not None:
            temporary = self.path.with_suffix(".tmp")
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                json.dump({"releases": self.releases}, handle)
            os.replace(temporary, self.path)


def node_ledger(node_config: Mapping[str, Any]) -> PrivacyLedger:
    """The node's ledger: the in-process object, or the file its config names.  A node
    with neither: ProtocolError (a release it cannot count is refused)."""
    held = node_config.get(LEDGER)
    if isinstance(held, PrivacyLedger):
        return held
    if isinstance(held, (str, os.PathLike)) and str(held):
        return PrivacyLedger.open(held)
    raise ProtocolError(f"node config names no '{LEDGER}': a DP release this client cannot count "
                        "is refused")
