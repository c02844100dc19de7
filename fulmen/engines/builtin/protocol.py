"""Request schemas of the OpenAI-compatible API and their translation to sampling parameters.

Field names follow OpenAI plus vLLM's extensions that fulmen relies on (``return_token_ids``,
``stop_token_ids``, ``ignore_eos``, ``add_generation_prompt``, ``top_k``). Unknown fields are
ignored, as OpenAI clients send many; fields whose effect the server cannot honour (penalties,
``min_p``, ``echo``, ``best_of``) are refused with a 400 naming the field rather than silently
dropped.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fulmen.engines.builtin.errors import APIError, bad_request
from fulmen.engines.builtin.sampling import SamplingParams

__all__ = [
    "ChatRequest",
    "CompletionRequest",
    "LoadAdapterRequest",
    "ReloadWeightsRequest",
    "TokenizeRequest",
    "UnloadAdapterRequest",
    "parse_request",
    "sampling_params",
]


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Sampling(_Request):
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1)
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    n: int = Field(default=1, ge=1, le=64)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None


class ChatRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: ``prompt`` is text, token ids, or a list of either."""

    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    best_of: int | None = None


class TokenizeRequest(_Request):
    """``POST /tokenize``: text ``prompt`` or chat ``messages``."""

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = True
    tools: list[dict[str, Any]] | None = None


class LoadAdapterRequest(_Request):
    """``POST /v1/load_lora_adapter`` (same body as vLLM)."""

    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)


class UnloadAdapterRequest(_Request):
    """``POST /v1/unload_lora_adapter``."""

    lora_name: str = Field(min_length=1)


class ReloadWeightsRequest(_Request):
    """``POST /v1/reload_weights``: a model directory, or none to restore the original weights."""

    path: str | None = None


_Model = TypeVar("_Model", bound=BaseModel)


def parse_request(cls: type[_Model], body: Any) -> _Model:
    """Validate a JSON body; the first problem becomes a 400 naming its field."""
    try:
        return cls.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise bad_request(f"{param or 'body'}: {first['msg']}", param=param) from None


def _refuse_unsupported(req: _Sampling) -> None:
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name) != 0.0:
            raise bad_request(f"{name} is not supported by the built-in engine", param=name)
    if req.logit_bias:
        raise bad_request("logit_bias is not supported by the built-in engine", "logit_bias")
    # Fields that would change the sampled distribution are refused, never silently dropped:
    # the recorded logprobs must be those of the distribution the tokens came from.
    if req.min_p != 0.0:
        raise bad_request("min_p is not supported by the built-in engine", param="min_p")
    if req.repetition_penalty != 1.0:
        raise bad_request(
            "repetition_penalty is not supported by the built-in engine",
            param="repetition_penalty",
        )
    if isinstance(req, CompletionRequest):
        if req.echo:
            raise bad_request("echo is not supported by the built-in engine", param="echo")
        if req.best_of not in (None, req.n):
            raise bad_request("best_of is not supported by the built-in engine", "best_of")


def sampling_params(
    req: ChatRequest | CompletionRequest, *, prompt_len: int, max_model_len: int
) -> SamplingParams:
    """Build sampling parameters, enforcing the context limit with a 400 error."""
    _refuse_unsupported(req)
    max_tokens = req.max_completion_tokens or req.max_tokens
    param = "messages" if isinstance(req, ChatRequest) else "prompt"
    if prompt_len >= max_model_len:
        raise APIError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt is {prompt_len} tokens long, which leaves no room for a completion "
            f"(the context holds the prompt and the completion: at most {max_model_len - 1} "
            "prompt tokens). Please reduce the length of the messages or prompt, or serve a "
            "model with a longer context.",
            param=param,
        )
    if max_tokens is None:
        max_tokens = max_model_len - prompt_len
    if prompt_len + max_tokens > max_model_len:
        raise APIError(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_len + max_tokens} tokens ({prompt_len} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or "
            "completion.",
            param=param,
        )
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(s for s in req.stop or () if s)
    if isinstance(req, ChatRequest):
        want_logprobs, top = req.logprobs, req.top_logprobs or 0
        if top and not want_logprobs:
            raise bad_request("top_logprobs requires logprobs to be true", param="top_logprobs")
    else:
        want_logprobs, top = req.logprobs is not None, req.logprobs or 0
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=max(req.top_k, 0),  # vLLM's -1 and 0 both mean "every token"
        seed=req.seed,
        stop=stop,
        stop_token_ids=frozenset(req.stop_token_ids or ()),
        ignore_eos=req.ignore_eos,
        logprobs=want_logprobs,
        top_logprobs=top,
    )
