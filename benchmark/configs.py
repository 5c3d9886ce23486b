"""A grid's configs for the analysis (benchmark/analyze.py): the flags that tell its runs apart, their names, labels
and order."""
import pandas as pd

from benchmark.common import NON_IDENTITY

# Args fields that are a run's own, never shared by the runs of a config: its seed, its name and the checkpoint it resumed
RUN_OWN = ("seed", "exp_name", "resume")
# Args fields never part of a config: a run's own, and those that cannot change what a run learns (NON_IDENTITY)
NOT_CONFIG = frozenset(RUN_OWN + NON_IDENTITY)


def run_key(command):
    """A run's name in the tables; with several grids, prefixed by the grid's (a run two grids share, once per grid)."""
    return f"{command['grid']}/{command['name']}" if "grid" in command else command["name"]


def value_key(value):
    """Sort key that puts 4 before 16 and numbers before text."""
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def flag_name(field):
    return field.replace("_", "-")


def config_columns(rows, grid_flags):
    """The fewest columns that tell the configs apart: the grid's own flags first, then any other resolved
    flag that varies, then the sub-run; a column that adds no distinction to those kept is left out."""
    frame = pd.DataFrame(rows)
    varying = [c for c in frame.columns if c not in {"run", "env", "seed"} and frame[c].astype(str).nunique() > 1]
    first = [c for c in ("grid", "script") if c in varying] + [c for c in grid_flags if c in varying]
    ordered = first + sorted(c for c in varying if c not in first and c != "subrun")
    ordered += ["subrun"] if "subrun" in varying else []
    kept, distinct = [], 1
    for column in ordered:
        n = len(frame[kept + [column]].astype(str).drop_duplicates())
        if n > distinct:
            kept, distinct = kept + [column], n
    return kept


def config_label(row, columns):
    return " ".join(f"{c}={row[c]}" for c in columns) or "all runs"
