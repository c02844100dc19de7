"""``python -m fulmen`` runs the command line."""

from fulmen.cli.main import main

raise SystemExit(main())
