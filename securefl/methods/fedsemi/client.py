"""Client half of FedSemi-Pi, -MT and -D (:mod:`securefl.methods.fedsemi.server`): what one client
does in a round, written once for every transport.

Steps (one exchange each):

``train``
    request: arrays ``student`` and ``teacher`` (the global networks as float64 vectors of
    their layers in :class:`~securefl.methods.common.LayerGroups` order); config ``round``
    (0-based index).  The client builds the architecture from its keywords (``model``,
    ``seed``) and its data's shape, loads both vectors, runs the local update of §3.1
    (:func:`local_update`) with its generator ``client_rng(seed, round, client)`` -- bit
    for bit the update the simulator made on copies of the global networks -- and keeps
    the trained teacher and student in its state Record until the upload.
    reply: array ``fsm`` (eq. 10, one float per layer) and :data:`~securefl.runtime.costs.COMPUTE`.
``upload``
    request: config ``round``, ``boundary`` (the server's ``quantile_{1 - tau}(Lambda)``)
    and the parameters of the sums the server asks the client to join
    (:mod:`securefl.fl.group_sums`): ``teacher`` and ``layer-<j>`` for every student layer
    ``j`` it uploads.  The client refuses (:class:`~securefl.errors.ProtocolError`) a
    layer its own FSM did not select at that boundary and a layer sum with fewer than
    ``min_group`` members (a secure sum over one client would reveal its layer).
    reply: its contributions -- ``[|D_k| theta_t^k, |D_k|]`` to ``teacher`` and
    ``[|D_k| (theta_s^k[j] - theta_t^k[j]), |D_k|]`` to each ``layer-<j>`` -- as secure-sum
    round 0 in real mode (:func:`securefl.fl.group_sums.contribute`), and
    :data:`~securefl.runtime.costs.CRYPTO`.
``secagg/keys``, ``secagg/ciphertexts``, ``secagg/survivors``, ``secagg/endorsements`` (real mode)
    rounds 1-3 of every sum at once (:func:`securefl.runtime.secure_sum_steps.answer`).

Between rounds a client keeps ``fedsemi/selections`` (how many rounds it has trained: the
local-epoch count ``x = R_g^k R_L`` of eqs. 7 and 9 is its own), checkpointed with the
simulator's client states; the trained networks stay in its state Record only from
``train`` to ``upload``.  Who learns what: the client learns the global networks and the
boundary; it sends its FSM vector in the clear (as in the paper) and its networks only
into secure sums in real mode.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securefl.errors import ProtocolError
from securefl.fl import client_rng, group_sums
from securefl.fl.training import make_optimizer
from securefl.methods.common import LayerGroups, layer_groups, perturb
from securefl.methods.consistency import (
    beta_ramp,
    consistency_loss,
    ema_update,
    fsm_divergence,
    select_layers,
)
from securefl.methods.halves import LocalData, MethodClient
from securefl.models import build_model, dropout_generator
from securefl.runtime import secure_sum_steps
from securefl.runtime.costs import COMPUTE, CRYPTO
from securefl.runtime.transport import NodeContext, Record

TRAIN = "train"
UPLOAD = "upload"
TEACHER = "teacher"
SELECTIONS = "fedsemi/selections"
_TRAINED = "fedsemi/trained/"


def layer_sum(j: int) -> str:
    """The name of the secure sum of student layer ``j``'s deltas."""
    return f"layer-{int(j)}"


def flat(layers: list[np.ndarray]) -> np.ndarray:
    """Per-layer arrays as one float64 vector (the order of ``LayerGroups``)."""
    return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in layers])


def default_shift(method, input_shape: tuple[int, ...]) -> int:
    """FedSemi's perturbation shift: ``max_shift``, else 7 % of the image side."""
    if method.max_shift is not None:
        return int(method.max_shift)
    return int(round(0.07 * input_shape[-1])) if len(input_shape) == 3 else 0


def local_update(method, student: nn.Module, teacher: nn.Module, x: torch.Tensor, y: torch.Tensor,
                 *, done: int, global_round: int, shift: int, generator: torch.Generator) -> None:
    """FedSemi's local update (§3.1) of ``student`` and ``teacher`` in place, in 1-based
    round ``global_round`` after ``done`` local epochs, drawing from ``generator`` only
    (batch order, perturbations and the student's dropout masks; on the device of ``x``,
    the networks and the generator, which must agree); ``y`` is -1 on unlabeled points."""
    teacher.eval()
    student.train()
    optimizer = make_optimizer(student, lr=method.lr, momentum=method.momentum,
                               weight_decay=method.weight_decay)
    for epoch in range(method.local_epochs):
        beta = beta_ramp(done + epoch, phi_l=method.phi_l)
        alpha = method.alpha(global_round, done + epoch + 1)
        order = torch.randperm(len(y), generator=generator, device=generator.device)
        for start in range(0, len(order), method.batch_size):
            batch = order[start : start + method.batch_size]
            xb, yb = x[batch], y[batch]
            labeled = yb >= 0
            x_student = perturb(xb, method.noise_std, shift, generator)
            x_teacher = perturb(xb, method.noise_std, shift, generator)
            n_lab = int(labeled.sum())
            with dropout_generator(student, generator):
                logits = student(torch.cat([x_student, xb[labeled]]) if n_lab else x_student)
            student_logits = logits[: len(yb)]
            loss = student_logits.sum() * 0.0
            if n_lab:
                targets = yb[labeled]
                loss = F.cross_entropy(torch.cat([student_logits[labeled], logits[len(yb):]]),
                                       torch.cat([targets, targets]))
            if beta > 0:
                with torch.no_grad():
                    teacher_logits = teacher(x_teacher)
                loss = loss + beta * consistency_loss(teacher_logits, student_logits, method.consistency)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            ema_update(teacher, student, alpha)


