"""``docs/write-a-method.md``: its example method (:mod:`securefl.methods.examples.entmin`)
is the module the page shows, is one registration, and runs on the regression record's tiny
job in both modes with equal outputs; the lists of methods derive from the registry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from securefl.errors import InputError
from securefl.methods import build_method, method_names, register_method, unregister_method
from securefl.methods.examples import entmin

from .regression.outputs import federations, record

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "write-a-method.md"
NAME = "fedavg-entmin"


@pytest.fixture
def registered():
    register_method(NAME, entmin.EntMinFedAvg)
    yield NAME
    unregister_method(NAME)


def _blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_page_shows_the_example_module_whole():
    blocks = _blocks(PAGE.read_text())
    module = Path(entmin.__file__).read_text()
    assert blocks and blocks[0] == module


def test_the_pages_register_and_run_block_runs(capsys):
    block = _blocks(PAGE.read_text())[1]
    assert 'register_method("fedavg-entmin", EntMinFedAvg)' in block
    try:
        exec(compile(block, str(PAGE), "exec"), {})  # noqa: S102 -- the page's own code
    finally:
        unregister_method(NAME)
    upload, accuracy = map(float, capsys.readouterr().out.split())
    assert upload > 0 and 0.0 <= accuracy <= 1.0


def test_a_method_is_one_registration(registered):
    assert method_names()[-1] == NAME
    assert build_method(NAME).entropy_weight == 0.1
    with pytest.raises(InputError, match=r"^hyper.fedavg-entmin.entropy_weight=-1"):
        build_method(NAME, entropy_weight=-1)
    with pytest.raises(InputError, match="name"):
        register_method(NAME, entmin.EntMinFedAvg)


def test_the_registry_lists_it_and_forgets_it():
    register_method(NAME, entmin.EntMinFedAvg)
    assert NAME in method_names()
    unregister_method(NAME)
    assert NAME not in method_names()


def test_the_example_runs_in_both_modes_with_equal_outputs(registered):
    feds = federations()
    plaintext = record(NAME, "plaintext", feds)
    real = record(NAME, "real", feds)
    assert len(real) == len(plaintext) == 3
    for ours, theirs in zip(real, plaintext):
        ours.pop("bytes_protocol_per_client", None)
        theirs.pop("bytes_protocol_per_client", None)  # the secure sum's masks and keys
        assert ours == theirs
    assert real[0]["models"] != real[-1]["models"]  # it trained
    without = record(NAME, "plaintext", feds, entropy_weight=0.0)
    assert without[-1]["models"] != plaintext[-1]["models"]  # the entropy term counts


def test_securefl_run_knows_a_registered_method(registered, tmp_path, capsys):
    from securefl.cli import main

    out = tmp_path / "run"
    assert main(["run", "--method", NAME, "--secure", "plaintext", "--rounds", "1", "--out",
                 str(out), "--set", f"hyper.{NAME}.entropy_weight=-1"]) == 2
    assert f"hyper.{NAME}.entropy_weight=-1: must be a number >= 0" in capsys.readouterr().err
    assert not out.exists()
