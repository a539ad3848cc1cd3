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


def plot(path: Path) -> None:
    """``steady.png``: each run's steady round over its AES floor, by shape and code (the
    goal's 2x as a line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = [("digits", "digits 5 × 135\nL = 1024"), ("digits2", "digits, 2nd sitting"),
              ("n1000", "2 × 500\nL = 4096"), ("cifar", "5 × 500\nL = 4096"), ("n5000", "2 × 2500\nL = 4096")]
    codes = [("old", "f3b96f8 (before)", "#999999"), ("nocl", "new, OpenSSL's GHASH", "#6baed6"),
             ("new", "new", "#08519c")]
    figure, axes = plt.subplots(figsize=(8, 3.6))
    for s, (shape, _) in enumerate(shapes):
        for c, (code, label, colour) in enumerate(codes):
            values = []
            for run in sorted((here / shape).glob(f"{code}-*.json")):
                d = json.loads(run.read_text())
                later = [r["cpu_seconds"] for r in d["later_rounds"]][1:] or [r["cpu_seconds"] for r in d["later_rounds"]]
                values.append((statistics.median(later) if later else d["cpu_seconds"]) / d["seconds_lower_bound"])
            x = [s + (c - 1) * 0.27] * len(values)
            axes.scatter(x, values, color=colour, label=label if s == 0 else None, zorder=3)
    axes.axhline(2.0, color="black", linewidth=1, linestyle="--", label="goal: 2x the AES floor")
    axes.set_xticks(range(len(shapes)), [name for _, name in shapes])
    axes.set_ylabel("steady round / AES floor")
    axes.set_title("SHADE's steady round over its AES floor (AMD EPYC, one process per run)")
    axes.legend(fontsize=8, loc="lower left")
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


plot(here / "steady.png")
