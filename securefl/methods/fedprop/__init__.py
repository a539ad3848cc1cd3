"""FedProp: cross-client label propagation.  ``server`` holds FedProp and FedProp-MT (the
server half and the in-process simulation), ``client`` the client half (FedProp's client
step table), ``round`` the CrossClientLP server round as engine steps (:mod:`securefl.runtime.engine`)."""
