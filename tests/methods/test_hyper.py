"""The hyper-parameter dataclasses (:mod:`securefl.methods.hyper`) are the methods'
constructor keywords, declared once, and check what they claim to."""

from __future__ import annotations

import inspect
import pydoc
from dataclasses import FrozenInstanceError, dataclass, fields

import numpy as np
import pytest

from securefl.errors import ConfigError, InputError
from securefl.methods import (
    BUILTIN_METHODS,
    RUN_PARAMETERS,
    build_hyper,
    build_method,
    hyper_class,
    method_class,
    method_names,
)
from securefl.methods.fedavg.hyper import FedAvgHyper
from securefl.methods.fedavg.server import FedAvgMethod
from securefl.methods.fedprop.hyper import FedPropHyper
from securefl.methods.hyper import Hyper, RoundHyper, SGDRoundHyper, hp, integer
from securefl.methods.registry import _REGISTRY, Registration


@pytest.mark.parametrize("name", method_names())
def test_the_signature_lists_the_dataclass_fields_with_their_defaults(name):
    """The class's constructor keywords are the run parameters and its dataclass's fields,
    keyword-only, with the dataclass's defaults; a built method holds each as an attribute."""
    cls = method_class(name)
    assert cls.hyper is hyper_class(name) and issubclass(cls.hyper, Hyper)
    parameters = inspect.signature(cls).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())
    assert tuple(parameters)[:len(RUN_PARAMETERS)] == RUN_PARAMETERS
    defaults = {spec.name: spec.default for spec in fields(cls.hyper)}
    hyper_keywords = {key: p.default for key, p in parameters.items() if key not in RUN_PARAMETERS}
    assert hyper_keywords == defaults
    method = cls()
    assert {key: getattr(method, key) for key in defaults} == defaults
    build_hyper(name, {})  # the paper defaults pass their own checks
    shown = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert all(f" {key}: " in shown for key in defaults)  # help() lists every keyword


@pytest.mark.parametrize("name", method_names())
def test_an_unknown_keyword_is_refused_naming_it(name):
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'bogus'$"):
        method_class(name)(bogus=1)


def test_a_keyword_is_stored_as_given_and_checked_at_construction():
    value = np.float32(0.25)  # a value the check admits is stored as given, not converted
    method = method_class("fedavg-labeled")(lr=value, secure="real", seed=3)
    assert method.lr is value and (method.secure, method.seed) == ("real", 3)
    with pytest.raises(InputError, match=r"^lr=-1: must be a number > 0$"):
        method_class("fedavg-labeled")(lr=-1)


def test_a_subclass_keywords_are_its_dataclasss():
    """fedprop's keywords are FedAvg's and its own; fedprop-mt's are its dataclass's, without
    FedProp's warmup_in_budget (refused, as any keyword its dataclass lacks)."""
    fedprop, fedprop_mt = method_class("fedprop"), method_class("fedprop-mt")
    assert set(inspect.signature(FedAvgMethod).parameters) < set(
        inspect.signature(fedprop).parameters)
    assert "warmup_in_budget" in inspect.signature(fedprop).parameters
    assert "warmup_in_budget" not in inspect.signature(fedprop_mt).parameters
    assert fedprop_mt().warmup_in_budget is False
    with pytest.raises(TypeError, match="'warmup_in_budget'"):
        fedprop_mt(warmup_in_budget=True)
    assert {"ema_decay", "L"} <= set(fedprop_mt().keywords())


@dataclass(frozen=True)
class _ExtraHyper(FedAvgHyper):
    extra: int = hp(1, integer(1))


class _Extra(FedAvgMethod):
    hyper = _ExtraHyper

    def __init__(self, **keywords) -> None:
        super().__init__(**keywords)
        self.doubled = 2 * self.extra


def test_a_constructor_may_add_work_but_not_parameters():
    method = _Extra(extra=3, lr=0.5)
    assert (method.extra, method.doubled, method.lr) == (3, 6, 0.5)
    assert inspect.signature(_Extra).parameters["extra"].default == 1
    with pytest.raises(TypeError, match=r"_Late.__init__ takes extra: declare each"):
        class _Late(FedAvgMethod):
            def __init__(self, *, extra: int = 1, **keywords) -> None:
                super().__init__(**keywords)