class FedSemiClient(MethodClient):
    """The client half of every FedSemi variant (module docstring)."""

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        if step in secure_sum_steps.STEPS:
            return self.secure_sum_reply(request, state, node)
        reply = Record()
        if step == TRAIN:
            return self.train(request, state, node, reply)
        if step == UPLOAD:
            return self.upload(request, state, node, reply)
        raise self.unknown_step(step, TRAIN, UPLOAD)

    def network(self, data: LocalData, groups: LayerGroups | None, vector: np.ndarray
                ) -> tuple[nn.Module, LayerGroups]:
        """The method's architecture for ``data`` on the method's device, holding ``vector``
        (per-layer order)."""
        model = build_model(self.method.model, input_shape=data.input_shape,
                            num_classes=data.num_classes, seed=self.method.seed,
                            device=self.method.torch_device)
        groups = groups or layer_groups(model)
        groups.load(model, groups.split(np.array(vector, dtype=np.float64)))
        return model, groups

    def train(self, request: Record, state: Record, node: NodeContext, reply: Record) -> Record:
        method, data = self.method, self.data(node)
        if "student" not in request.arrays or "teacher" not in request.arrays:
            raise ProtocolError("a FedSemi train request needs the student and the teacher")
        start = time.perf_counter()
        round_index = int(request.config["round"])
        student, groups = self.network(data, None, request.arrays["student"])
        teacher, _ = self.network(data, groups, request.arrays["teacher"])
        client = data.client
        device = method.torch_device
        x = torch.from_numpy(np.ascontiguousarray(client.x, dtype=np.float32)).to(device)
        y = torch.from_numpy(np.where(client.labeled, client.y, -1).astype(np.int64)).to(device)
        selections = int(state.config.get(SELECTIONS, 0))
        local_update(method, student, teacher, x, y, done=selections * method.local_epochs,
                     global_round=round_index + 1, shift=default_shift(method, data.input_shape),
                     generator=client_rng(method.seed, round_index, node.partition,
                                          device=device).torch)
        state.config[SELECTIONS] = selections + 1
        teachers, students = groups.arrays(teacher), groups.arrays(student)
        fsm = fsm_divergence(teachers, students)
        state.config[f"{_TRAINED}round"] = round_index
        state.arrays[f"{_TRAINED}teacher"] = flat(teachers)
        state.arrays[f"{_TRAINED}student"] = flat(students)
        reply.arrays["fsm"] = fsm
        reply.config[COMPUTE] = time.perf_counter() - start
        return reply

    def upload(self, request: Record, state: Record, node: NodeContext, reply: Record) -> Record:
        method, data = self.method, self.data(node)
        round_index = int(request.config["round"])
        if state.config.get(f"{_TRAINED}round") != round_index:
            raise ProtocolError(f"upload of round {round_index} without that round's training")
        model = build_model(method.model, input_shape=data.input_shape,
                            num_classes=data.num_classes, seed=method.seed,
                            device=method.torch_device)
        groups = layer_groups(model)
        teachers = groups.split(np.array(state.arrays[f"{_TRAINED}teacher"]))
        students = groups.split(np.array(state.arrays[f"{_TRAINED}student"]))
        chosen = select_layers(fsm_divergence(teachers, students), float(request.config["boundary"]))
        asked = group_sums.requested(request)
        if TEACHER not in asked:
            raise ProtocolError("a FedSemi upload always sums the teacher")
        vectors = {TEACHER: flat(teachers)}
        for j in range(len(groups.names)):
            name = layer_sum(j)
            if name not in asked:
                continue
            if not chosen[j]:
                raise ProtocolError(f"the server asks for layer {j}, which this client's FSM "
                                    f"did not select at the boundary")
            if asked[name] < method.min_group:
                raise ProtocolError(f"layer {j}'s sum has {asked[name]} members, fewer than "
                                    f"min_group={method.min_group}")
            vectors[name] = students[j] - teachers[j]
        reply.config[CRYPTO] = group_sums.contribute(
            reply, state, request, secure=method.secure, sum_backend=method.sum_backend,
            vectors=vectors, weight=float(len(data.client)),
            credentials=self.sum_credentials(node), policy=node.policy())
        for key in [k for k in state.arrays if k.startswith(_TRAINED)]:
            del state.arrays[key]
        del state.config[f"{_TRAINED}round"]
        return reply
