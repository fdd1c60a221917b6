"""What `oxygen demo` watches and prints: frames, finished narrations and memory entries,
and the answer to a progress question asked through the node's ~/ask_progress service
(a fleet robot's: /ROBOT/ask_progress); and the node's lifecycle transitions, which the
demo requests itself. One monitor per robot."""
from __future__ import annotations

import re
import time

from ..node import qos
from .bag_recorder import resolve

_UNPRINTABLE = re.compile(r"[^\x20-\x7e\u00a0-\uffff]")


def clean(text: str, limit: int = 160) -> str:
    """One printable line (the tiny model's text is random bytes)."""
    text = _UNPRINTABLE.sub("·", " ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


class DemoMonitor:
    def __init__(self, node, params: dict, say, node_name: str = "/oxygen_node", namespace: str = "/",
                 label: str = ""):
        """namespace: a fleet robot's (its topics and ask_progress are there); label: put
        before its printed lines ("arm1 ")."""
        from lifecycle_msgs.srv import ChangeState
        from oxygen_msgs.msg import FrameTiming, TextChunk
        from oxygen_msgs.srv import AskProgress

        self.node, self.say, self.label = node, say, label
        fleet = namespace.strip("/") != ""
        self._AskProgress, self._ChangeState = AskProgress, ChangeState
        rel, latched = qos.TEXT, qos.latched(1000)
        node.create_subscription(FrameTiming, resolve(params.get("frame_timing_topic", "frame_timing"), namespace),
                                 self._on_timing, rel)
        for stream in ("narration", "memory", "answer"):
            node.create_subscription(TextChunk, resolve(params.get(f"{stream}_topic", stream), namespace),
                                     lambda m, s=stream: self._on_text(s, m),
                                     latched if stream == "memory" else rel)
        self.ask_client = node.create_client(
            AskProgress, f"{namespace.rstrip('/')}/ask_progress" if fleet else f"{node_name}/ask_progress")
        self.lifecycle_client = node.create_client(ChangeState, f"{node_name}/change_state")
        self.frames = 0
        self.tokens = 0
        self.misses = 0
        self.t_first = None           # monotonic time of the first frame
        self.finished = {"narration": 0, "memory": 0, "answer": 0}
        self._frame_of_stamp = {}
        self._window = []             # (monotonic time, tokens) of recent frames

    def elapsed(self) -> float:
        return 0.0 if self.t_first is None else time.monotonic() - self.t_first

    def stamp(self) -> str:
        return f"[{self.elapsed():6.1f} s]"

    def _on_timing(self, msg) -> None:
        now = time.monotonic()
        if self.t_first is None:
            self.t_first = now
        self.frames += 1
        self.tokens += msg.tokens_emitted
        self.misses += int(msg.deadline_missed)
        self._frame_of_stamp[(msg.header.stamp.sec, msg.header.stamp.nanosec)] = msg.frame_index
        self._window.append((now, msg.tokens_emitted))
        self._window = [w for w in self._window if now - w[0] <= 10.0]

    def rates(self) -> tuple[float, float]:
        """(frames/s, tokens/s) over the last 10 s."""
        if len(self._window) < 2:
            return 0.0, 0.0
        span = self._window[-1][0] - self._window[0][0]
        if span <= 0:
            return 0.0, 0.0
        return (len(self._window) - 1) / span, sum(t for _, t in self._window[1:]) / span

    def _on_text(self, stream: str, msg) -> None:
        if not msg.done:
            return
        self.finished[stream] += 1
        if stream == "answer":
            return                     # printed with the service's response
        end = self._frame_of_stamp.get((msg.header.stamp.sec, msg.header.stamp.nanosec))
        frames = f"frames {msg.start_frame}-{end}" if end is not None else f"from frame {msg.start_frame}"
        self.say(f"{self.stamp()} {self.label}{stream} #{self.finished[stream]} ({frames}, {msg.token_count} tokens): "
                 f"{clean(msg.full_text)}")

    def status_line(self) -> str:
        hz, tps = self.rates()
        return (f"{self.stamp()} {self.label}{self.frames} frames ({hz:.1f} Hz, {self.misses} over their deadline), "
                f"{self.finished['narration']} narrations, {self.finished['memory']} memory entries, "
                f"{tps:.1f} tok/s")

    def ask(self, question: str):
        """The future of an AskProgress call (None while the service is not available)."""
        if not self.ask_client.service_is_ready():
            return None
        return self.ask_client.call_async(self._AskProgress.Request(question=question))

    def lifecycle_answers(self, resend_s: float = 2.0):
        """A done() for "oxygen_node's lifecycle service answers", to wait on before the one
        configure: an unknown transition (refused, no effect, so safe to repeat) sent now and
        again every resend_s until one is answered. A request or its response can be lost
        while discovery still matches the service's channels (rclpy logs "failed to send
        response (timeout)"), most often on a loaded machine; the configure then is not."""
        futures, sent_at = [], [float("-inf")]

        def done() -> bool:
            if any(f.done() for f in futures):
                for f in futures:
                    if not f.done():
                        self.lifecycle_client.remove_pending_request(f)
                return True
            if time.monotonic() - sent_at[0] >= resend_s:
                futures.append(self.transition("no_such_transition"))
                sent_at[0] = time.monotonic()
            return False

        return done

    def transition(self, label: str):
        """The future of a ChangeState call by label ("configure", "activate"; call it once
        lifecycle_client.service_is_ready(): a transition is not idempotent, so not retried)."""
        request = self._ChangeState.Request()
        request.transition.label = label
        return self.lifecycle_client.call_async(request)
