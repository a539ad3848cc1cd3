"""FedProp: cross-client label propagation. ``server`` holds FedProp and FedProp-MT (the
server half and the in-process simulation), ``client`` the client half (the protocol's
CrossClientLP steps, :mod:`securefl.protocols.crossclient.client_steps`, on FedProp's
embedding, then ClientUpdate). ``hyper`` holds the hyper-parameter dataclass
(:mod:`securefl.methods.hyper`)."""
