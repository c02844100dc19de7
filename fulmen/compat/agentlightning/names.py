"""Agent Lightning 0.x's names and module paths, and what the layer does with each.

Three tables, read by ``fulmen.compat.agentlightning.namespace``: ``WORKING`` (the 0.x names
that work, and the compat object each is), ``REFUSED`` (0.x names fulmen has no counterpart
for, with why and what to write instead) and ``MODULES`` (every 0.x module path: a view of the
names, or refused on import). ``docs/migrate-from-agent-lightning.md`` lists the same, and a
test checks that it does.
"""

from __future__ import annotations

__all__ = ["MODULES", "REFUSED", "WORKING"]

#: 0.x name → where the working object lives (``module:attribute`` inside this package).
WORKING: dict[str, str] = {
    # agents and decorators
    "LitAgent": "lit_agent:LitAgent",
    "FunctionalLitAgent": "decorators:FunctionalLitAgent",
    "rollout": "decorators:rollout",
    "llm_rollout": "decorators:llm_rollout",
    "prompt_rollout": "decorators:prompt_rollout",
    # data model
    "Attempt": "rollouts:Attempt",
    "AttemptStatus": "rollouts:AttemptStatus",
    "AttemptedRollout": "rollouts:AttemptedRollout",
    "Dataset": "rollouts:Dataset",
    "Rollout": "rollouts:Rollout",
    "RolloutConfig": "rollouts:RolloutConfig",
    "RolloutMode": "rollouts:RolloutMode",
    "RolloutRawResult": "rollouts:RolloutRawResult",
    "RolloutStatus": "rollouts:RolloutStatus",
    "TaskInput": "rollouts:TaskInput",
    # resources
    "LLM": "resources:LLM",
    "ProxyLLM": "resources:ProxyLLM",
    "PromptTemplate": "resources:PromptTemplate",
    "NamedResources": "resources:NamedResources",
    "ResourceUnion": "resources:ResourceUnion",
    "ResourcesUpdate": "resources:ResourcesUpdate",
    # emitters and span readers
    "emit_annotation": "emitters:emit_annotation",
    "emit_exception": "emitters:emit_exception",
    "emit_message": "emitters:emit_message",
    "emit_object": "emitters:emit_object",
    "emit_reward": "emitters:emit_reward",
    "operation": "emitters:operation",
    "reward": "emitters:reward",
    "Span": "spans:Span",
    "find_final_reward": "spans:find_final_reward",
    "find_reward_spans": "spans:find_reward_spans",
    "get_reward_value": "spans:get_reward_value",
    "get_rewards_from_span": "spans:get_rewards_from_span",
    "get_message_value": "spans:get_message_value",
    "get_object_value": "spans:get_object_value",
    "is_reward_span": "spans:is_reward_span",
    # adapters
    "TraceAdapter": "adapters:TraceAdapter",
    "TracerTraceToTriplet": "adapters:TracerTraceToTriplet",
    "LlmProxyTraceToTriplet": "adapters:LlmProxyTraceToTriplet",
    "TraceToMessages": "adapters:TraceToMessages",
    "OpenAIMessages": "adapters:OpenAIMessages",
    # algorithms
    "Algorithm": "algorithm_base:Algorithm",
    "FastAlgorithm": "algorithm_base:FastAlgorithm",
    "FunctionalAlgorithm": "algorithm_base:FunctionalAlgorithm",
    "algo": "algorithm_base:algo",
    "batch_iter_over_dataset": "algorithm_base:batch_iter_over_dataset",
    "with_store": "algorithm_base:with_store",
    "Baseline": "algorithms:Baseline",
    "APO": "algorithms:APO",
    "VERL": "algorithms:VERL",
    # store, trainer, logging
    "LightningStore": "store_facade:LightningStore",
    "InMemoryLightningStore": "memory_store:InMemoryLightningStore",
    "Trainer": "trainer_facade:Trainer",
    "configure_logger": "logs:configure_logger",
    "setup_logging": "logs:setup",
    "setup": "logs:setup",
    "setup_module_logging": "logs:setup_module",
    "setup_module": "logs:setup_module",
}

