"""Default prompts of the three language streams: narration, memory, and answers to
progress questions (which carry the memory log).

A request prompt is appended after the frame's observation prefix, which ends with
`Task: {instruction}, State: {bins};\\nAction: ` (observation.prefix_text), so every
prompt here refers to "the task above".

For SmolLM2-Instruct (the `smol` profile) the prompts are chat turns: the prefix starts
with SmolLM2's BOS, which is `<|im_start|>`, so the prompt first closes that turn
(`<|im_end|>`), then asks as the user and opens the assistant's turn. Compared with
plain-text prompts (Q:/A: style) this gave much better English with the placeholder
vision tokens in front (plain prompts often produced empty "A:" loops); samples are in
the issue-4 report. The random-weight profiles use short plain prompts: their text is
noise anyway, and `tiny` accepts at most 96 prompt tokens (bytes).

Templates use two fields, replaced literally (no str.format, so braces in a question
are safe): {memory} -> the memory log, one "- entry" line each ("(nothing yet)" when
empty), {question} -> the question.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

CHAT_OPEN = "<|im_end|>\n<|im_start|>user\n"        # close the prefix's turn, ask as the user
CHAT_CLOSE = "<|im_end|>\n<|im_start|>assistant\n"  # the model answers as the assistant
EMPTY_MEMORY = "(nothing yet)"


def chat_turn(user_text: str) -> str:
    """A user message after the observation prefix, ending where the assistant speaks."""
    return f"{CHAT_OPEN}{user_text}{CHAT_CLOSE}"


def format_memory(entries: list[str]) -> str:
    return "\n".join(f"- {e}" for e in entries) if entries else EMPTY_MEMORY


@dataclass(frozen=True)
class PromptSet:
    narration: str
    memory: str
    answer: str          # must contain {question}; {memory} is optional

    def __post_init__(self):
        for name in ("narration", "memory", "answer"):
            if not getattr(self, name).strip():
                raise ValueError(f"the {name} prompt is empty")
        if "{question}" not in self.answer:
            raise ValueError("the answer prompt needs a {question} field")

    def answer_prompt(self, question: str, memory: list[str] | str = ()) -> str:
        mem = memory if isinstance(memory, str) else format_memory(list(memory))
        return self.answer.replace("{memory}", mem).replace("{question}", question)

    def with_(self, **kw) -> "PromptSet":
        return replace(self, **kw)


SMOL_PROMPTS = PromptSet(
    narration=chat_turn("Given the task above, say in one short sentence what the robot is doing now."),
    memory=chat_turn("Given the task above, describe the robot's last step in a few words."),
    answer=chat_turn("Notes about the robot's progress so far:\n{memory}\n\n"
                     "Given the task above and these notes, answer in one sentence: {question}"),
)

PLAIN_PROMPTS = PromptSet(
    narration="Say what the robot is doing now.",
    memory="Note what the robot just did.",
    answer="Memory:\n{memory}\nQuestion: {question}\nAnswer:",
)

PROFILE_PROMPTS = {"smol": SMOL_PROMPTS, "tiny": PLAIN_PROMPTS, "pi05": PLAIN_PROMPTS,
                   "pi05-quarter": PLAIN_PROMPTS}


def prompts_for(profile: str) -> PromptSet:
    """The default prompts of a model profile (plain ones for unknown profiles)."""
    return PROFILE_PROMPTS.get(profile, PLAIN_PROMPTS)

