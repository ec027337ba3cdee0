"""Figures and tables next to the logs: PNG files written atomically, and the same to W&B when a run logs there.

matplotlib (the ``interpret``/``attribution`` extras) and wandb are imported only when a figure is made or logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L

from trustlit.paths import atomic_path


def new_figure(**subplots: Any) -> tuple[Any, Any]:
    """A matplotlib ``(figure, axes)`` on the file-only Agg backend (no display needed, safe under SLURM)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(**subplots)


def save_png(figure: Any, path: Path) -> Path:
    """Write ``figure`` to ``path`` atomically (a reader never sees half a PNG) and close it."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    with atomic_path(path) as temporary:
        figure.savefig(temporary, format="png", dpi=120)
    plt.close(figure)
    return path


def wandb_loggers(trainer: L.Trainer) -> list[Any]:
    """The trainer's ``WandbLogger`` instances (none when it logs elsewhere or nowhere)."""
    from lightning.pytorch.loggers import WandbLogger

    return [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]


def log_to_wandb(
    trainer: L.Trainer,
    key: str,
    *,
    header: Sequence[str] | None = None,
    rows: Sequence[Sequence[Any]] = (),
    images: Sequence[Path] = (),
) -> None:
    """Log a table (``key/table``) and PNG images (``key/<file stem>``) to every ``WandbLogger`` of ``trainer``."""
    loggers = wandb_loggers(trainer)
    if not loggers:
        return
    import wandb

    payload: dict[str, Any] = {f"{key}/{Path(image).stem}": wandb.Image(str(image)) for image in images}
    if header is not None:
        payload[f"{key}/table"] = wandb.Table(columns=list(header), data=[list(row) for row in rows])
    for logger in loggers:
        logger.experiment.log(payload)


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table on stdout, full width when stdout is a file (a SLURM log) so no column is cut."""
    from rich.console import Console
    from rich.table import Table

    from trustlit.callbacks import FILE_WIDTH

    table = Table(title=title)
    for column in header:
        table.add_column(str(column))
    for row in rows:
        table.add_row(*(f"{cell:.4g}" if isinstance(cell, float) else str(cell) for cell in row))
    console = Console()
    if not console.is_terminal:
        console.width = FILE_WIDTH
    console.print(table)
