"""The task's progress as "what have you done?" answers it: which of hparams.PROGRESS's four
sentences a memory log of places calls for (the learned prompt's targets), what the sim's
ground truth calls for at a moment (oxygen eval's judge), and whether an answer says it.
Plain Python: the evaluation imports it without torch."""
from __future__ import annotations

import re

PICK = re.compile(r"\b(pick|picked|took|taken|take|grabbed|grasped|lifted|holding|hold)\b")
DENIAL = re.compile(r"\b(not|nothing|yet|haven't|didn't)\b")
PUT = re.compile(r"\b(put|placed|place|dropped)\b|in the bowl")
HOLDS = re.compile(r"\b(holding|hold|carrying)\b")
LOST = re.compile(r"\b(fell|dropped|lost)\b|back on the table")


def progress(places: list[str]) -> str:
    """not_yet | holding | done | dropped, from places in time order (the latest last)."""
    if not places:
        return "not_yet"
    last, picked = places[-1], any(p != "table" for p in places)
    if last == "bowl":
        return "done"
    if last == "gripper":
        return "holding"
    return "dropped" if picked else "not_yet"


def progress_at(timeline: list[dict], t: float) -> str:
    """The progress at time t of an episode's place timeline (the report's
    [{"place", "start_s", "end_s"}, ...])."""
    return progress([seg["place"] for seg in timeline if seg["start_s"] <= t])


def answer_right(key: str, answer: str) -> bool:
    """Whether an answer's first line says progress `key`: not_yet denies and claims no bowl;
    holding claims a pick, no loss and no bowl; done puts the cube in the bowl; dropped claims
    a pick and its loss, and neither holding nor the bowl."""
    a = answer.lower().split("\n")[0]
    denial, bowl, lost = DENIAL.search(a) is not None, "bowl" in a, LOST.search(a) is not None
    pick = PICK.search(a) is not None and not denial
    if key == "not_yet":
        return denial and not bowl
    if key == "holding":
        return pick and not lost and not bowl
    if key == "done":
        return bowl and PUT.search(a) is not None and not denial
    return pick and lost and not bowl and HOLDS.search(a) is None
