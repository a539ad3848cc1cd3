"""This machine's GMAC rate (the links' MAC) on frames of SHADE's digits-round size, best of five:
``securefl.crypto.ghash.gmac`` (the compiled VPCLMULQDQ GHASH where available) and OpenSSL's, in
GB/s, as JSON on standard output."""
import json
import time

import numpy as np

from securefl.crypto import ghash

data = np.random.default_rng(0).integers(0, 256, size=4 << 20, dtype=np.uint8)


def rate(function) -> float:
    function(bytes(16), bytes(12), [data])
    best = min(_timed(function) for _ in range(5))
    return data.size / best / 1e9


def _timed(function) -> float:
    tick = time.perf_counter()
    function(bytes(16), bytes(12), [data])
    return time.perf_counter() - tick


print(json.dumps({"path": ghash.path(), "gmac_gbps": rate(ghash.gmac),
                  "openssl_gbps": rate(ghash._openssl_gmac), "frame_bytes": int(data.size)}))
