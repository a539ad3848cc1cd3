"""CrossClientLP, FedProp Algorithm 3, written once.

- :mod:`~securefl.protocols.crossclient.parties`: the parties' math (client state, server),
  the stages of :class:`Dropouts`, who learns what;
- :mod:`~securefl.protocols.crossclient.client_steps`: the client's step table over a
  transport (:class:`~securefl.protocols.crossclient.client_steps.CrossClientSteps`, and
  :class:`~securefl.protocols.crossclient.client_steps.FeatureClient` for nodes holding
  features);
- :mod:`~securefl.protocols.crossclient.server_round`: the server's round as engine steps;
- :mod:`~securefl.protocols.crossclient.simulate`: :func:`cross_client_lp`, that round on
  the in-process transport;
- :mod:`~securefl.protocols.crossclient.ideal`: :func:`ideal_cross_client_lp`, the
  function the protocol computes (the tests' reference).
"""

from __future__ import annotations

from securefl.protocols.crossclient.ideal import IdealCrossClientLP, ideal_cross_client_lp
from securefl.protocols.crossclient.parties import (
    BACKENDS,
    HAMMING_BACKENDS,
    TAG_COLUMNS,
    TAG_ROWS,
    TAG_S_L,
    CrossClientLPClient,
    CrossClientLPServer,
    Dropouts,
)
from securefl.protocols.crossclient.simulate import CrossClientLPResult, cross_client_lp

__all__ = [
    "BACKENDS",
    "HAMMING_BACKENDS",
    "TAG_COLUMNS",
    "TAG_ROWS",
    "TAG_S_L",
    "CrossClientLPClient",
    "CrossClientLPResult",
    "CrossClientLPServer",
    "Dropouts",
    "IdealCrossClientLP",
    "cross_client_lp",
    "ideal_cross_client_lp",
]
