"""Summarise run.sh's records: each bench run's steady round (median of its rounds 3.., or its
one round) in CPU seconds, SHADE's over its AES floor, bytes the clients sent; then FedProp's
real/plaintext ratios."""
import json
import statistics
from pathlib import Path

here = Path(__file__).resolve().parent
for shape in ("digits", "digits2", "n1000", "cifar", "n5000"):
    for path in sorted((here / shape).glob("*.json")):
        d = json.loads(path.read_text())
        later = [r["cpu_seconds"] for r in d["later_rounds"]][1:] or [r["cpu_seconds"] for r in d["later_rounds"]]
        steady = statistics.median(later) if later else d["cpu_seconds"]
        floor = d.get("seconds_lower_bound") or 0.0
        over = f"{steady / floor:5.2f}x floor ({floor:.3f} s)" if floor else " " * 24
        print(f"{shape:7s} {path.stem:8s} first {d['cpu_seconds']:7.2f}  steady {steady:7.3f} CPU-s {over}  "
              f"ghash {d.get('ghash')}  bytes {d['bytes_clients_sent']:,}  verified {d['verified']}")
for path in sorted((here / "fedprop").glob("*.json")):
    c = json.loads(path.read_text())["comparison"][0]
    print(f"fedprop {path.stem:12s} real {c['seconds_real']:5.1f} s  plaintext {c['seconds_plaintext']:5.1f} s  "
          f"ratio {c['time_ratio']:.2f}x  crypto {c['crypto_seconds_real']:5.1f} s  "
          f"{c['bytes_per_client_per_round_real'] / 1e6:5.1f} MB per client and round  "
          f"identical {c['pseudo_labels_identical']}")
