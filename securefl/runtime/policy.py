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
``policy-sum-backends`` and ``policy-hamming-backends`` (comma separated),
``policy-min-cohort``, ``policy-dp-min-noise``, ``policy-dp-max-clip``, ``policy-epsilon``,
``policy-dp-max-delta``, ``policy-lwe-max-distance``, ``policy-allow-crypto-seed``,
``policy-allow-model-reveal``; absent
keys take the strict defaults of the dataclass.  Sum backends are named as the registry's
index lists them (:mod:`securefl.runtime.sum_names`: the secure ones only).
The run config may ask for *more* privacy (real mode where plaintext is allowed, more
noise, a smaller clip), never less:

* :meth:`PrivacyPolicy.check_method` -- the configured method (from the run config):
  secure mode, sum backend, Hamming backend, a public ``crypto_seed`` (refused unless
  ``allow_crypto_seed``: it makes every secret of the client derivable by whoever holds the
  run config), DP noise multiplier >= ``dp_min_noise``, clip <= ``dp_max_clip``, delta <=
  ``dp_max_delta``; a method that would share data-dependent values (ProtoFSSL's
  prototypes) *without* the Gaussian mechanism -- no noise or a fixed ``noise_std``, which
  is not DP -- is refused unless ``dp_min_noise`` is 0 (the node accepts no DP floor);
* :meth:`PrivacyPolicy.check_cohort` -- a secure sum of ``n`` members with threshold
  ``t``: n >= ``min_cohort`` and n/2 < t <= n (the majority the Bonawitz et al. analysis
  needs against inconsistent survivor lists, for the cohort *this client verified*: the
  signed keys bind its digest, :mod:`securefl.crypto.identity`).

