"""The runner: per-round commits, Ctrl-C leaves valid results, resume equals uninterrupted."""

from __future__ import annotations

import json

import pytest

from securefl.experiments import runner
from securefl.experiments.config import load_config
from securefl.experiments.report import readme_text
from securefl.experiments.runner import (
    CHECKPOINT_FILE,
    Runner,
    load_state,
    new_state,
    state_config,
)

from .conftest import fake_factory


class Stop(Exception):
    pass


def _runner(config, federation, out, after_round=None, state=None):
    return Runner(
        state=state or new_state(config, {"command": "test"}),
        federations={name: federation for name in config.methods},
        out=out,
        factory=fake_factory,
        after_round=after_round,
    )


def _interrupt_at(job_index, round_index):
    """An after_round hook that presses Ctrl-C after the given job's round."""
    seen = []

    def hook(job, completed_round):
        seen.append(job.method + job.secure)
        jobs_done = len(dict.fromkeys(seen)) - 1
        if jobs_done == job_index and completed_round == round_index:
            raise KeyboardInterrupt

    return hook


def _series(document):
    return [
        (s["method"], s["secure"], s["accuracy_by_round"], s["pseudo_label_digest_by_round"])
        for s in document["methods"]
    ]


@pytest.mark.parametrize("secure, job_index, round_index", [("real", 0, 1), ("both", 2, 0)])
def test_interrupted_then_resumed_equals_uninterrupted(
    tmp_path, fake_config, digits_federation, os_draws, secure, job_index, round_index
):
    config = load_config(fake_config, secure=secure, rounds=4)
    reference = _runner(config, digits_federation, tmp_path / "ref").run()

    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        _runner(config, digits_federation, out, _interrupt_at(job_index, round_index)).run()
    partial = json.loads((out / "results.json").read_text())
    assert partial["status"] == "interrupted"
    completed = [s["rounds_completed"] for s in partial["methods"]]
    assert completed[job_index] == round_index + 1
    assert completed[:job_index] == [4] * job_index
    assert sum(completed) == 4 * job_index + round_index + 1
    interrupted = partial["methods"][job_index]
    assert interrupted["status"] == "interrupted"
    assert interrupted["accuracy_by_round"] == (
        reference["methods"][job_index]["accuracy_by_round"][: round_index + 1]
    )

    state = load_state(out)
    os_draws.value += 1  # the resumed part must keep the run's secrets, not draw new ones
    resumed = _runner(state_config(state), digits_federation, out, state=state).run()
    assert resumed["status"] == "complete"
    assert _series(resumed) == _series(reference)
    assert [s["pseudo_label_accuracy"] for s in resumed["methods"]] == [
        s["pseudo_label_accuracy"] for s in reference["methods"]
    ]
    assert json.loads((out / "results.json").read_text())["status"] == "complete"


def test_each_round_is_committed_before_the_next(tmp_path, fake_config, digits_federation):
    config = load_config(fake_config, methods=["softmax-st"], rounds=3)
    out = tmp_path / "run"
    observed = []

    def hook(job, round_index):
        document = json.loads((out / "results.json").read_text())
        state = load_state(out)
        observed.append(
            (document["methods"][0]["rounds_completed"], state.jobs[0].rounds_completed,
             state.method_state is not None)
        )

    _runner(config, digits_federation, out, hook).run()
    assert observed == [(1, 1, True), (2, 2, True), (3, 3, True)]
    final = load_state(out)
    assert final.status == "complete" and final.method_state is None


def test_failure_is_recorded_and_reraised(tmp_path, fake_config, digits_federation):
    config = load_config(fake_config, methods=["softmax-st"], rounds=3)
    out = tmp_path / "run"

    def hook(job, round_index):
        if round_index == 1:
            raise Stop("disk on fire")

    with pytest.raises(Stop):
        _runner(config, digits_federation, out, hook).run()
    document = json.loads((out / "results.json").read_text())
    assert document["status"] == "failed"
    assert document["methods"][0]["rounds_completed"] == 2
    assert "disk on fire" in document["methods"][0]["error"]
    assert (out / CHECKPOINT_FILE).is_file()
    # the checkpoint holds secrets (crypto seed, client states): its owner's only
    assert (out / CHECKPOINT_FILE).stat().st_mode & 0o777 == 0o600


