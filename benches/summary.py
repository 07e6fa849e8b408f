"""``make bench``'s last step: ``results/latest.md`` and ``results/ratios.png`` from the
``results/*.json`` each benchmark writes (``bench_common.write_ratios``).

Every ratio is "pgwire_cdc versus the baseline run in the same script", higher is better:
the decoder against pypgoutput (``report.py``), the live stream and snapshot against
pg_recvlogical, psycopg2 + pypgoutput and ADBC (``live.py``), the Spark hand-off against
the pandas path (``spark.py``), the Delta Lake sink against the Parquet mirror
(``delta_lake.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SOURCES = {
    "decode": "decode.md",
    "live": "live.md",
    "spark": "spark.md",
    "delta": "delta.md",
}


def main() -> None:
    runs = {
        name: json.loads((RESULTS / f"{name}.json").read_text())
        for name in SOURCES
        if (RESULTS / f"{name}.json").exists()
    }
    lines = [
        "# Benchmark summary (`make bench`)",
        "",
        "Ratios of pgwire_cdc against the baseline measured in the same script (higher is "
        "better). Details: "
        + ", ".join(f"[{f}]({f})" for n, f in SOURCES.items() if n in runs)
        + ".",
        "",
        "| benchmark | ratio | measured | machine |",
        "|---|---:|---|---|",
    ]
    labels: list[str] = []
    values: list[float] = []
    for run in runs.values():
        for label, ratio in run["ratios"].items():
            lines.append(f"| {label} | {ratio:.2f}x | {run['date']} | {run['machine']} |")
            labels.append(label)
            values.append(ratio)
    figures = [(label, v) for run in runs.values() for label, v in run["figures"].items()]
    if figures:
        lines += ["", "| figure | value |", "|---|---:|"]
        lines += [f"| {label} | {v:,.0f} |" for label, v in figures]
    lines += ["", "![ratios](ratios.png)", ""]
    (RESULTS / "latest.md").write_text("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.45 * len(labels) + 1.2))
    ax.barh(labels[::-1], values[::-1], color="#3b7dd8")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("pgwire_cdc vs baseline (x, log scale; 1 = parity)")
    for y, v in enumerate(values[::-1]):
        ax.text(v, y, f" {v:.1f}x", va="center", fontsize=8)
    ax.set_title("pgwire_cdc benchmark ratios")
    fig.tight_layout()
    fig.savefig(RESULTS / "ratios.png", dpi=110)
    print((RESULTS / "latest.md").read_text())


if __name__ == "__main__":
    main()
