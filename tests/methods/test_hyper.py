"""The hyper-parameter dataclasses (:mod:`securefl.methods.hyper`) agree with the methods'
constructors and check what they claim to."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields

import pytest

from securefl.errors import InputError
from securefl.methods import (
    BUILTIN_METHODS,
    RUN_PARAMETERS,
    build_hyper,
    build_method,
    hyper_class,
    method_class,
    method_names,
)
from securefl.methods.fedprop.hyper import FedPropHyper
from securefl.methods.hyper import (
    Hyper,
    constructor_keywords,
    derived_hyper,
    hp,
    integer,
)
from securefl.methods.registry import _REGISTRY


@pytest.mark.parametrize("name", method_names())
def test_the_dataclass_has_the_constructors_keywords_and_defaults(name):
    keywords = {key: p.default for key, p in constructor_keywords(method_class(name)).items()
                if key not in RUN_PARAMETERS}
    defaults = {spec.name: spec.default for spec in fields(hyper_class(name))}
    assert defaults == keywords
    assert issubclass(hyper_class(name), Hyper)
    build_hyper(name, {})  # the paper defaults pass their own checks


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


class _Toy:
    def __init__(self, *, secure: str = "plaintext", seed: int = 0, rate: float = 0.5,
                 steps: int = 3, shift: int | None = None, name: str = "a",
                 on: bool = True, anything: list[int] | None = None) -> None:
        pass


def test_a_derived_dataclass_checks_the_annotated_types():
    toy = derived_hyper(_Toy)
    assert {spec.name for spec in fields(toy)} == {"rate", "steps", "shift", "name", "on", "anything"}
    assert toy().keywords() == {"rate": 0.5, "steps": 3, "shift": None, "name": "a", "on": True,
                                "anything": None}
    toy(shift=2, anything=[1])
    for key, value in (("rate", "x"), ("steps", 1.5), ("shift", "2"), ("name", 3), ("on", 1)):
        with pytest.raises(InputError, match=f"^{key}="):
            toy(**{key: value})


class _ToyChild(_Toy):
    def __init__(self, *, extra: int = 1, **keywords) -> None:
        super().__init__(**keywords)


def test_keywords_passed_on_to_the_base_class_are_the_methods_too():
    assert set(constructor_keywords(_ToyChild)) == {"extra", "secure", "seed", "rate", "steps",
                                                    "shift", "name", "on", "anything"}
    assert derived_hyper(_ToyChild)(extra=2, rate=0.1).keywords()["rate"] == 0.1


def test_a_field_check_runs_on_every_build():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Small(Hyper):
        count: int = hp(1, integer(1, 10))

    assert Small(count=9).count == 9
    for bad in (0, 10, 2.0):
        with pytest.raises(InputError, match=r"^count=.*must be an integer in \[1, 10\)"):
            Small(count=bad)


def test_protofssls_choices_are_the_methods_own():
    """ProtoFSSL's hyper.py keeps its choices itself (so that checking a value imports no
    torch model code); they must stay the server's."""
    from securefl.methods.protofssl import server as protofssl
    from securefl.methods.protofssl.hyper import PROTOFSSL_AGGREGATIONS, PROTOFSSL_NORMS

    assert (PROTOFSSL_AGGREGATIONS, PROTOFSSL_NORMS) == (protofssl.AGGREGATIONS, protofssl.NORMS)


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