_TRACER = ("fulmen traces every rollout itself", "the agl.emit_* functions and agl.operation")
_RUNNER = (
    "fulmen's runner runs agents (many rollouts at once) and hands each its context",
    "agl.Trainer(...).fit / .dev, or fulmen train CONFIG.yaml",
)
_EXECUTION = (
    "fulmen starts store, gateway, engine and runners itself",
    "agl.Trainer(n_runners=...); several machines: store_url and fulmen runner",
)
_STORE = (
    "fulmen's stores are opened by URL and served by fulmen itself",
    "agl.LightningStore.open('sqlite:///...' or 'http://...'), fulmen store serve",
)
_LEGACY = (
    "0.x's legacy client/server (fit_v0, AgentLightningServer) has no counterpart",
    "agl.Trainer(algorithm=...).fit(agent, train_dataset, val_dataset=...)",
)
_SPAN_TYPES = (
    "fulmen's spans are its own records; read back from the store they are agl.Span with "
    "0.x's field names",
    "agl.Span (and fulmen.tracing.semconv for span names)",
)
_STORE_TYPES = (
    "0.x's store-server request and paging types",
    "the agl.LightningStore methods, which take plain arguments",
)
_TRIPLETS = (
    "fulmen builds training data (transitions) from the gateway's call records, not from "
    "spans, so a trace adapter of your own has nothing to adapt",
    "algorithm.transitions (agents, merge, credit) in the fulmen config; "
    "fulmen.transitions.load_trajectory(store, rollout_id) to read transitions",
)
_ENV = (
    "0.x's AGL_* variables configure 0.x's own machinery",
    "os.environ for your own variables; fulmen's settings: docs/settings.md",
)
_APO_INTERNALS = (
    "0.x APO's internal records",
    "agl.APO(...); fulmen's apo keeps its state in RUN_DIR (docs/apo.md)",
)

#: 0.x name → (why fulmen has no counterpart, what to write instead).
# fmt: off
REFUSED: dict[str, tuple[str, str]] = {
    **dict.fromkeys(
        ["Tracer", "AgentOpsTracer", "OtelTracer", "DummyTracer", "WeaveTracer", "get_tracer"],
        _TRACER,
    ),
    **dict.fromkeys(
        ["set_active_tracer", "get_active_tracer", "clear_active_tracer"],
        ("fulmen keeps each rollout's tracer in a context variable, set by its runner", "omit it"),
    ),
    **dict.fromkeys(["Runner", "LitAgentRunner", "LegacyAgentRunner"], _RUNNER),
    **dict.fromkeys(
        [
            "ExecutionStrategy", "ClientServerExecutionStrategy",
            "SharedMemoryExecutionStrategy", "ExecutionEvent", "MultiprocessingEvent",
            "ThreadingEvent",
        ],
        _EXECUTION,
    ),
    "LLMProxy": ("fulmen's gateway records every call", "the llm resource's URL"),
    **dict.fromkeys(
        [
            "LightningStoreServer", "LightningStoreClient", "LightningStoreThreaded",
            "CollectionBasedLightningStore", "LightningStoreCapabilities",
            "LightningStoreStatistics", "MongoLightningStore", "is_queuing", "is_running",
            "is_finished", "estimate_model_size",
        ],
        _STORE,
    ),
    **dict.fromkeys(
        [
            "AgentLightningClient", "AgentLightningServer", "DevTaskLoader", "RolloutLegacy",
            "RolloutRawResultLegacy", "Task", "TaskIfAny",
        ],
        _LEGACY,
    ),
    **dict.fromkeys(
        [
            "AttributeValue", "Attributes", "Event", "Link", "OtelResource",
            "SpanAttributeNames", "SpanContext", "SpanCoreFields", "SpanLike", "SpanNames",
            "SpanRecordingContext", "StatusCode", "TraceState", "TraceStatus",
        ],
        _SPAN_TYPES,
    ),
    **dict.fromkeys(
        [
            "EnqueueRolloutRequest", "FilterField", "FilterOptions", "SortOptions",
            "PaginatedResult", "GenericResponse", "ParallelWorkerBase", "Worker",
            "WorkerStatus",
        ],
        _STORE_TYPES,
    ),
    **dict.fromkeys(
        [
            "Adapter", "OtelTraceAdapter", "TraceToTripletBase", "Triplet", "RewardMatchPolicy",
            "TraceTree", "Transition", "convert_to_openai_messages", "group_genai_dict",
        ],
        _TRIPLETS,
    ),
    **dict.fromkeys(
        ["LightningEnvVar", "resolve_bool_env_var", "resolve_int_env_var", "resolve_str_env_var"],
        _ENV,
    ),
    **dict.fromkeys(["RolloutResultForAPO", "VersionedPromptTemplate"], _APO_INTERNALS),
    "Hook": ("fulmen's runner calls no hooks", "put the code in the rollout method"),
    "Resource": (
        "fulmen's resources are LLM endpoints and prompt templates; there is no base to extend",
        "agl.LLM / agl.PromptTemplate (agl.ResourceUnion in type hints)",
    ),
    "OperationContext": ("fulmen's operation spans are opened by agl.operation", "agl.operation"),
    "encode_object": ("fulmen stores emitted objects as JSON itself", "agl.emit_object(obj)"),
    "with_llm_proxy": ("fulmen's gateway records every call", "the llm resource's URL"),
    "lightning_cli": (
        "0.x's command-line config helper",
        "fulmen train CONFIG.yaml (--set key=value), or argparse in your script",
    ),
    "build_component": (
        "fulmen builds its parts from the training config",
        "agl.Trainer(...) keywords or the fulmen config",
    ),
    **dict.fromkeys(
        [
            "AlgorithmFunc", "AlgorithmFuncAsync", "AlgorithmFuncSync", "AlgorithmFuncSyncLike",
            "AlgorithmFuncAsyncLike", "AlgorithmFuncSyncFull", "AlgorithmFuncSyncOnlyStore",
            "AlgorithmFuncSyncOnlyDataset", "AlgorithmFuncAsyncFull",
            "AlgorithmFuncAsyncOnlyStore", "AlgorithmFuncAsyncOnlyDataset",
            "AlgorithmFuncSyncFallback", "AlgorithmFuncAsyncFallback",
        ],
        ("0.x's typing aliases for @algo functions", "annotate with collections.abc.Callable"),
    ),
}
# fmt: on


