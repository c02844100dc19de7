"""Code that runs inside vLLM's own server process, from vLLM's environment.

Its modules import nothing of fulmen (vLLM's environment does not have it): ``VLLMLauncher``
puts this folder on vLLM's ``PYTHONPATH`` and names a module here by its top-level name.
"""

__all__: list[str] = []