def test_a_registration_names_the_classs_own_dataclass(monkeypatch):
    monkeypatch.setitem(_REGISTRY, "mismatched", Registration(_Extra, FedAvgHyper))
    with pytest.raises(ConfigError, match=r"_ExtraHyper"):
        method_class("mismatched")
    monkeypatch.setitem(_REGISTRY, "own", Registration(_Extra))
    assert hyper_class("own") is _ExtraHyper


def test_shared_fields_take_each_methods_own_defaults():
    """A dataclass's ``defaults=`` changes an inherited default, not its checks or place."""
    hyper = hyper_class("fedanchor")
    assert issubclass(hyper, SGDRoundHyper) and issubclass(hyper_class("protofssl"), RoundHyper)
    shared = [spec.name for spec in fields(SGDRoundHyper)]
    assert [spec.name for spec in fields(hyper)][:len(shared)] == shared
    assert (hyper().lr, SGDRoundHyper().lr, hyper_class("protofssl")().max_shift) == (0.03, 0.1, 0)
    with pytest.raises(InputError, match=r"^lr=0: must be a number > 0$"):
        hyper(lr=0)
    with pytest.raises(TypeError, match="'bogus'"):
        @dataclass(frozen=True)
        class _Bad(SGDRoundHyper, defaults={"bogus": 1}):
            pass


def test_a_built_dataclass_is_frozen_and_passes_values_as_given():
    hyper = build_hyper("fedprop", {"alpha": 0.5, "L": 256})
    assert isinstance(hyper, FedPropHyper) and (hyper.alpha, hyper.L) == (0.5, 256)
    with pytest.raises(FrozenInstanceError):
        hyper.alpha = 2.0  # type: ignore[misc]
    method = build_method("fedprop", alpha=0.5, L=256)
    assert (method.alpha, method.L, method.k) == (0.5, 256, 10)


def test_errors_name_the_method_and_key_and_value():
    with pytest.raises(InputError) as caught:
        build_method("fedprop", alpha=2)
    assert str(caught.value) == "hyper.fedprop.alpha=2: must be a number in (0, 1)"
    with pytest.raises(InputError, match=r"^hyper.fedprop.bogus=1: unknown hyper-parameter"):
        build_hyper("fedprop", {"bogus": 1})
    with pytest.raises(InputError, match="noise_multiplier"):
        build_hyper("protofssl", {"noise_multiplier": 1.0, "clip": 1.0, "noise_std": 0.1})


def test_bools_are_not_integers_and_infinities_are_not_numbers():
    with pytest.raises(InputError, match="clients_per_round"):
        build_hyper("fedavg-labeled", {"clients_per_round": True})
    with pytest.raises(InputError, match="weight_decay"):
        build_hyper("fedavg-labeled", {"weight_decay": float("inf")})


def test_a_field_check_runs_on_every_build():
    @dataclass(frozen=True)
    class Small(Hyper):
        count: int = hp(1, integer(1, 10))

    assert Small(count=9).count == 9
    for bad in (0, 10, 2.0):
        with pytest.raises(InputError, match=r"^count=.*must be an integer in \[1, 10\)"):
            Small(count=bad)


@pytest.mark.parametrize("name", method_names())
def test_setup_checks_the_hyper_parameters_as_they_are_now(name, tiny_digits):
    """A method changed after it was built is refused by ``setup`` with its dataclass's error
    (Method.check_hyper), before any data is touched: the methods keep no checks of their own."""
    method = build_method(name)
    checked = next(spec.name for spec in fields(hyper_class(name)) if spec.metadata.get("checks"))
    setattr(method, checked, object())
    with pytest.raises(InputError, match=f"^{checked}=<object"):
        method.setup(tiny_digits)


@pytest.mark.parametrize("name", BUILTIN_METHODS)
def test_a_builtin_method_is_one_package_with_its_halves_and_its_dataclass(name):
    """docs/write-a-method.md's layout: securefl/methods/<package>/ holds the server half
    (server.py), the client half (client.py) and the dataclass (hyper.py)."""
    registration = _REGISTRY[name]
    package = registration.method.rpartition(".server:")[0]
    assert package.startswith("securefl.methods.") and package.count(".") == 2
    assert registration.hyper.startswith(f"{package}.hyper:")
    assert method_class(name).client_half.__module__ == f"{package}.client"
    assert hyper_class(name).__module__ == f"{package}.hyper"