def _refused_tree(paths: list[str], reason: tuple[str, str]) -> dict[str, tuple[str, str]]:
    return dict.fromkeys(paths, reason)


#: 0.x module path (relative to ``agentlightning``) → ``None`` for a view, or (why, instead)
#: for a module whose import is refused. A refused module's submodules are refused with it.
# fmt: off
MODULES: dict[str, tuple[str, str] | None] = {
    **dict.fromkeys(
        [
            "adapter", "adapter.base", "adapter.messages", "adapter.triplet",
            "algorithm", "algorithm.apo", "algorithm.apo.apo", "algorithm.base",
            "algorithm.decorator", "algorithm.fast", "algorithm.utils", "algorithm.verl",
            "algorithm.verl.interface",
            "emitter", "emitter.annotation", "emitter.exception", "emitter.message",
            "emitter.object", "emitter.reward", "reward",
            "litagent", "litagent.decorator", "litagent.litagent",
            "logging", "store", "store.base", "store.memory", "trainer", "trainer.trainer",
            "types", "types.core", "types.resources", "types.tracer",
        ]
    ),
    "verl": (
        "0.x's VERL trainer (Ray, FSDP, vLLM) is not part of fulmen; fulmen trains with its "
        "own GRPO",
        "agl.VERL(config) in agl.Trainer(algorithm=...), or algorithm: grpo in a fulmen config",
    ),
    "instrumentation": (
        "fulmen records model calls at its gateway, not by instrumenting client libraries",
        "point the client at the llm resource's URL; nothing to instrument",
    ),
    "tracer": _TRACER,
    "runner": _RUNNER,
    "execution": _EXECUTION,
    "llm_proxy": ("fulmen's gateway records every call", "the llm resource's URL"),
    "server": _LEGACY,
    "client": _LEGACY,
    "cli": ("0.x's command line (agl store, agl vllm)", "fulmen store serve, fulmen train"),
    "config": REFUSED["lightning_cli"],
    "env_var": _ENV,
    "semconv": (
        "0.x's span attribute names; fulmen's spans use its own",
        "the agl.emit_* functions; fulmen.tracing.semconv for fulmen's names",
    ),
    "utils": (
        "0.x's internal helpers (OpenTelemetry attributes, ids, metrics, server launchers)",
        "the agl.emit_* functions; fulmen.tracing for spans",
    ),
    **_refused_tree(
        [
            "store.client_server", "store.threading", "store.mongo", "store.sqlite",
            "store.collection", "store.collection_based", "store.utils",
        ],
        _STORE,
    ),
    **_refused_tree(["trainer.legacy", "trainer.registry", "trainer.init_utils"], _EXECUTION),
    "emitter.utils": _TRACER,
}
# fmt: on
