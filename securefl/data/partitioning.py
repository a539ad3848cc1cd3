"""Seeded splits of a :class:`~securefl.data.datasets.Dataset` over federated clients.

Schemes (``scheme=``):

``iid``
    FedSemi's IID FedSSL / FedProp's i.i.d. split: every class is dealt round-robin over
    the clients (class counts differ by at most one between clients) and each labeled
    client labels ``round(labeled_fraction * n_k)`` of its points, spread over classes as
    evenly as its data allows.
``noniid-1``
    FedSemi Non-IID-I: each client holds ``classes_per_client`` classes (labeled and
    unlabeled); every class is used by the same number of clients (up to one).
``noniid-2``
    FedSemi Non-IID-II: the labeled part (``labeled_fraction`` of all data) is split as in
    Non-IID-I, the unlabeled part as in IID, so clients see all classes unlabeled.
``noniid-3``
    FedSemi Non-IID-III: IID classes, but ``rich_clients`` clients label
    ``rich_labeled_fraction`` of their data and the others ``poor_labeled_fraction``
    (paper: 10 clients 55 %, 90 clients 5 %).
``fedprop-noniid``
    FedProp's non-i.i.d. split: client ``k`` draws a class distribution
    ``p_k ~ Dirichlet(dirichlet_alpha)``, receives an equal share of the data sampled by
    ``p_k`` (limited by what is left), and labels are drawn from the client's own data in
    proportion to its class counts.
``dirichlet``
    FedAnchor's Dirichlet(α) split: for every class ``c`` proportions ``q_c ~ Dir(α·1_K)``
    split that class's samples over the clients; clients differ in size.
``fedmatch-noniid``
    FedMatch's class-imbalanced ("batch non-IID") split, which ProtoFSSL's non-i.i.d.
    columns use (protofssl.md §6 and Appendix A.1: "we follow the distribution used in
    FedMatch paper that controls the number of instances per class for each client";
    Jeong et al. 2021, their data generator): the labels are class-balanced at every
    label-holding client (``labeled_fraction`` of all data, dealt per class round-robin:
    CIFAR-10 with 100 clients and 0.1 gives 5 labels per class per client, ProtoFSSL's
    ``|D^L_{i,k}| = 5``); the unlabeled rest is split into equal shares, client ``k``
    drawing its share's class counts from ``Multinomial(n_U, p_{k mod 10})`` with FedMatch's
    ten imbalance types: ``p_t`` puts 0.50 on class ``t``, 0.15 on ``t - 1`` and ``t + 1``,
    0.02 on ``t + 5`` and 0.03 on the six others (mod 10).  Defined for 10 classes, as in
    FedMatch.  Where a class pool runs dry the shortfall is drawn from the classes with
    samples left, in proportion to ``p_t`` (FedMatch's generator would give that client
    fewer samples instead).

**Validation split.**  ``validation_fraction`` (``f``) of the training set is held out
*before* the split, class-stratified (each class contributes ``f`` of its points, leftover
points by largest remainder in a random class order), into ``Federation.validation``; no
client and no server anchor set holds these points, and the scheme then splits the
remaining ``(1 - f) N`` points exactly as it would split a dataset of that size.  One
global set, not one per client, as the papers that describe theirs do: FedProp (§5.1)
holds out "10 % of the training data" for choosing batch size and learning rate,
ProtoFSSL (§6) 3,000 of its 60,000 CIFAR-10 images; FedSemi and FedAnchor describe none.
The experiments' default is ``f = 0.1`` (:mod:`securefl.experiments.config`); this
function's default ``0.0`` leaves the split exactly as before the split existed.  The
carve draws from its own stream ``default_rng((seed, 2))``, so the validation set depends
only on the dataset, ``f`` and the seed — every method of a run is selected on the same
points, whatever its scheme or ``labels_at``.

In every scheme only ``labeled_clients`` clients (``m_L``; default all) hold labels.
``labels_at="server"`` first removes a class-balanced anchor set of ``server_labels``
samples (default: the label budget ``round(labeled_fraction * N)``) into
``Federation.server`` and leaves every client unlabeled (with ``f > 0`` the default
budget is ``round(labeled_fraction * (1 - f) N)``).  ``samples_per_client`` caps
client sizes (tiny test federations).  All randomness comes from
``numpy.random.default_rng(seed)``, and label ties from ``default_rng((seed, 1))``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from securefl.data.datasets import Dataset
from securefl.data.federation import ClientData, Federation, LabeledSet
from securefl.errors import InputError

SCHEMES = ("iid", "noniid-1", "noniid-2", "noniid-3", "fedprop-noniid", "dirichlet",
           "fedmatch-noniid")


def partition(dataset: Dataset, *, scheme: str = "iid", num_clients: int = 100, seed: int = 0,
              labeled_fraction: float = 0.1, labeled_clients: int | None = None,
              classes_per_client: int = 2, dirichlet_alpha: float = 0.5,
              rich_clients: int | None = None, rich_labeled_fraction: float = 0.55,
              poor_labeled_fraction: float = 0.05, labels_at: str = "clients",
              server_labels: int | None = None,
              samples_per_client: int | None = None,
              validation_fraction: float = 0.0) -> Federation:
    """Split ``dataset`` over ``num_clients`` clients by ``scheme`` (see module docstring)."""
    if scheme not in SCHEMES:
        raise InputError("scheme", scheme, f"must be one of {SCHEMES}")
    if not 0.0 <= validation_fraction < 1.0:
        raise InputError("validation_fraction", validation_fraction, "must lie in [0, 1)")
    num_classes = dataset.num_classes
    held_out = _validation_indices(dataset.y_train, validation_fraction, num_classes, seed)
    n_total = len(dataset.y_train) - len(held_out)
    if not isinstance(num_clients, (int, np.integer)) or not 1 <= num_clients <= n_total:
        raise InputError("num_clients", num_clients, f"must be an int in 1..{n_total}")
    if not 0.0 <= labeled_fraction <= 1.0:
        raise InputError("labeled_fraction", labeled_fraction, "must lie in [0, 1]")
    if labeled_clients is None:
        labeled_clients = num_clients
    if not 0 <= labeled_clients <= num_clients:
        raise InputError("labeled_clients", labeled_clients, f"must lie in 0..{num_clients}")
    if scheme == "fedmatch-noniid" and num_classes != len(FEDMATCH_IMBALANCE):
        raise InputError("scheme", scheme, f"FedMatch's imbalance types are defined for "
                                           f"{len(FEDMATCH_IMBALANCE)} classes, not {num_classes}")
    if scheme in ("noniid-1", "noniid-2") and not 1 <= classes_per_client <= num_classes:
        raise InputError("classes_per_client", classes_per_client,
                         f"must lie in 1..{num_classes}")
    if dirichlet_alpha <= 0:
        raise InputError("dirichlet_alpha", dirichlet_alpha, "must be > 0")
    if labels_at not in ("clients", "server"):
        raise InputError("labels_at", labels_at, "must be 'clients' or 'server'")
    if samples_per_client is not None and samples_per_client < 1:
        raise InputError("samples_per_client", samples_per_client, "must be >= 1")
    rich = num_clients // 10 if rich_clients is None else rich_clients
    if scheme == "noniid-3" and not 0 <= rich <= num_clients:
        raise InputError("rich_clients", rich_clients, f"must lie in 0..{num_clients}")
    for pname, value in (("rich_labeled_fraction", rich_labeled_fraction),
                         ("poor_labeled_fraction", poor_labeled_fraction)):
        if not 0.0 <= value <= 1.0:
            raise InputError(pname, value, "must lie in [0, 1]")

    rng = np.random.default_rng(seed)
    y = dataset.y_train
    pool = rng.permutation(len(y))
    if len(held_out):
        pool = pool[~np.isin(pool, held_out)]
    server = None
    if labels_at == "server":
        budget = round(labeled_fraction * n_total) if server_labels is None else server_labels
        if not 1 <= budget < n_total:
            raise InputError("server_labels", budget, f"must lie in 1..{n_total - 1}")
        anchor = _balanced_pick(pool, y, budget, num_classes)
        server = ClientData(dataset.x_train[anchor], y[anchor], np.ones(len(anchor), bool))
        pool = np.setdiff1d(pool, anchor)
        pool = pool[rng.permutation(len(pool))]

    holds_labels = np.zeros(num_clients, dtype=bool)
    holds_labels[rng.permutation(num_clients)[:labeled_clients]] = True
    if labels_at == "server":
        holds_labels[:] = False

    if scheme == "noniid-2":
        members, labeled = _noniid_2(pool, y, num_clients, num_classes, classes_per_client,
                                     labeled_fraction, holds_labels, samples_per_client, rng)
    elif scheme == "fedmatch-noniid":
        members, labeled = _fedmatch_noniid(pool, y, num_clients, num_classes, labeled_fraction,
                                            holds_labels, samples_per_client, rng)
    else:
        if scheme == "iid" or scheme == "noniid-3":
            members = _deal_iid(pool, y, num_clients, num_classes)
        elif scheme == "noniid-1":
            members = _deal_classes(pool, y, num_clients, num_classes, classes_per_client, rng)
        elif scheme == "fedprop-noniid":
            members = _fedprop_noniid(pool, y, num_clients, num_classes, dirichlet_alpha, rng)
        else:
            members = _dirichlet(pool, y, num_clients, num_classes, dirichlet_alpha, rng)
        if samples_per_client is not None:
            members = [_balanced_pick(m, y, min(samples_per_client, len(m)), num_classes)
                       for m in members]
        fractions = np.full(num_clients, labeled_fraction)
        if scheme == "noniid-3":
            fractions[:] = poor_labeled_fraction
            fractions[rng.permutation(num_clients)[:rich]] = rich_labeled_fraction
        labeled = []
        ties = np.random.default_rng((seed, 1))  # its own stream: rng's draws stay as they were
        for k, idx in enumerate(members):
            count = round(fractions[k] * len(idx)) if holds_labels[k] else 0
            labeled.append(_proportional_pick(idx, y, count, num_classes, ties))

    clients = []
    for idx, lab in zip(members, labeled):
        order = np.sort(idx)
        clients.append(ClientData(dataset.x_train[order], y[order], np.isin(order, lab)))
    info = {"scheme": scheme, "seed": seed, "labeled_fraction": labeled_fraction,
            "labeled_clients": int(holds_labels.sum()), "labels_at": labels_at,
            "validation_fraction": validation_fraction, "validation_size": len(held_out)}
    validation = (LabeledSet(dataset.x_train[held_out], y[held_out]) if len(held_out)
                  else None)
    return Federation(dataset.name, clients, num_classes, dataset.input_shape,
                      test=LabeledSet(dataset.x_test, dataset.y_test), validation=validation,
                      server=server, info=info)


def _validation_indices(y: np.ndarray, fraction: float, num_classes: int,
                        seed: int) -> np.ndarray:
    """The sorted indices of the class-stratified validation set (``round(fraction * N)``
    points), drawn from the stream ``default_rng((seed, 2))``."""
    count = round(fraction * len(y))
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    if count >= len(y):
        raise InputError("validation_fraction", fraction, "leaves no training data")
    carve = np.random.default_rng((seed, 2))
    return np.sort(_proportional_pick(carve.permutation(len(y)), y, count, num_classes, carve))


def _by_class(indices: np.ndarray, y: np.ndarray, num_classes: int) -> list[np.ndarray]:
    labels = y[indices]
    return [indices[labels == c] for c in range(num_classes)]


def _even_counts(total: int, sizes: np.ndarray) -> np.ndarray:
    """Split ``total`` as evenly as possible over bins with capacities ``sizes``."""
    counts = np.zeros(len(sizes), dtype=np.int64)
    remaining = min(total, int(sizes.sum()))
    while remaining > 0:
        open_bins = np.flatnonzero(counts < sizes)
        share = max(1, remaining // len(open_bins))
        for b in open_bins[np.argsort(counts[open_bins], kind="stable")]:
            add = min(share, sizes[b] - counts[b], remaining)
            counts[b] += add
            remaining -= add
            if remaining == 0:
                break
    return counts


def _balanced_pick(indices: np.ndarray, y: np.ndarray, count: int,
                   num_classes: int) -> np.ndarray:
    """``count`` of ``indices`` spread over classes as evenly as availability allows."""
    groups = _by_class(indices, y, num_classes)
    counts = _even_counts(count, np.array([len(g) for g in groups]))
    return np.concatenate([g[:c] for g, c in zip(groups, counts)]).astype(np.int64)


def _proportional_pick(indices: np.ndarray, y: np.ndarray, count: int,
                       num_classes: int, ties: np.random.Generator) -> np.ndarray:
    """``count`` of ``indices`` with class counts proportional to the client's own
    class counts (largest remainder), so labels follow the client's distribution.

    Equal remainders are ranked in a random class order drawn from ``ties``: ranking them
    by class index would hand every client's leftover labels to the same low-index
    classes (on IID digits with 10 % labels: two labels for classes 0-6 and one for
    7-9 at every client, half the label budget for three classes)."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    groups = _by_class(indices, y, num_classes)
    sizes = np.array([len(g) for g in groups], dtype=np.float64)
    exact = count * sizes / sizes.sum()
    counts = np.floor(exact).astype(np.int64)
    extra = count - counts.sum()
    order = ties.permutation(num_classes)
    counts[order[np.argsort(-(exact - counts)[order], kind="stable")[:extra]]] += 1
    return np.concatenate([g[:c] for g, c in zip(groups, counts)]).astype(np.int64)


