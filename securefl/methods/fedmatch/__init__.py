"""FedMatch (Jeong et al. 2021): inter-client consistency through helper models. ``server``
holds the method (the server half and the in-process simulation), ``client`` the client
half. ``hyper`` holds the hyper-parameter dataclass (:mod:`securefl.methods.hyper`)."""
