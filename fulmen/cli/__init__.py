"""The ``fulmen`` command line: one module per subcommand, registered in ``main``."""
