"""Every results.json says how to re-create it: command, commit, config, seed, machine,
library versions, held-out sizes."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import numpy as np
import torch

from securefl.cli import main
from securefl.experiments.config import config_from_dict


def test_results_carry_provenance(tmp_path, fake_config, capsys):
    out = tmp_path / "run"
    argv = ["run", "--config", str(fake_config), "--out", str(out), "--rounds", "2",
            "--set", "hyper.softmax-sup.lr=0.25", "--set", "partition.validation_fraction=0.2"]
    assert main(argv) == 0
    document = json.loads((out / "results.json").read_text())
    words = shlex.split(document["command"])
    assert words[:2] == ["securefl", "run"] and words.count("--set") == 2
    assert "hyper.softmax-sup.lr=0.25" in words and "partition.validation_fraction=0.2" in words
    assert document["config"]["hyper"]["softmax-sup"]["lr"] == 0.25
    assert config_from_dict(document["config"]).partition["validation_fraction"] == 0.2
    assert document["seed"] == 1 and document["config_source"] == str(fake_config)
    assert document["commit"] and isinstance(document["uncommitted_changes"], bool)
    assert isinstance(document["uncommitted_files"], list)
    assert document["cwd"] and document["executable"] and isinstance(document["argv"], list)
    libraries = document["libraries"]
    assert libraries["numpy"] == np.__version__ and libraries["torch"] == torch.__version__
    assert libraries["python"] and libraries["securefl"]
    machine = document["machine"]
    for key in ("cpu", "cores", "cores_available", "memory_gb", "platform",
                "torch_cpu_capability"):
        assert machine[key], key
    assert len(document["load_average_at_start"]) == 3 and len(document["load_average"]) == 3
    assert document["process_warmup_seconds"] >= 0.0
    assert document["held_out"] == {name: {"validation": 269, "test": 450}
                                    for name in ("softmax-st", "softmax-sup")}
    readme = (out / "README.md").read_text()
    assert f"torch {torch.__version__}" in readme and "269 validation images" in readme
    assert "s, charged to no method" in readme


def test_the_process_warm_up_takes_the_first_optimizers_imports_off_the_first_job():
    """In a fresh interpreter, building the first optimizer imports torch._dynamo (seconds);
    the runner's warm-up does it before any job's clock starts (it runs before the job loop)."""
    script = (
        "import sys, torch\n"
        "from securefl.experiments.runner import warm_up_process\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "warm_up_process()\n"
        "assert 'torch._dynamo' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
