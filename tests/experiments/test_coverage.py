"""FedProp's label coverage in results.json, the run README and ``coverage.png``."""

from __future__ import annotations

import json

from securefl.experiments.config import config_from_dict
from securefl.experiments.plots import COVERAGE_PLOT, write_plots
from securefl.experiments.report import readme_text
from securefl.experiments.runner import Runner, load_federations, new_state

RAW = {
    "methods": ["fedprop", "fedavg-labeled"], "secure": "plaintext", "rounds": 2, "seed": 3,
    "partition": {"scheme": "iid", "num_clients": 4, "labeled_fraction": 0.1,
                  "samples_per_client": 40},
    "hyper": {"clients_per_round": 2, "local_epochs": 1, "fedprop": {"L": 64, "warmup_rounds": 1}},
}


def test_results_json_carries_coverage_and_the_plot_and_readme_show_it(tmp_path):
    config = config_from_dict(RAW)
    out = tmp_path / "run"
    Runner(state=new_state(config, {}), federations=load_federations(config), out=out).run()
    document = json.loads((out / "results.json").read_text())
    fedprop, labeled = document["methods"]
    for coverage, mass in zip(fedprop["label_coverage_by_round"], fedprop["label_mass_median_by_round"]):
        assert coverage["uncovered_count"] == len(coverage["uncovered_classes"])
        assert set(coverage["uncovered_classes"]) <= set(range(10))
        assert mass > 0 and len(coverage["clients"]) == 2
    assert labeled["label_coverage_by_round"] == [None, None]
    assert labeled["label_mass_median_by_round"] == [None, None]
    written = write_plots(document, tmp_path)
    assert tmp_path / COVERAGE_PLOT in written and (tmp_path / COVERAGE_PLOT).stat().st_size > 0
    text = readme_text(document)
    assert "Label coverage of fedprop (plaintext)" in text and "coverage.png" in text
    assert "Label coverage of fedavg-labeled" not in text


def test_no_coverage_plot_without_coverage(tmp_path):
    document = {"config": {}, "methods": [{
        "method": "fedavg-labeled", "secure": "plaintext", "rounds_completed": 1,
        "accuracy_by_round": [0.5], "selected_round": 0, "selected_test_accuracy": 0.5,
        "setup_seconds": 0.0, "train_seconds": 1.0, "crypto_seconds": 0.0, "seconds": 1.0,
        "bytes_model_per_client_per_round": 1e5, "bytes_protocol_per_client_per_round": 0.0,
        "label_coverage_by_round": [None]}]}
    assert not any(p.name == COVERAGE_PLOT for p in write_plots(document, tmp_path))
