"""Hugging Face style chat templates (jinja2), rendered as transformers renders them; the
SmolLM2 and Qwen3-VL tokenizers carry one."""
from __future__ import annotations

import json
from functools import lru_cache


def render_chat_template(source: str, **context) -> str:
    """Render a Hugging Face style chat template (jinja2) the way transformers does: a
    sandboxed immutable environment with trim_blocks / lstrip_blocks and loop controls,
    `raise_exception`, `strftime_now` and a `tojson` that keeps non-ASCII text as is.
    `context` holds messages, add_generation_prompt, bos_token, eos_token, tools, ..."""
    return _compile_template(source).render(**context)


@lru_cache(maxsize=4)
def _compile_template(source: str):
    from datetime import datetime

    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(f"chat template: {message}")

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)
