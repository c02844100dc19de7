"""Chat templates that fulmen supplies for models whose files carry none.

Both templates render tools and tool calls in the Hermes/Qwen format: tool signatures in the
system turn and calls as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in the
assistant turn, which is what :mod:`fulmen.engines.builtin.toolcalls` and vLLM's ``hermes``
tool parser read back.
"""

from __future__ import annotations

__all__ = ["CHATML_TEMPLATE", "GEMMA_TEMPLATE"]

_TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions. Function signatures:\n<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n\n"
    "For each function call, return a JSON object inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

_TOOL_CALLS = (
    "{%- if message.tool_calls %}{% for tc in message.tool_calls %}"
    "{% set f = tc.function if tc.function is defined else tc %}"
    '\n<tool_call>\n{"name": "{{ f.name }}", "arguments": '
    "{{ f.arguments if f.arguments is string else f.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}{% endif %}"
)

#: ChatML with Hermes-style tools; used by the ``tiny`` model.
CHATML_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    + _TOOLS_PREAMBLE
    + "<|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n"
    "{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if message.content %}{{ message.content }}{% endif %}" + _TOOL_CALLS + "<|im_end|>\n"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ message.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: Gemma 3 turns (``<start_of_turn>user`` / ``model``) with Hermes-style tools; the system
#: prompt and tool signatures are folded into the first user turn, as Gemma has no system role.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- set sys = messages[0].content if messages[0].role == 'system' else '' %}"
    "{%- set prefix %}{% if sys %}{{ sys }}\n\n{% endif %}"
    "{% if tools %}" + _TOOLS_PREAMBLE + "\n\n{% endif %}{% endset %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'assistant' %}<start_of_turn>model\n"
    "{% if message.content %}{{ message.content }}{% endif %}" + _TOOL_CALLS + "<end_of_turn>\n"
    "{% elif message.role == 'tool' %}<start_of_turn>user\n<tool_response>\n"
    "{{ message.content }}\n</tool_response><end_of_turn>\n"
    "{% else %}<start_of_turn>user\n"
    "{% if loop.index0 == (1 if sys else 0) %}{{ prefix }}{% endif %}"
    "{{ message.content }}<end_of_turn>\n"
    "{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
