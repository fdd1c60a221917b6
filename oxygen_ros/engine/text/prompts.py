"""Default prompts of the three language streams (narration, memory, answers to progress
questions) and how an answer prompt is filled.

A request prompt is appended after the frame's observation prefix, which ends with
`Task: {instruction}, State: {bins};\\nAction: ` (engine/observation/observation.py), so a prompt
refers to "the task above". These defaults are short plain prompts for the random-weight
profiles (their text is noise anyway; `tiny` accepts at most 96 prompt tokens). A
profile's real prompts live in its params file, the one source: config/demo.yaml holds
SmolLM2's chat turns (close the prefix's `<|im_start|>` turn with `<|im_end|>`, ask as
the user, open the assistant's turn), which gave far better English than plain prompts
with the placeholder vision tokens in front.

The answer template has three fields, replaced literally (no str.format, so braces in a
question are safe): {memory} -> the memory log, one "- entry" line each, oldest first
("(nothing yet)" when empty), {latest} -> its newest entry alone (a small model reads the
latest note better where the template names it), {question} -> the question.
"""
from __future__ import annotations

NARRATION = "Say what the robot is doing now."
MEMORY = "Note what the robot just did."
ANSWER = "Memory:\n{memory}\nQuestion: {question}\nAnswer:"
EMPTY_MEMORY = "(nothing yet)"


def fill_answer(template: str, memory: list[str], question: str) -> str:
    lines = "\n".join(f"- {e}" for e in memory) if memory else EMPTY_MEMORY
    latest = memory[-1] if memory else EMPTY_MEMORY
    return template.replace("{memory}", lines).replace("{latest}", latest).replace("{question}", question)
