"""The built-in inference server: transformers + torch behind an OpenAI-compatible API.

``model`` loads weights and swaps LoRA adapters, ``sampling`` turns logits into tokens,
``batching`` runs the step-level continuous batching loop on its own thread (``prefill`` lays
out its prefills, ``prefix_cache`` keeps the KV of prompt prefixes, ``metrics`` renders its
counters for ``/metrics``), ``toolcalls``
parses ``<tool_call>`` blocks, ``protocol`` holds request schemas and errors, and ``server``
builds the Starlette app. Import the submodules directly; this package imports nothing heavy.
"""

from __future__ import annotations

__all__: list[str] = []
