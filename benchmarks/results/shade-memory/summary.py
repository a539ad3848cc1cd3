"""Summarise run.sh's records: steady round (median of rounds 3.. of each run) over the AES floor."""
import json
import statistics
from pathlib import Path

here = Path(__file__).resolve().parent
for shape in ("digits", "n1000", "cifar", "n5000"):
    for path in sorted((here / shape).glob("*.json")):
        d = json.loads(path.read_text())
        floor = d["seconds_lower_bound"]
        later = [r["cpu_seconds"] for r in d["later_rounds"]][1:] or [r["cpu_seconds"] for r in d["later_rounds"]]
        steady = statistics.median(later) if later else d["cpu_seconds"]
        print(f"{shape:7s} {path.stem:8s} first {d['cpu_seconds']:7.2f}  steady {steady:6.3f} CPU-s "
              f"{steady / floor:5.2f}x floor ({floor:.3f} s)  retained {d['machine'].get('retains_freed_memory')}  "
              f"bytes {d['bytes_clients_sent']:,}  verified {d['verified']}  peak {d.get('peak_memory_mb')} MB")
