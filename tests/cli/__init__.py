"""Tests of the ``fulmen`` command line."""
