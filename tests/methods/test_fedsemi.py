"""FedSemi: schedules (eqs. 7, 9, 11, 12), FSM divergence (eq. 10), boundary, consistency
losses (eqs. 5-6), and short runs: real vs plaintext, Pi/MT upload rates, resume."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.crypto.identity import CREDENTIALS, new_federation
from securefl.errors import ConfigError, InputError
from securefl.methods import build_method
from securefl.methods.common import layer_groups
from securefl.methods.consistency import (
    alpha_ramp,
    beta_ramp,
    consistency_loss,
    ema_update,
    fsm_divergence,
    select_layers,
    tau_linear,
    tau_rectangle,
    upload_boundary,
)
from securefl.runtime.policy import POLICY, PrivacyPolicy

from .conftest import play


def test_beta_ramp_values():
    assert beta_ramp(0, phi_l=10) == 0.0
    assert beta_ramp(5, phi_l=10) == pytest.approx(math.exp(-5 * 0.25))
    assert beta_ramp(10, phi_l=10) == 1.0
    assert beta_ramp(37, phi_l=10) == 1.0
    with pytest.raises(InputError, match="phi_l"):
        beta_ramp(1, phi_l=0)


@settings(max_examples=40, deadline=None)
@given(st.floats(0, 50), st.floats(0, 50), st.floats(0.5, 30))
def test_beta_ramp_is_monotone_in_unit_interval(a, b, phi_l):
    lo, hi = sorted((a, b))
    assert 0.0 <= beta_ramp(lo, phi_l=phi_l) <= beta_ramp(hi, phi_l=phi_l) <= 1.0


def test_alpha_ramp_gate_and_cap():
    assert alpha_ramp(3, 20, phi_g=3) == 0.0  # R_g <= phi_g: Pi-model phase
    assert alpha_ramp(4, 20, phi_g=3) == pytest.approx(1 - 1 / 20)
    assert alpha_ramp(4, 1, phi_g=3) == 0.0
    assert alpha_ramp(40, 10**6, phi_g=3, alpha_max=0.999) == 0.999


def test_ema_update_matches_formula():
    torch.manual_seed(0)
    teacher, student = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    before = teacher.weight.detach().clone()
    ema_update(teacher, student, 0.9)
    assert torch.allclose(teacher.weight, 0.9 * before + 0.1 * student.weight)
    ema_update(teacher, student, 0.0)
    assert torch.equal(teacher.weight, student.weight)


def test_fsm_divergence_direct_formula():
    rng = np.random.default_rng(1)
    t = [rng.normal(size=(4, 3)), rng.normal(size=5)]
    s = [rng.normal(size=(4, 3)), rng.normal(size=5)]
    expected = [np.sqrt(((a - b) ** 2).sum()) / np.sqrt((b**2).sum()) for a, b in zip(t, s)]
    assert np.allclose(fsm_divergence(t, s), expected)
    assert fsm_divergence([np.zeros(2)], [np.zeros(2)])[0] == 0.0
    with pytest.raises(InputError):
        fsm_divergence([np.zeros(2)], [np.zeros(3)])


def test_tau_linear_shape_and_area():
    total, phi, mu = 50, 3, 0.5
    taus = [tau_linear(r, total_rounds=total, phi_g=phi, mu=mu) for r in range(1, total + 1)]
    assert taus[:phi] == [0.0] * phi
    assert taus[-1] == 0.0
    assert all(a >= b for a, b in zip(taus[phi:], taus[phi + 1 :]))
    # eq. (11) has area (1 - mu) R_G before clipping to 1; mu = 0.8 stays below 1
    small = [tau_linear(r, total_rounds=total, phi_g=phi, mu=0.8) for r in range(1, total + 1)]
    assert max(small) < 1.0
    assert sum(small) == pytest.approx((1 - 0.8) * total, rel=0.05)


def test_tau_rectangle_constant_between_tipping_points():
    values = {r: tau_rectangle(r, total_rounds=50, phi_g=10, phi_end=40, mu=0.5) for r in range(1, 51)}
    assert values[10] == 0.0 and values[40] == 0.0 and values[45] == 0.0
    assert values[11] == values[39] == pytest.approx(0.5 * 50 / 30)
    with pytest.raises(InputError, match="phi_end"):
        tau_rectangle(5, total_rounds=50, phi_g=10, phi_end=5, mu=0.5)


def test_upload_boundary_quantile():
    history = np.arange(10.0)
    assert upload_boundary(history, 0.0) == math.inf
    assert upload_boundary(history, 1.0) == 0.0
    assert upload_boundary(history, 0.5) == pytest.approx(np.quantile(history, 0.5))
    assert select_layers(np.array([1.0, 5.0, 9.0]), upload_boundary(history, 0.3)).tolist() == [False, False, True]
    with pytest.raises(InputError, match="tau"):
        upload_boundary(history, 1.5)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=1, max_size=30), st.floats(0, 1), st.floats(0, 1))
def test_upload_rate_grows_with_tau(history, a, b):
    lo, hi = sorted((a, b))
    fsm = np.asarray(history)
    assert select_layers(fsm, upload_boundary(fsm, lo)).sum() <= select_layers(fsm, upload_boundary(fsm, hi)).sum()


def test_consistency_losses_direct_formulas():
    torch.manual_seed(0)
    t, s = torch.randn(6, 4), torch.randn(6, 4, requires_grad=True)
    pt, ps = torch.softmax(t, 1), torch.softmax(s, 1)
    assert torch.allclose(consistency_loss(t, s, "mse"), ((pt - ps) ** 2).sum(1).mean())
    assert torch.allclose(consistency_loss(t, s, "kl"), (pt * (pt.log() - ps.log())).sum(1).mean(), atol=1e-6)
    consistency_loss(t, s, "mse").backward()
    assert s.grad is not None
    with pytest.raises(InputError, match="kind"):
        consistency_loss(t, s, "l1")


def test_layer_groups_roundtrip():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    groups = layer_groups(model)
    assert groups.names == ("0", "2")
    arrays = groups.arrays(model)
    assert [a.size for a in arrays] == [16, 10]
    groups.load(model, [a * 0 + 1 for a in arrays])
    assert torch.all(model[2].bias == 1)
    assert [a.size for a in groups.split(np.zeros(26))] == [16, 10]


def _run(name, federation, secure, rounds=2, **hyper):
    method = build_method(name, secure=secure, seed=3, rounds=5, clients_per_round=3, batch_size=8, **hyper)
    method.setup(federation.for_training())
    return method, *play(method, federation, rounds)


@pytest.mark.parametrize("name", ["fedsemi-pi", "fedsemi-mt", "fedsemi-d"])
def test_real_and_plaintext_agree(name, tiny_digits):
    real, real_results, real_acc = _run(name, tiny_digits, "real", local_epochs=1)
    plain, plain_results, plain_acc = _run(name, tiny_digits, "plaintext", local_epochs=1)
    assert real_acc == plain_acc
    for a, b in zip(real.teacher.state_dict().values(), plain.teacher.state_dict().values()):
        assert torch.equal(a, b)
    assert all(r.bytes_protocol_per_client > p.bytes_protocol_per_client for r, p in zip(real_results, plain_results))
    assert all(r.pseudo_label_digest is None for r in real_results)


def test_upload_rates_follow_variant(tiny_digits):
    pi, _, _ = _run("fedsemi-pi", tiny_digits, "plaintext", local_epochs=1)
    mt, _, _ = _run("fedsemi-mt", tiny_digits, "plaintext", local_epochs=1)
    assert pi.last_upload_rate == 0.0
    assert mt.last_upload_rate == 1.0
    for a, b in zip(pi.teacher.state_dict().values(), pi.student.state_dict().values()):
        assert torch.equal(a, b)  # Pi: the teacher is the student


def test_resume_equals_uninterrupted(tiny_digits):
    full, _, accuracies = _run("fedsemi-d", tiny_digits, "plaintext", rounds=3, local_epochs=1)
    first, _, _ = _run("fedsemi-d", tiny_digits, "plaintext", rounds=2, local_epochs=1)
    state = first.state_dict()
    resumed = build_method("fedsemi-d", secure="plaintext", seed=3, rounds=5, clients_per_round=3, batch_size=8, local_epochs=1)
    resumed.setup(tiny_digits.for_training())
    resumed.load_state_dict(state)
    assert play(resumed, tiny_digits, 3, start=2)[1] == accuracies[2:]
    for a, b in zip(resumed.student.state_dict().values(), full.student.state_dict().values()):
        assert torch.equal(a, b)
    # the clients' own round counts (eqs. 7 and 9) travel in the checkpoint: without them
    # the resumed run trains differently
    assert {int(r.config["fedsemi/selections"]) for r in state["clients"].values()} <= {1, 2}
    forgetful = build_method("fedsemi-d", secure="plaintext", seed=3, rounds=5, clients_per_round=3, batch_size=8, local_epochs=1)
    forgetful.setup(tiny_digits.for_training())
    forgetful.load_state_dict({**state, "clients": {}})
    play(forgetful, tiny_digits, 3, start=2)
    assert not all(torch.equal(a, b) for a, b in zip(forgetful.student.state_dict().values(),
                                                     full.student.state_dict().values()))


@pytest.mark.parametrize("secure", ["plaintext", "real"])
def test_a_client_uploads_only_layers_its_own_fsm_chose_in_groups_of_min_group(secure, tiny_digits):
    """The upload request names the sums; a client refuses a layer its FSM did not select
    at the boundary, and a layer sum smaller than ``min_group`` (it would reveal a layer)."""
    from securefl.errors import ProtocolError
    from securefl.fl.group_sums import GroupSumPlan
    from securefl.methods.fedsemi.client import flat, layer_sum
    from securefl.methods.halves import MethodProgramClient, local_data, run_config
    from securefl.runtime.transport import NodeContext, Record

    method = build_method("fedsemi-mt", secure=secure, seed=3, rounds=5, batch_size=8, local_epochs=2)
    method.setup(tiny_digits.for_training())
    node = NodeContext(0, {"partition-id": 0, POLICY: PrivacyPolicy.for_method(method),
                           CREDENTIALS: new_federation("fedsemi", 2)[1][0]},
                       run_config(method), local_data(tiny_digits, 0))
    client, state = MethodProgramClient(), Record()
    networks = {"student": flat(method.groups.arrays(method.student)),
                "teacher": flat(method.groups.arrays(method.teacher))}
    fsm = client.handle("train", Record(networks, {"round": 0}), state, node).arrays["fsm"]
    assert len(set(fsm)) == len(fsm) > 1  # the EMA (alpha > 0 in the second epoch) sets the layers apart
    boundary = float(np.median(fsm))
    chosen, skipped = np.flatnonzero(fsm >= boundary), np.flatnonzero(fsm < boundary)
    dims = {"teacher": networks["teacher"].size, **{layer_sum(j): 1 for j in range(len(fsm))}}

    def request(groups):
        plan = GroupSumPlan.new(secure=secure, sum_backend="secagg", groups=groups,
                                dims={name: dims[name] for name in groups})
        return plan.request(0, config={"round": 0, "boundary": boundary})

    with pytest.raises(ProtocolError, match="did not select"):
        client.handle("upload", request({"teacher": [0, 1], layer_sum(skipped[0]): [0, 1]}), state.copy(writable=True), node)
    with pytest.raises(ProtocolError, match="min_group"):
        client.handle("upload", request({"teacher": [0, 1], layer_sum(chosen[0]): [0]}), state.copy(writable=True), node)
    reply = client.handle("upload", request({"teacher": [0, 1], layer_sum(chosen[0]): [0, 1]}), state, node)
    sent = set(reply.arrays)
    assert not any(k.startswith("sums/") and k != "sums/weight" for k in sent) if secure == "real" \
        else {"sums/teacher", f"sums/{layer_sum(chosen[0])}"} <= sent


def test_bad_configuration(tiny_digits, tiny_digits_server):
    with pytest.raises(ConfigError):
        build_method("fedsemi-mt").setup(tiny_digits_server)
