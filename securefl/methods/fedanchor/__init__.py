"""FedAnchor: server-side anchor labels and label contrastive loss. ``server`` holds the
method (the server half and the in-process simulation), ``client`` the client half.
``hyper`` holds the hyper-parameter dataclass (:mod:`securefl.methods.hyper`)."""
