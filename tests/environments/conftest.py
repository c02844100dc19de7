"""Shared by the environment tests: the libraries imported once, their compile warnings quiet.

cellpylib (a dependency of reasoning-gym) compiles with ``SyntaxWarning``s (``is`` with a
literal); CI installs without byte-compiling, so they would be raised at its first import,
which the suite's ``filterwarnings = error`` turns into errors. The import happens here, once,
with those warnings ignored; everything else still turns warnings into errors.
"""

from __future__ import annotations

import contextlib
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", SyntaxWarning)
    for name in ("reasoning_gym", "textarena"):
        with contextlib.suppress(ImportError):
            __import__(name)
