"""Data-parallel weight updates: the settings, the process group and the update ranks.

Any algorithm whose updater implements ``updater.Updater`` can share its steps
over several processes with ``config.data_parallel``; nothing here names an algorithm
(``docs/data-parallel.md``).
"""

__all__: list[str] = []
