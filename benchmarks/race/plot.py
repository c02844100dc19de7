"""The race's picture: both trainers' held-out accuracy over the wall clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(summary: dict[str, Any], path: Path) -> None:
    """Both trainers' held-out accuracy over minutes (mean ± SE over seeds), one panel a dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summary), figsize=(5 * len(summary), 3.6), squeeze=False)
    for ax, (dataset, found) in zip(axes[0], summary.items(), strict=True):
        for trainer, data in found["trainers"].items():
            minutes = [float(m) for m in data["accuracy"]]
            mean = [v["mean"] for v in data["accuracy"].values()]
            se = [v["se"] for v in data["accuracy"].values()]
            ax.plot(minutes, mean, marker="o", label=f"{trainer} (lr {data['lr']:g})")
            ax.fill_between(
                minutes,
                [m - s for m, s in zip(mean, se, strict=True)],
                [m + s for m, s in zip(mean, se, strict=True)],
                alpha=0.2,
            )
        ax.set_title(dataset)
        ax.set_xlabel("training wall clock (min)")
        ax.set_ylabel("held-out accuracy (greedy)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