* :meth:`PrivacyPolicy.hamming_backend` -- the secure Hamming backend this client runs.
  The strict default allows SHADE only; the LWE and ring-LWE backends
  (:mod:`securefl.crypto.lwe`, :mod:`securefl.crypto.rlwe`) are semi-honest only.  A
  malicious evaluator that sends ill-formed hints (entries ``Delta 3^t``) and answers,
  with the server, recovers the encryptor's LWE secrets and then its codes; a malicious
  encryptor that adds a large value to one column of ``C`` reads one bit of the
  evaluator's code per answer entry while the shares stay correct almost everywhere
  (issue 20, attack 4).  A defence would need zero-knowledge proofs that every ``C``
  row, hint and answer is well formed (ternary secrets, bounded noise) for
  ``n_a (L + L')`` LWE samples per party: far beyond this toolkit.  SHADE runs on links
  keyed from the roster identities (:mod:`securefl.runtime.links`), so a deviating server
  alone cannot take part in it; against a malicious
  *client* SHADE is semi-honest too (:mod:`securefl.crypto.ot`: no maliciously secure
  base OT, no KOS check), but those gaps close with standard OT techniques.  ``auto``
  resolves to SHADE wherever its cost model's choice is not allowed.  A deployment that
  trusts its clients and server to follow the protocol may allow ``lwe``/``rlwe`` with
  ``policy-hamming-backends``.

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

**LWE flooding cap.**  Each LWE session's answers are within statistical distance
``epsilon_s = E_s N_max / 2^87`` of a simulation (:func:`securefl.crypto.lwe.statistical_distance`,
at most 2^-40 per session), and distances add up over sessions (a hybrid over them: the
joint view of k sessions is within ``sum_s epsilon_s`` of the joint simulation).  A
per-session bound alone would let a server that runs many large sessions drive the
total towards 1.  The ledger therefore records every LWE session the client answers
(:meth:`PrivacyLedger.serve_lwe`, before the answers are computed) and refuses one
that would take the running total past ``lwe_max_distance``, by default 2^-30: a
thousand sessions at the 2^-40 per-session maximum, or, for sessions of FedProp's
MNIST round (2^-45.1 each), about 35,000 rounds -- never binding for an honest run,
while a server cannot push the statistical part of the argument beyond 2^-30 (the
40-bit statistical security of one session, less 10 bits for 2^10 worst-case sessions).
A second answer for the same session is refused too (the hop's state runs once).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from securefl.errors import ConfigError, InputError, ProtocolError
from securefl.runtime.sum_names import names as sum_backend_names

POLICY = "policy"
"""In-process node config entry: a :class:`PrivacyPolicy` object."""
LEDGER = "privacy-ledger"
"""Node config entry: a :class:`PrivacyLedger` (in process) or the path of its JSON file."""
MODES = ("real", "plaintext")
HAMMING_BACKENDS = ("shade", "lwe", "rlwe")
"""Secure Hamming backends a policy can allow (``auto`` is resolved, never allowed as such)."""
LWE_MAX_DISTANCE = 2.0**-30
"""Default cap on the summed statistical distance of the LWE sessions a client answers."""


@dataclass(frozen=True)
class PrivacyPolicy:
    """What this client accepts (module docstring).  Defaults: a deployment's strict ones."""

    secure: str = "real"
    sum_backends: tuple[str, ...] = ("secagg",)
    hamming_backends: tuple[str, ...] = ("shade",)
    min_cohort: int = 2
    dp_min_noise: float = 1.0
    dp_max_clip: float | None = None
    dp_max_delta: float = 1e-5
    epsilon: float | None = 10.0
    lwe_max_distance: float | None = LWE_MAX_DISTANCE
    allow_crypto_seed: bool = False
    allow_model_reveal: bool = False
    """Whether a real-mode client may send a model of its own in the clear when asked
    (FedMatch's helper refresh, :mod:`securefl.methods.fedmatch.server`); strict default: never."""

    def __post_init__(self) -> None:
        if self.secure not in MODES:
            raise InputError("policy-secure", self.secure, f"must be one of {MODES}")
        backends = tuple(self.sum_backends)
        if not backends or any(b not in sum_backend_names(secure=True) for b in backends):
            raise InputError("policy-sum-backends", self.sum_backends,
                             f"must be some of {sum_backend_names(secure=True)}")
        object.__setattr__(self, "sum_backends", backends)
        hamming = tuple(self.hamming_backends)
        if not hamming or any(b not in HAMMING_BACKENDS for b in hamming):
            raise InputError("policy-hamming-backends", self.hamming_backends,
                             f"must be some of {HAMMING_BACKENDS}")
        object.__setattr__(self, "hamming_backends", hamming)
        if not isinstance(self.min_cohort, int) or isinstance(self.min_cohort, bool) or self.min_cohort < 1:
            raise InputError("policy-min-cohort", self.min_cohort, "must be a positive integer")
        if not isinstance(self.dp_min_noise, (int, float)) or not math.isfinite(self.dp_min_noise) \
                or self.dp_min_noise < 0:
            raise InputError("policy-dp-min-noise", self.dp_min_noise,
                             "must be a non-negative number (0: no DP floor)")
        if not isinstance(self.dp_max_delta, (int, float)) or not math.isfinite(self.dp_max_delta) \
                or self.dp_max_delta <= 0:
            raise InputError("policy-dp-max-delta", self.dp_max_delta, "must be a positive number")
        for name, value in (("policy-dp-max-clip", self.dp_max_clip), ("policy-epsilon", self.epsilon),
                            ("policy-lwe-max-distance", self.lwe_max_distance)):
            if value is not None and (not isinstance(value, (int, float)) or not value > 0):
                raise InputError(name, value, "must be a positive number (or absent)")

    @classmethod
    def simulator(cls) -> "PrivacyPolicy":
        """The policy of an in-process node that names none: any mode and backend, any
        cohort a majority threshold allows, no DP floor or cap beyond the one-release-per-
        round rule (the simulator runs every party; deployments use the strict defaults);
        the LWE flooding cap stays."""
        return cls(secure="plaintext", sum_backends=sum_backend_names(secure=True),
                   hamming_backends=HAMMING_BACKENDS, min_cohort=1, dp_min_noise=0.0,
                   dp_max_delta=1.0, epsilon=None, allow_crypto_seed=True,
                   allow_model_reveal=True)

    @classmethod
    def for_method(cls, method: Any) -> "PrivacyPolicy":
        """The in-process simulator's policy: exactly what ``method`` is configured with
        (mode, sum and Hamming backend -- every one for ``auto`` or for a name the method
        itself refuses --, DP parameters, no DP floor for a method configured without the
        Gaussian mechanism; any cohort a majority threshold allows; the simulator holds
        the crypto seed anyway; no epsilon cap, the one-release-per-round rule and the LWE
        flooding cap still hold)."""
        noise = getattr(method, "noise_multiplier", None)
        hamming = getattr(method, "hamming_backend", "auto")
        return cls(secure=method.secure, sum_backends=(method.sum_backend,),
                   hamming_backends=(hamming,) if hamming in HAMMING_BACKENDS else HAMMING_BACKENDS,
                   min_cohort=1, dp_min_noise=float(noise) if noise is not None else 0.0,
                   dp_max_clip=getattr(method, "clip", None),
                   dp_max_delta=float(getattr(method, "dp_delta", 1e-5)), epsilon=None,
                   allow_crypto_seed=True, allow_model_reveal=True)

    @classmethod
    def from_node_config(cls, config: Mapping[str, Any]) -> "PrivacyPolicy":
        """A deployment's policy from its ``policy-*`` node config keys."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = "policy-" + f.name.replace("_", "-")
            if key not in config:
                continue
            value = config[key]
            if f.name in ("sum_backends", "hamming_backends"):
                value = tuple(part.strip() for part in str(value).split(",") if part.strip())
            elif f.name in ("allow_crypto_seed", "allow_model_reveal"):
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
        hamming = getattr(method, "hamming_backend", "auto")
        if method.secure == "real" and hamming != "auto" and hamming not in self.hamming_backends:
            raise ProtocolError(f"run config asks for hamming_backend={hamming!r}; this node allows "
                                f"{self.hamming_backends} (LWE and ring-LWE are semi-honest only)")
        if getattr(method, "crypto_seed", None) is not None and not self.allow_crypto_seed:
            raise ProtocolError("run config carries a crypto_seed: it would make this client's "
                                "secrets (keys, masks, DP noise) public; this node's policy refuses it")
        if not hasattr(method, "noise_multiplier"):
            return  # the method shares nothing that a Gaussian release would cover
        noise = method.noise_multiplier
        if noise is not None:
            self.check_release(noise, getattr(method, "clip", None), getattr(method, "dp_delta", 0.0))
        elif self.dp_min_noise > 0:
            raise ProtocolError(
                f"run config shares {method.name}'s prototypes without the Gaussian mechanism "
                f"(noise_multiplier=None, noise_std={getattr(method, 'noise_std', 0.0)}: not DP); this "
                f"node requires a noise multiplier >= {self.dp_min_noise}")

    def hamming_backend(self, configured: str, sizes: Sequence[int], length: int) -> str:
        """The secure Hamming backend this client runs for a session of parties with
        ``sizes`` points and code length ``length``: ``configured`` if this policy allows it
        (else ProtocolError); ``auto`` resolves by :func:`securefl.crypto.hamming.choose_backend`
        and falls back to SHADE where that choice is not allowed (module docstring)."""
        if configured != "auto":
            if configured not in self.hamming_backends:
                raise ProtocolError(f"hamming_backend={configured!r} is not allowed by this node's "
                                    f"policy {self.hamming_backends}")
            return configured
        from securefl.crypto.hamming import choose_backend

        chosen = choose_backend([int(s) for s in sizes], int(length))
        if chosen in self.hamming_backends:
            return chosen
        return "shade" if "shade" in self.hamming_backends else self.hamming_backends[0]

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
        raise InputError(POLICY, held, "must be a securefl.runtime.policy.PrivacyPolicy")
    return held


@dataclass
class PrivacyLedger:
    """A client's own record of its Gaussian releases (module docstring).  ``path``: the
    JSON file it lives in (a deployment), or ``None`` (in memory, in process)."""

    path: Path | None = None
    releases: list[dict[str, Any]] = field(default_factory=list)
    lwe: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | os.PathLike) -> "PrivacyLedger":
        path = Path(path)
        if not path.exists():
            return cls(path)
        try:
            body = json.loads(path.read_text())
            releases, lwe = list(body["releases"]), list(body.get("lwe", []))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{LEDGER}={str(path)!r}: unreadable ledger ({exc})") from None
        return cls(path, releases, lwe)

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
        self._save()

    @property
    def lwe_distance(self) -> float:
        """The summed statistical distance of every LWE session this client answered."""
        return math.fsum(float(s["distance"]) for s in self.lwe)

    def serve_lwe(self, *, session: bytes, distance: float, cap: float | None) -> None:
        """Record that this client answers LWE session ``session`` whose answers are within
        statistical distance ``distance`` of a simulation, or refuse (ProtocolError): a
        second answer for the same session, or one taking the total past ``cap``
        (module docstring).  Call it *before* the answers are computed."""
        key = bytes(session).hex()
        if not 0 <= distance <= 1:
            raise InputError("distance", distance, "must be a statistical distance in [0, 1]")
        if any(s["session"] == key for s in self.lwe):
            raise ProtocolError("a second LWE evaluation of one session (each session is answered "
                                "once: a repeat reuses its masks)")
        total = self.lwe_distance + float(distance)
        if cap is not None and total > cap:
            raise ProtocolError(f"an LWE session would take this client's summed flooding distance "
                                f"to 2^{math.log2(total):.1f} > its cap 2^{math.log2(cap):.1f} "
                                f"({len(self.lwe)} sessions answered)")
        self.lwe.append({"session": key, "distance": float(distance)})
        self._save()

    def _save(self) -> None:
        """Write the ledger to its file (mode 0600, atomically); in memory: nothing."""
        if self.path is None:
            return
        temporary = self.path.with_suffix(".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"releases": self.releases, "lwe": self.lwe}, handle)
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
