"""FedSemi (Π, MT and D variants). ``server`` holds the methods (the server half and the
in-process simulation), ``client`` the client halves that run on the nodes. ``hyper``
holds the hyper-parameter dataclass (:mod:`securefl.methods.hyper`)."""
