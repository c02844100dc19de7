"""The ``fulmen`` command line: one module per subcommand, registered in ``main``."""

__all__: list[str] = []