def test_resuming_a_complete_run_changes_nothing(tmp_path, fake_config, digits_federation):
    config = load_config(fake_config, rounds=2)
    out = tmp_path / "run"
    first = _runner(config, digits_federation, out).run()
    state = load_state(out)
    again = _runner(state_config(state), None, out, state=state).run()
    assert _series(again) == _series(first)


def test_a_resumed_run_keeps_every_process_warm_up(tmp_path, fake_config, digits_federation, monkeypatch):
    """Each process pays its own one-time imports; a resumed run records both, and charges
    their sum to no method (the resumed process's must not replace the first one's)."""
    config = load_config(fake_config, methods=["softmax-st"], rounds=3)
    out = tmp_path / "run"
    monkeypatch.setattr(runner, "warm_up_process", lambda: 1.5)
    with pytest.raises(KeyboardInterrupt):
        _runner(config, digits_federation, out, _interrupt_at(0, 0)).run()
    assert json.loads((out / "results.json").read_text())["process_warmup_seconds"] == 1.5
    monkeypatch.setattr(runner, "warm_up_process", lambda: 0.25)
    state = load_state(out)
    resumed = _runner(state_config(state), digits_federation, out, state=state).run()
    assert resumed["status"] == "complete"
    assert resumed["process_warmup_seconds_by_process"] == [1.5, 0.25]
    assert resumed["process_warmup_seconds"] == 1.75
    assert "process warm-ups 1.5 + 0.2 s (2 processes), charged to no method" in readme_text(resumed)


def test_a_checkpoint_without_the_list_keeps_its_one_warm_up(tmp_path, fake_config, digits_federation,
                                                            monkeypatch):
    config = load_config(fake_config, methods=["softmax-st"], rounds=2)
    out = tmp_path / "run"
    monkeypatch.setattr(runner, "warm_up_process", lambda: 2.0)
    with pytest.raises(KeyboardInterrupt):
        _runner(config, digits_federation, out, _interrupt_at(0, 0)).run()
    state = load_state(out)
    del state.header["process_warmup_seconds_by_process"]  # as an older checkpoint holds it
    monkeypatch.setattr(runner, "warm_up_process", lambda: 0.5)
    resumed = _runner(state_config(state), digits_federation, out, state=state).run()
    assert resumed["process_warmup_seconds_by_process"] == [2.0, 0.5]
    assert resumed["process_warmup_seconds"] == 2.5


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_during_a_commit_waits_for_the_files(signame):
    import os
    import signal

    from securefl.experiments.runner import _interrupts_deferred

    signum = getattr(signal, signame)
    finished = []
    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt):
        with _interrupts_deferred():
            os.kill(os.getpid(), signum)
            finished.append(True)
    assert finished == [True]
    assert signal.getsignal(signum) is before


def test_interrupt_mid_round_cannot_leak_half_updated_state(
    tmp_path, fake_config, digits_federation, monkeypatch, os_draws
):
    from .conftest import SoftmaxSelfTraining

    config = load_config(fake_config, methods=["softmax-st"], rounds=3)
    reference = _runner(config, digits_federation, tmp_path / "ref").run()
    original = SoftmaxSelfTraining.run_round

    def corrupt_then_stop(self, round_index):
        if round_index == 2:
            self.weights += 1.0  # in place: visible through the last state_dict()
            raise KeyboardInterrupt
        return original(self, round_index)

    monkeypatch.setattr(SoftmaxSelfTraining, "run_round", corrupt_then_stop)
    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        _runner(config, digits_federation, out).run()
    monkeypatch.setattr(SoftmaxSelfTraining, "run_round", original)
    state = load_state(out)
    resumed = _runner(state_config(state), digits_federation, out, state=state).run()
    assert _series(resumed) == _series(reference)
