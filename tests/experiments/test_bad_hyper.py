"""Bad hyper-parameters are refused by ``securefl run`` as a new user would meet them: one
line naming ``hyper.<method>.<key>`` and the value, exit status 2, before any data is loaded
or any file written (the dataclasses of :mod:`securefl.methods.hyper`)."""

from __future__ import annotations

import pytest

from securefl.cli import build_parser, main, validate_arguments

BAD = [
    # (method, key, value as typed after --set)
    ("fedprop", "alpha", "2"),
    ("fedprop", "alpha", "0"),
    ("fedprop", "L", "-4"),
    ("fedprop", "L", "65536"),
    ("fedprop", "L", "4096.0"),
    ("fedprop", "k", "0"),
    ("fedprop", "lr", "-0.1"),
    ("fedprop", "warmup_rounds", "-1"),
    ("fedprop", "hamming_backend", "paillier"),
    ("fedprop", "chunk_bytes", "0"),
    ("fedprop", "chunk_bytes", "1.5"),
    ("fedprop-mt", "chunk_bytes", "true"),
    ("fedprop", "min_label_mass", "-1.0"),
    ("fedprop", "mass_weighting", "yes"),
    ("fedprop", "model", "vgg"),
    ("fedprop", "warmup_in_budget", '"yes"'),
    ("fedprop", "nosuchkey", "1"),
    ("fedprop-mt", "ema_decay", "1.0"),
    ("fedprop-mt", "consistency_weight", "-1"),
    ("fedprop-mt", "alpha", "1"),
    ("protofssl", "lr", "0"),
    ("protofssl", "rmsprop_alpha", "1.0"),
    ("protofssl", "distance", "cosine"),
    ("protofssl", "aggregation", "fedadam"),
    ("protofssl", "dp_delta", "1.5"),
    ("protofssl", "noise_multiplier", "1.0"),
    ("protofssl", "n_support", "0"),
    ("protofssl", "norm", "ln"),
    ("protofssl", "max_shift", "1.5"),
    ("fedsemi-pi", "consistency", "l1"),
    ("fedsemi-mt", "curve", "cosine"),
    ("fedsemi-mt", "mu", "1.5"),
    ("fedsemi-mt", "alpha_max", "1.0"),
    ("fedsemi-d", "phi_g", "-1"),
    ("fedsemi-pi", "phi_end", "5"),  # with the rectangle curve below: must exceed phi_g
    ("fedsemi-d", "batch_size", "0"),
    ("fedanchor", "threshold", "1.5"),
    ("fedanchor", "pretrain_epochs", "-1"),
    ("fedanchor", "client_mixup", "1"),
    ("fedanchor", "max_shift", "-2"),
    ("fedavg-labeled", "clients_per_round", "0"),
    ("fedavg-labeled", "momentum", "-0.5"),
    ("fedavg-supervised", "lr_decay_rounds", "-3"),
    ("fedavg-supervised", "hflip", '"no"'),
    ("fedavg-locallp", "alpha", "1.0"),
    ("fedavg-pl", "threshold", "1.0"),
    ("fedavg-mt", "noise_std", "-0.1"),
    ("fedavg-fixmatch", "threshold", "1.5"),
    ("fedavg-fixmatch", "unlabeled_ratio", "0"),
    ("fedavg-fixmatch", "cutout", "2.0"),
    ("fedavg-fixmatch", "unlabeled_weight", "-1.0"),
    ("fedavg-fixmatch", "num_ops", "-2"),
    ("fedavg-fixmatch", "lr", "nan"),
    ("fedmatch", "confidence", "1.5"),
    ("fedmatch", "num_helpers", "-1"),
    ("fedmatch", "lambda_l2", "-1.0"),
]


@pytest.mark.parametrize("method, key, value", BAD, ids=[f"{m}.{k}={v}" for m, k, v in BAD])
def test_a_bad_hyper_parameter_is_one_line_and_exit_2_before_any_file(method, key, value,
                                                                      tmp_path, capsys):
    out = tmp_path / "run"
    extra = ["--set", "hyper.fedsemi-pi.curve=rectangle"] if key == "phi_end" else []
    code = main(["run", "--method", method, "--secure", "plaintext", "--rounds", "20",
                 "--out", str(out), "--set", f"hyper.{method}.{key}={value}", *extra])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("securefl: InputError: "), captured.err
    assert f"hyper.{method}.{key}=" in lines[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []


GOOD = [("fedprop", "alpha", "0.5"), ("fedprop", "L", "1024"), ("fedsemi-d", "phi_g", "2"),
        ("protofssl", "noise_multiplier", "1.0"), ("fedavg-pl", "threshold", "0.9"),
        ("fedanchor", "max_shift", "0")]


@pytest.mark.parametrize("method, key, value", GOOD, ids=[f"{m}.{k}={v}" for m, k, v in GOOD])
def test_a_good_value_next_to_a_bad_one_passes_validation(method, key, value):
    settings = [f"hyper.{method}.{key}={value}"]
    if (method, key) == ("protofssl", "noise_multiplier"):
        settings.append("hyper.protofssl.clip=1.0")  # the Gaussian release needs its clip
    args = build_parser().parse_args(
        ["run", "--method", method, "--rounds", "5",
         *[word for s in settings for word in ("--set", s)]])
    validate_arguments(args)


def test_the_shared_table_is_checked_for_every_method_that_takes_the_key(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", "--method", "fedavg-labeled", "fedprop", "--out", str(out),
                 "--set", "hyper.lr=-1"])
    assert code == 2
    assert "hyper.fedavg-labeled.lr=-1" in capsys.readouterr().err
    assert not out.exists()


def test_fedsemi_d_needs_more_rounds_than_its_tipping_point(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--method", "fedsemi-d", "--rounds", "3", "--out", str(out)]) == 2
    assert "hyper.fedsemi-d.rounds=3: FedSemi-D needs more rounds" in capsys.readouterr().err
    assert not out.exists()