def _deal_iid(pool: np.ndarray, y: np.ndarray, num_clients: int,
              num_classes: int) -> list[np.ndarray]:
    """Deal each class round-robin, continuing where the previous class stopped, so that
    client sizes and per-class counts differ by at most one."""
    members: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    offset = 0
    for group in _by_class(pool, y, num_classes):
        for k in range(num_clients):
            members[(k + offset) % num_clients].append(group[k::num_clients])
        offset = (offset + len(group)) % num_clients
    return [np.concatenate(m) for m in members]


def _class_assignment(num_clients: int, num_classes: int, per_client: int,
                      rng: np.random.Generator) -> np.ndarray:
    """``(K, per_client)`` distinct classes per client; each client takes the
    ``per_client`` least-used classes so far (random tie-break), so the number of clients
    per class differs by at most one."""
    usage = np.zeros(num_classes, dtype=np.int64)
    rows = []
    for _ in range(num_clients):
        order = np.lexsort((rng.random(num_classes), usage))
        chosen = np.sort(order[:per_client])
        usage[chosen] += 1
        rows.append(chosen)
    return np.stack(rows)


def _deal_classes(pool: np.ndarray, y: np.ndarray, num_clients: int, num_classes: int,
                  per_client: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Non-IID-I: split each class evenly over the clients that hold it (classes no
    client holds, possible when K * per_client < C, stay unused)."""
    classes = _class_assignment(num_clients, num_classes, per_client, rng)
    members: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, group in enumerate(_by_class(pool, y, num_classes)):
        holders = np.flatnonzero((classes == c).any(axis=1))
        if len(holders) == 0:
            continue
        for part, k in zip(np.array_split(group, len(holders)), holders):
            members[k].append(part)
    return [np.concatenate(m) if m else np.zeros(0, np.int64) for m in members]


def _noniid_2(pool: np.ndarray, y: np.ndarray, num_clients: int, num_classes: int,
              per_client: int, labeled_fraction: float, holds_labels: np.ndarray,
              samples_per_client: int | None,
              rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Non-IID-II: labeled pool split by classes (only over label-holding clients),
    unlabeled pool split IID over all clients."""
    n_labeled = round(labeled_fraction * len(pool))
    if samples_per_client is not None:
        n_labeled = min(n_labeled, round(labeled_fraction * samples_per_client * num_clients))
    holders = np.flatnonzero(holds_labels)
    labeled_pool, unlabeled_pool = pool[:n_labeled], pool[n_labeled:]
    labeled = [np.zeros(0, np.int64) for _ in range(num_clients)]
    if len(holders):
        for k, part in zip(holders, _deal_classes(labeled_pool, y, len(holders), num_classes,
                                                  per_client, rng)):
            labeled[k] = part
    unlabeled = _deal_iid(unlabeled_pool, y, num_clients, num_classes)
    if samples_per_client is not None:
        unlabeled = [_balanced_pick(u, y, max(0, min(samples_per_client - len(lab), len(u))),
                                    num_classes) for u, lab in zip(unlabeled, labeled)]
    members = [np.concatenate([lab, unl]) for lab, unl in zip(labeled, unlabeled)]
    return members, labeled


def _fedprop_noniid(pool: np.ndarray, y: np.ndarray, num_clients: int, num_classes: int,
                    alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Equal-size clients whose data follow their own class distribution p_k ~ Dir(alpha),
    as far as the remaining class pools allow."""
    return _by_distributions(pool, y, num_classes, len(pool) // num_clients,
                             (rng.dirichlet(np.full(num_classes, alpha)) for _ in range(num_clients)),
                             rng)


def _by_distributions(pool: np.ndarray, y: np.ndarray, num_classes: int, size: int,
                      distributions: Iterable[np.ndarray],
                      rng: np.random.Generator) -> list[np.ndarray]:
    """One client of ``size`` samples per class distribution ``p`` (drawn lazily, in
    order): class counts ``~ Multinomial(size, p)`` capped by what is left of each class,
    the shortfall drawn from classes with samples left in proportion to ``p``."""
    groups = [list(g) for g in _by_class(pool, y, num_classes)]
    left = np.array([len(g) for g in groups], dtype=np.int64)
    members = []
    for p in distributions:
        want = np.minimum(rng.multinomial(size, p), left)
        short = size - int(want.sum())
        while short > 0:
            spare = left - want
            open_classes = np.flatnonzero(spare > 0)
            weights = p[open_classes] + 1e-12
            c = open_classes[rng.choice(len(open_classes), p=weights / weights.sum())]
            take = min(short, int(spare[c]))
            want[c] += take
            short -= take
        taken = []
        for c in range(num_classes):
            taken.extend(groups[c][left[c] - want[c]: left[c]])
            left[c] -= want[c]
        members.append(np.array(taken, dtype=np.int64))
    return members


# FedMatch's ten class-imbalance types (Jeong et al. 2021, data generator): row t is
# p_t, 0.50 on class t, 0.15 on t -/+ 1, 0.02 on t + 5, 0.03 elsewhere.
FEDMATCH_IMBALANCE = np.array([
    [0.50 if c == t else 0.15 if (c - t) % 10 in (1, 9) else 0.02 if (c - t) % 10 == 5 else 0.03
     for c in range(10)]
    for t in range(10)])


def _fedmatch_noniid(pool: np.ndarray, y: np.ndarray, num_clients: int, num_classes: int,
                     labeled_fraction: float, holds_labels: np.ndarray,
                     samples_per_client: int | None,
                     rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """FedMatch's batch non-IID: class-balanced labels at the label holders, unlabeled
    shares of equal size with client k's classes drawn from ``FEDMATCH_IMBALANCE[k % 10]``."""
    holders = np.flatnonzero(holds_labels)
    n_labeled = round(labeled_fraction * len(pool)) if len(holders) else 0
    if samples_per_client is not None:
        n_labeled = min(n_labeled, round(labeled_fraction * samples_per_client * len(holders)))
    labeled_pool = _balanced_pick(pool, y, n_labeled, num_classes)
    labeled = [np.zeros(0, np.int64) for _ in range(num_clients)]
    if len(holders):
        for k, part in zip(holders, _deal_iid(labeled_pool, y, len(holders), num_classes)):
            labeled[k] = part
    unlabeled_pool = pool[~np.isin(pool, labeled_pool)]
    size = len(unlabeled_pool) // num_clients
    if samples_per_client is not None:
        size = max(0, min(size, samples_per_client - max(len(lab) for lab in labeled)))
    unlabeled = _by_distributions(unlabeled_pool, y, num_classes, size,
                                  (FEDMATCH_IMBALANCE[k % num_classes] for k in range(num_clients)),
                                  rng)
    members = [np.concatenate([lab, unl]) for lab, unl in zip(labeled, unlabeled)]
    return members, labeled


def _dirichlet(pool: np.ndarray, y: np.ndarray, num_clients: int, num_classes: int,
               alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Split each class over clients by proportions q_c ~ Dir(alpha * 1_K); redrawn (up
    to 100 times) until no client is empty."""
    for _ in range(100):
        members: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for group in _by_class(pool, y, num_classes):
            q = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(q)[:-1] * len(group)).astype(np.int64)
            for k, part in enumerate(np.split(group, cuts)):
                members[k].append(part)
        result = [np.concatenate(m) for m in members]
        if min(len(m) for m in result) > 0:
            return result
    raise InputError("dirichlet_alpha", alpha, f"leaves a client empty for {num_clients} "
                                               "clients in 100 draws; raise alpha")
