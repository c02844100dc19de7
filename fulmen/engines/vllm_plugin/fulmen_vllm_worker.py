"""Methods fulmen mixes into vLLM's workers (``--worker-extension-cls``), called by name.

``VLLMLauncher`` reloads a full fine-tune's weights with ``/collective_rpc`` calling
``fulmen_reload_weights`` on every worker. It is vLLM's own in-place reload (``reload_weights``
from a model directory) followed by one repair. On CPU vLLM computes each linear map from a
packed copy of its weight, made when the weight is loaded. A model whose LM head shares the
embedding matrix (``tie_word_embeddings``: the tiny test model, Llama 3.2 1B) gets no head
weights from the checkpoint, so vLLM 0.32's reload does not process the head again ("Failed to
load weights") and the head keeps computing from the packed copy of the *previous* embeddings:
measured, the served logprobs drifted from the trainer's by 0.03 to 0.09 a token over twelve
steps of the toy run, and a reloaded engine's answers differed from one started on the same
weights. The repair packs the head again from the (already reloaded) shared matrix.

Imports nothing of fulmen: it runs in vLLM's environment.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReloadWeights"]


class ReloadWeights:
    """``fulmen_reload_weights``: vLLM's in-place reload, with a tied head packed again."""

    def fulmen_reload_weights(self, path: str) -> str:
        """Load the model directory ``path`` into this worker's model; say what was done."""
        worker: Any = self
        worker.reload_weights(weights_path=path)
        model = worker.model_runner.get_model()
        return "reloaded, tied head repacked" if _repack_tied_head(model) else "reloaded"


def _repack_tied_head(model: Any) -> bool:
    """Process a tied LM head again from the embedding matrix it shares; whether it had one."""
    config = getattr(model, "config", None)
    head = getattr(model, "lm_head", None)
    embeddings = getattr(getattr(model, "model", None), "embed_tokens", None)
    if not getattr(config, "tie_word_embeddings", False) or head is None or embeddings is None:
        return False
    if getattr(head, "weight", None) is not getattr(embeddings, "weight", None):
        head = head.tie_weights(embeddings)
        model.lm_head = head
    head.quant_method.process_weights_after_loading(head)
    return True
