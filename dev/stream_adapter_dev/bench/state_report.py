"""`bench --state`'s outputs: the summary table, state.json and state.png (times and memory
by table size)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson

from stream_adapter_dev.bench.state import StateResults


def print_state(results: StateResults, say: Callable[[str], None] = print) -> None:
    """The summary as a plain table: medians, with min-max where there is more than one run."""

    def cell(values: list[float], digits: int = 1) -> str:
        median, low, high = values
        text = f"{median:.{digits}f}"
        return text if low == high else f"{text} ({low:.{digits}f}-{high:.{digits}f})"

    say(
        f"{'guarantee':<14} {'records':>9} {'runs':>4}  {'fresh answer s':<20} "
        f"{'failover s':<20} {'net of timeout s':<18} {'restored':>9} "
        f"{'RSS MB':>7} {'disk MB':>8}"
    )
    for row in results.summary():
        say(
            f"{row['guarantee']:<14} {row['records']:>9,} {row['runs']:>4}  "
            f"{cell(row['fresh_answer_s']):<20} {cell(row['failover_s']):<20} "
            f"{cell(row['failover_net_s']):<18} {row['failover_restored'][0]:>9.0f} "
            f"{row['fresh_rss_mb'][0]:>7.0f} {row['fresh_disk_mb'][0]:>8.0f}"
        )


def write_state(results: StateResults, out: Path) -> tuple[Path, Path]:
    """state.json and state.png in out."""
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "state.json"
    json_path.write_text(orjson.dumps(results.to_json(), option=orjson.OPT_INDENT_2).decode())
    png_path = out / "state.png"
    _draw(results, png_path)
    return json_path, png_path


def _draw(results: StateResults, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    rows = results.summary()
    for guarantee in sorted({row["guarantee"] for row in rows}):
        mine = [row for row in rows if row["guarantee"] == guarantee]
        sizes = [row["records"] for row in mine]
        for name, label, style in (
            ("fresh_answer_s", "fresh worker answers", "o-"),
            ("failover_net_s", "failover, net of session timeout", "s--"),
        ):
            medians = [row[name][0] for row in mine]
            errors = [
                [row[name][0] - row[name][1] for row in mine],
                [row[name][2] - row[name][0] for row in mine],
            ]
            left.errorbar(
                sizes, medians, yerr=errors, fmt=style, capsize=3, label=f"{label} ({guarantee})"
            )
        right.plot(
            sizes,
            [row["fresh_rss_mb"][0] for row in mine],
            "o-",
            label=f"RSS, fresh worker ({guarantee})",
        )
        right.plot(
            sizes,
            [row["fresh_disk_mb"][0] for row in mine],
            "s--",
            label=f"RocksDB folder ({guarantee})",
        )
    left.set_xscale("log")
    left.set_xlabel("approval records in the table")
    left.set_ylabel("seconds (median, min-max)")
    left.set_title("Time to answer")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    right.set_xscale("log")
    right.set_xlabel("approval records in the table")
    right.set_ylabel("MB")
    right.set_title("Worker memory and disk")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
