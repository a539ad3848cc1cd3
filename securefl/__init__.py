"""securefl: privacy-preserving federated semi-supervised learning with real cryptography.

Rooms (each imports only from rooms above it):

- :mod:`securefl.crypto`     primitives (PRG, metered channel, OT, SHADE, Shamir, SecAgg, DP)
- :mod:`securefl.protocols`  primitives wired into FSSL steps (LSH, label propagation,
  CrossClientLP, prototype sharing)
- :mod:`securefl.fl`         federated simulation engine
- :mod:`securefl.methods`    FedProp, ProtoFSSL, FedSemi, FedAnchor and baselines
- :mod:`securefl.models`     backbones split into feature extractor and head
- :mod:`securefl.data`       datasets and partitions
- :mod:`securefl.experiments` configs, runner, results, tables and plots
"""

__version__ = "0.1.0"
