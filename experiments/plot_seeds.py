"""Plot and tabulate final accuracy over several seeded runs of one config.

    python experiments/plot_seeds.py experiments/results/digits-seeds/seed*/ --out experiments/results/digits-seeds/seeds.png

Prints a markdown table (one row per method: final accuracy per seed, the mean, and on how
many seeds the method beat ``--baseline``) and writes the plot of
:func:`securefl.experiments.plots.plot_seeds`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from securefl.experiments.plots import final_accuracies, plot_seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run folders holding results.json")
    parser.add_argument("--out", type=Path, required=True, help="PNG to write")
    parser.add_argument("--baseline", default="fedavg-labeled")
    args = parser.parse_args()
    documents = [json.loads((folder / "results.json").read_text()) for folder in args.folders]
    seeds = [d["seed"] for d in documents]
    finals = final_accuracies(documents)
    base = finals.get(args.baseline, {})
    print("| method | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | beats baseline |")
    print("|---|" + "---|" * (len(seeds) + 2))
    for method, by_seed in finals.items():
        wins = "–" if method == args.baseline else f"{sum(by_seed[s] > base.get(s, 100) for s in seeds)} of {len(seeds)}"
        cells = " | ".join(f"{by_seed[s]:.2f}" for s in seeds)
        print(f"| {method} | {cells} | {sum(by_seed.values()) / len(by_seed):.2f} | {wins} |")
    plot_seeds(documents, args.out, baseline=args.baseline)


if __name__ == "__main__":
    main()
