"""Summarise run.sh's records: each digits-round run's steady round (median CPU seconds of rounds
3-10) against its floor (``seconds_lower_bound``; for SHADE also its links' GMAC, every byte its
clients send tagged by the sender and checked by the receiver, at ``ghash.json``'s rate), and
FedProp's digits default: the crypto a round may take for real <= 2x plaintext, against each
backend's floor and steady round; draw ``floors.png``."""
import json
import statistics
from pathlib import Path

here = Path(__file__).resolve().parent


def steady(record: dict) -> float:
    return statistics.median(r["cpu_seconds"] for r in record["later_rounds"][1:])


gmac_gbps = json.loads((here / "ghash.json").read_text())["gmac_gbps"]
print(f"GMAC {gmac_gbps:.1f} GB/s")
runs, macs = {}, []
for path in sorted((here / "digits").glob("*.json")):
    d = json.loads(path.read_text())
    runs.setdefault(d["backend"], []).append((steady(d), d["seconds_lower_bound"], d["lower_bound_parts"]))
    if d["backend"] == "shade":
        macs.append(2 * d["bytes_clients_sent"] / (gmac_gbps * 1e9))
        print(f"{path.stem:8s} links' GMAC {macs[-1]:.3f} s: AES + GMAC {d['seconds_lower_bound'] + macs[-1]:.3f} s")
    print(f"{path.stem:8s} steady {steady(d):.3f} CPU-s  floor {d['seconds_lower_bound']:.3f} s  "
          f"{steady(d) / d['seconds_lower_bound']:.2f}x  parts {d['lower_bound_parts']}  verified {d['verified']}")
budgets = {}
for path in sorted((here / "fedprop").glob("*.json")):
    d = json.loads(path.read_text())
    real, plain = d["methods"][0], d["methods"][1]
    rounds = real["rounds_completed"]
    budget = (2 * plain["seconds"] - (real["seconds"] - real["crypto_seconds"])) / rounds
    budgets[path.stem] = budget
    late = statistics.median(real["crypto_seconds_by_round"][10:])
    print(f"fedprop {path.stem:8s} real {real['seconds']:5.1f} s  plaintext {plain['seconds']:5.1f} s  "
          f"ratio {real['seconds'] / plain['seconds']:.2f}x  crypto {real['crypto_seconds']:5.1f} s "
          f"(rounds 11-{rounds}: median {late:.3f} s)  2x allows {budget:.3f} s of crypto a round")


def plot(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 5.0))
    for x, backend in enumerate(("shade", "rlwe")):
        values = runs.get(backend, [])
        floor = statistics.median(f for _, f, _ in values)
        axes.bar(x - 0.2, floor, width=0.4, color="tab:gray",
                 label="floor (AES / GEMM + FFT at this run's rates)" if x == 0 else None)
        if backend == "shade":
            axes.bar(x - 0.2, statistics.median(macs), bottom=floor, width=0.4, color="silver",
                     label="+ the links' GMAC at this sitting's GHASH rate")
        axes.bar(x + 0.2, statistics.median(s for s, _, _ in values), width=0.4, color="tab:blue",
                 label="steady round, median of 3 runs" if x == 0 else None)
        axes.scatter([x + 0.2] * len(values), [s for s, _, _ in values], color="black", s=8, zorder=3)
    for backend, color, name in (("rlwe", "tab:red", "ring-LWE"), ("shade", "tab:orange", "SHADE")):
        values = [b for tag, b in budgets.items() if tag.startswith(backend)]
        if values:
            axes.axhline(statistics.median(values), linestyle="--", linewidth=1, color=color,
                         label=f"FedProp's 2x: crypto a round may take, with {name}")
    axes.set_xticks([0, 1], ["SHADE", "ring-LWE"])
    axes.set_ylabel("CPU seconds per digits round")
    axes.set_title("Digits round (5 x 135 points, L = 1024): floors and the 2x budget")
    axes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


plot(here / "floors.png")
