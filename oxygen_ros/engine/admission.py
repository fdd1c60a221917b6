"""How many frames a new language request needs before its last token, from the engine's
backlog: the node queues a question only while it can still be answered before its
deadline, and refuses it at once, with this estimate, when it cannot.

The estimate replays the scheduler's rules (scheduler.OxygenEngine): at each frame, queued
requests take the free slots in order and get their first token; then every live request
decodes up to k more tokens; a request leaves when its token budget is spent. Every
request is assumed to run to its max_new_tokens (an end-of-sequence token only makes it
sooner), so the estimate is an upper bound in frames.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Backlog:
    """What the engine holds at the end of a frame (OxygenEngine.backlog)."""
    live: tuple[int, ...]          # tokens each live request may still decode
    queued: tuple[int, ...]        # max_new_tokens of each request waiting for a slot, in order
    slots: int                     # KV slots for live requests
    steps_per_frame: int           # decode steps k per frame (the last frame's where automatic)


def frames_to_finish(backlog: Backlog, new_tokens: int, ahead: Sequence[int] = (), admit_from: int = 1) -> int:
    """Frames from the next one until a request of `new_tokens` tokens, queued behind
    backlog.queued and then `ahead` (requests the engine has not seen yet), has its last
    token (1: it finishes in the next frame). `ahead` and ours can be admitted from frame
    `admit_from` on (2: the backlog is the frame already running, which took its requests)."""
    if new_tokens < 1 or backlog.slots < 1:
        raise ValueError(f"need new_tokens >= 1 and slots >= 1, got {new_tokens} and {backlog.slots}")
    k = max(1, backlog.steps_per_frame)
    live = [n for n in backlog.live if n > 0]
    queue = [*backlog.queued, *ahead, new_tokens]
    ours = len(queue) - 1              # our request's place in the queue; -1 once admitted
    late = len(ahead) + 1              # the queue's tail that waits for frame admit_from
    ours_left = None
    frames = 0
    while True:
        frames += 1
        # admission: free slots go to the queue in order, each with its first token
        while queue and len(live) + (ours_left is not None) < backlog.slots \
                and (frames >= admit_from or len(queue) > late):
            n = queue.pop(0) - 1
            if ours == 0:
                ours_left = n
            else:
                live.append(n)
            ours -= 1
            late = min(late, len(queue))
        # decode: up to k steps over every live request, as long as one still has budget
        steps = min(k, max([*live, ours_left or 0], default=0))
        live = [n - steps for n in live if n - steps > 0]
        if ours_left is not None:
            ours_left -= steps
            if ours_left <= 0:
                return frames
