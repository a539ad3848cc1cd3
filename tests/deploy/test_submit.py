"""securefl.fl.flower.deploy's in-process submission (``submit_in_process``): flwr's own
``flwr run`` function, with the federation's environment only while it runs.  No federation
is started (the deployment tests submit every run this way)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("flwr")

from securefl.errors import ConfigError  # noqa: E402
from securefl.fl.flower.deploy import LocalFederation, write_app  # noqa: E402


def test_a_failed_in_process_submission_raises_with_flowers_output_and_restores_the_environment(
        tmp_path, monkeypatch):
    monkeypatch.delenv("FLWR_HOME", raising=False)
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "1")
    federation = LocalFederation(nodes=1, workdir=tmp_path, submit_in_process=True)
    federation.home.mkdir()
    (federation.home / "config.toml").write_text('[superlink]\ndefault = "elsewhere"\n')
    app = write_app(tmp_path / "app", {"program": "link-check"})
    before = dict(os.environ)
    with pytest.raises(ConfigError, match="flwr run failed") as raised:
        federation.submit(app)
    # flwr read this federation's FLWR_HOME (its connection is missing there) ...
    assert "'securefl' not found" in str(raised.value) and str(federation.home) in str(raised.value)
    # ... and the test process's environment is as it was: no FLWR_HOME, telemetry as set
    assert dict(os.environ) == before
