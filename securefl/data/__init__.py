"""securefl.data: datasets and their federated partitions.

Public API::

    load_dataset(name, data_dir=None, *, verify=True) -> Dataset
        name in DATASET_NAMES ("digits", "mnist", "fashion-mnist", "cifar10", "cifar100",
        "svhn", "stl10") or a path; Dataset(name, x_train, y_train, x_test, y_test, num_classes)
        with images (n, C, H, W) float32 in [0, 1], labels int64; .input_shape.
    partition(dataset, *, scheme, num_clients, seed, labeled_fraction, labeled_clients,
              classes_per_client, dirichlet_alpha, rich_clients, rich_labeled_fraction,
              poor_labeled_fraction, labels_at, server_labels, samples_per_client,
              validation_fraction)
        -> Federation (clients: list[ClientData(x, y, labeled)], num_classes, input_shape,
        test: LabeledSet(x, y), validation: LabeledSet carved from the training data
        (class-stratified, before the split) or None, server anchor set or None, info);
        Federation.for_training() is the view without test and validation that methods get.
    read_idx, load_idx_directory, load_cifar, load_svhn, load_stl10: the individual readers.
"""

from securefl.data.datasets import (
    DATASET_NAMES,
    KNOWN_MD5,
    Dataset,
    data_root,
    load_cifar,
    load_dataset,
    load_idx_directory,
    load_stl10,
    load_svhn,
    read_idx,
)
from securefl.data.federation import ClientData, Federation, LabeledSet
from securefl.data.partitioning import SCHEMES, partition

__all__ = [
    "DATASET_NAMES", "KNOWN_MD5", "SCHEMES", "ClientData", "Dataset", "Federation", "LabeledSet",
    "data_root", "load_cifar", "load_dataset", "load_idx_directory", "load_stl10", "load_svhn",
    "partition",
    "read_idx",
]
