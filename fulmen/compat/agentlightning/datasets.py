"""0.x datasets as fulmen task lists: anything indexable, values made native JSON.

0.x passed a dataset's items to the agent as they were; 0.x scripts read them from parquet with
``pd.read_parquet(...).to_dict("records")``, whose list columns are numpy arrays and whose
numbers are numpy scalars. fulmen stores every task as JSON, so ``task_list`` turns numpy
arrays into lists and numpy scalars into Python numbers (what the agent then receives), and
refuses, naming the place, a value JSON cannot hold: a NaN (pandas' missing value), an
infinity or an object of another type.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["native", "task_list"]


def native(value: Any, where: str) -> Any:
    """Return ``value`` with numpy arrays and scalars made native (``where`` names it in errors).

    Raises:
        ValueError: a non-finite number, or a value of a type JSON cannot hold.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(
                f"{where} is {value}, which a task cannot hold (fulmen stores tasks as JSON; "
                "pandas marks missing values NaN: fill or drop them, e.g. df.fillna(...))"
            )
        return value
    if isinstance(value, dict):
        return {
            str(native(k, f"{where} key")): native(v, f"{where}[{k!r}]")
            for k, v in value.items()  # pyright: ignore[reportUnknownVariableType]
        }
    if isinstance(value, list | tuple):
        return [native(v, f"{where}[{i}]") for i, v in enumerate(value)]  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and hasattr(value, "dtype"):  # a numpy array or scalar
        return native(tolist(), where)
    raise ValueError(
        f"{where} is a {type(value).__name__}, which a task cannot hold (fulmen stores tasks "
        "as JSON: strings, numbers, booleans, None, lists and dicts)"
    )


def task_list(dataset: Any, name: str) -> list[Any] | None:
    """Return a 0.x dataset (indexable with a length) as a list of native tasks.

    ``name`` (``train_dataset``) names the dataset in errors. ``None`` stays ``None``.
    """
    if dataset is None:
        return None
    if isinstance(dataset, str | bytes):
        raise TypeError(f"{name} must be a dataset (a list of tasks), not a string")
    return [native(dataset[i], f"{name}[{i}]") for i in range(len(dataset))]
