"""`securefl run` with the real methods on a tiny digits federation: real vs plaintext give
identical pseudo-labels, and an interrupted run resumes to the same results."""

from __future__ import annotations

import json

import pytest

from securefl.cli import main
from securefl.experiments.config import config_from_dict
from securefl.experiments.runner import Runner, load_federations, load_state, new_state

TINY = """
name = "tiny-real"
methods = ["fedprop", "protofssl", "fedsemi-mt", "fedanchor", "fedavg-labeled"]
secure = "real"
rounds = 2
seed = 3

[dataset]
name = "digits"

[partition]
scheme = "iid"
num_clients = 4
labeled_fraction = 0.2
samples_per_client = 50

[partition.fedanchor]
labels_at = "server"
server_labels = 40

[hyper]
clients_per_round = 3
local_epochs = 1

[hyper.fedprop]
L = 64
warmup_rounds = 1

[hyper.fedanchor]
pretrain_epochs = 1
"""


def test_secure_both_gives_identical_pseudo_labels(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = tmp_path / "both"
    assert main(["run", "--config", str(config), "--secure", "both", "--out", str(out)]) == 0
    document = json.loads((out / "results.json").read_text())
    rows = {row["method"]: row for row in document["comparison"]}
    assert set(rows) == {"fedprop", "protofssl", "fedsemi-mt", "fedanchor", "fedavg-labeled"}
    for name in ("fedprop", "protofssl", "fedanchor"):
        assert rows[name]["pseudo_labels_identical"] is True, name
    for row in rows.values():
        assert row["rounds_compared"] == 2
        assert row["pseudo_labels_identical"] in (True, None)
        assert row["time_ratio"] > 0 and row["crypto_seconds_real"] > 0
    assert rows["fedprop"]["bytes_ratio"] > 1


def test_interrupted_run_of_real_methods_resumes_to_the_same_results(tmp_path):
    raw = {
        "methods": ["fedprop", "fedanchor"], "secure": "plaintext", "rounds": 3, "seed": 3,
        "partition": {"scheme": "iid", "num_clients": 4, "labeled_fraction": 0.2,
                      "samples_per_client": 50,
                      "fedanchor": {"labels_at": "server", "server_labels": 40}},
        "hyper": {"clients_per_round": 3, "local_epochs": 1,
                  "fedprop": {"L": 64, "warmup_rounds": 1},
                  "fedanchor": {"pretrain_epochs": 1}},
    }
    config = config_from_dict(raw)
    federations = load_federations(config)

    def run(out, after_round=None, state=None):
        return Runner(state=state or new_state(config, {}), federations=federations, out=out,
                      after_round=after_round).run()

    reference = run(tmp_path / "ref")

    def stop(job, round_index):
        if job.method == "fedanchor" and round_index == 0:
            raise KeyboardInterrupt

    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run(out, stop)
    assert [s["rounds_completed"] for s in json.loads((out / "results.json").read_text())
            ["methods"]] == [3, 1]
    resumed = run(out, state=load_state(out))
    for got, want in zip(resumed["methods"], reference["methods"]):
        assert got["accuracy_by_round"] == want["accuracy_by_round"]
        assert got["pseudo_label_digest_by_round"] == want["pseudo_label_digest_by_round"]
        assert got["pseudo_label_digest_by_round"][0] is not None
