"""This machine's GMAC rate (the links' MAC) on frames of SHADE's digits-round size, best of five:
``securefl.crypto.ghash.gmac`` (the compiled VPCLMULQDQ GHASH where available) and OpenSSL's, in
GB/s, as JSON on standard output."""
import json

import numpy as np

from securefl.bench.common import best_seconds
from securefl.crypto import ghash

data = np.random.default_rng(0).integers(0, 256, size=4 << 20, dtype=np.uint8)


def rate(function) -> float:
    return data.size / best_seconds(lambda: function(bytes(16), bytes(12), [data]), repeats=5) / 1e9


print(json.dumps({"path": ghash.path(), "gmac_gbps": rate(ghash.gmac),
                  "openssl_gbps": rate(ghash._openssl_gmac), "frame_bytes": int(data.size)}))
