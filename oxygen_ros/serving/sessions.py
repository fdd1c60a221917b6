"""`oxygen serve`'s sessions: one per connection, each a robot of one FleetEngine, their
observations batched into fleet frames on one engine thread.

A frame starts once an observation waits and either every session has one waiting or
`window_s` has passed since the first arrived (a session that is slow to send never holds
the others back by more). The frame's chunks are handed back as soon as the batch has
them, before its language work; the text decoded in a frame reaches a session with its
next reply. Everything that touches the engine runs on its thread; connections only queue
observations and wait for their reply.

A fault in one session's own work (its policy I/O, its requests) fails that session alone
(SessionFailed, the traceback as its message); every frame the engine opens is finished.
A closed session's requests are aborted in the engine (KV slots freed at once) before its
robot name serves another session; so is a question past its deadline.

Language, an extension an openpi client ignores: an observation may carry
  "oxygen/narrate": true or a prompt     start a narration from this frame
  "oxygen/remember": true or a prompt    start a memory entry (kept in the session's memory log)
  "oxygen/ask": "question"               start an answer from the memory log
  "oxygen/ask_timeout_s": seconds        refused at once when it cannot be answered in time
and every reply carries "oxygen/text": the deltas decoded since the last reply (request
id, stream, delta, done, full text and error when done) and "oxygen/requests": what this
observation started (request id) or why not (error).
"""
from __future__ import annotations

import concurrent.futures
import math
import threading
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import torch

from ..engine.fleet import RobotView
from ..engine.requests import RequestRejected
from ..engine.robot_language import RobotLanguage
from .robot_inputs import InputError, RobotInputs, repack

STREAM_KEYS = {"narration": "oxygen/narrate", "memory": "oxygen/remember"}
ASK_KEY, ASK_TIMEOUT_KEY = "oxygen/ask", "oxygen/ask_timeout_s"
MAX_QUESTION_CHARS = 2000


class ServerFull(RuntimeError):
    """No robot slot left in the fleet engine for another session."""


class SessionFailed(RuntimeError):
    """One session's own work raised (its policy I/O, its requests): the message is the
    traceback, which the server sends as text before closing that session with 1011
    (openpi's convention). The other sessions and the engine go on."""

    @classmethod
    def of(cls, err: BaseException) -> "SessionFailed":
        return cls("".join(traceback.format_exception(err)).rstrip())


@dataclass
class Language:
    """The sessions' language settings (the node's parameters of the same names)."""
    narration_prompt: str
    memory_prompt: str
    answer_prompt: str
    max_tokens: int
    memory_log_size: int = 8
    question_timeout_s: float = 60.0


@dataclass
class _Pending:
    obs: object                       # engine Observation
    state: np.ndarray
    requests: list                    # (stream, prompt text or True, timeout_s)
    future: concurrent.futures.Future
    received: float


@dataclass
class Session:
    robot: str
    inputs: RobotInputs
    noise: torch.Generator
    language: RobotLanguage                          # memory log, questions and their deadlines
    outbox: list = field(default_factory=list)       # text items not yet replied
    interval_s: float | None = None                  # between its observations, smoothed
    last_seen: float | None = None
    closed: bool = False


class SessionHub:
    def __init__(self, engine, model, tok, adapter, language: Language, max_sessions: int,
                 window_s: float = 0.005, seed: int = 0, log=print, max_batch: int = 0):
        """engine: a FleetEngine of at least `max_sessions` robots; adapter: a
        serving.policy_adapters adapter (observation in, actions out); max_batch: at most
        this many sessions a frame (0: all that wait; 1: one at a time, as servers that do
        not batch, for comparison)."""
        self.engine, self.model, self.tok, self.adapter = engine, model, tok, adapter
        self.language, self.window_s, self.seed, self.log = language, window_s, seed, log
        self.max_batch = max_batch
        self.max_sessions = max_sessions
        self._free = [f"session{i}" for i in range(max_sessions)][::-1]
        self._sessions: dict[str, Session] = {}
        self._pending: dict[str, _Pending] = {}
        self._owner: dict[int, Session] = {}          # request id -> session (text routing)
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="oxygen_serve_engine", daemon=True)
        self.frames = 0

    # -- connections' side -------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=10)

    def open(self, inputs: RobotInputs) -> Session:
        with self._cond:
            # a closed session's slot comes back once the engine thread has reaped it
            self._cond.wait_for(lambda: self._free or not any(s.closed for s in self._sessions.values()), 2.0)
            if not self._free:
                raise ServerFull(f"the server serves at most {self.max_sessions} sessions at once (--max-sessions)")
            robot = self._free.pop()
            # a view, not engine.view(): registering the robot is the engine thread's (act, submit)
            language = RobotLanguage(RobotView(self.engine, robot), self.model.cfg.max_prompt_tokens,
                                     self.language.memory_log_size)
            s = Session(robot, inputs, torch.Generator().manual_seed(self.seed), language)
            self._sessions[robot] = s
            return s

    def close(self, session: Session) -> None:
        """The session's waiting observation is dropped; its requests' text goes nowhere;
        the engine thread then aborts its requests (their KV slots freed at once) and its
        robot slot is reused."""
        with self._cond:
            session.closed = True
            # the name may already serve a new session (this one failed and was reaped)
            if self._sessions.get(session.robot) is session:
                p = self._pending.pop(session.robot, None)
                if p is not None:
                    p.future.cancel()
            self._cond.notify_all()

    @property
    def sessions(self) -> int:
        with self._cond:
            return sum(not s.closed for s in self._sessions.values())

    def submit(self, session: Session, message) -> concurrent.futures.Future:
        """Queue one observation message for the next frame; its reply dict comes through the
        future. InputError (at once) for an observation the session's inputs cannot use."""
        images, state, prompt = repack(message, session.inputs, self.model.cfg.camera_slots)
        requests = []
        for stream, key in STREAM_KEYS.items():
            value = message.get(key)
            if value:
                if not isinstance(value, (bool, str)):
                    raise InputError(f"{key}: true or a prompt string, got {type(value).__name__}")
                requests.append((stream, value, None))
        question = message.get(ASK_KEY)
        if question is not None:
            if not isinstance(question, str) or len(question) > MAX_QUESTION_CHARS:
                raise InputError(f"{ASK_KEY}: a question of at most {MAX_QUESTION_CHARS} characters")
            question, problem = RobotLanguage.check_question(question)     # the node's check
            if problem:
                raise InputError(f"{ASK_KEY}: {problem}")
            timeout = message.get(ASK_TIMEOUT_KEY, self.language.question_timeout_s)
            if not isinstance(timeout, (int, float)) or not timeout > 0 or not math.isfinite(timeout):
                raise InputError(f"{ASK_TIMEOUT_KEY}: a positive number of seconds, got {timeout!r}")
            requests.append(("answer", question, float(timeout)))
        try:
            obs = self.adapter.observation(images, state, prompt)
        except ValueError as e:        # the policy I/O's checks (PolicyIOError)
            raise InputError(str(e)) from e
        except Exception as e:         # noqa: BLE001 - a fault of the policy I/O: this session's
            raise SessionFailed.of(e) from e
        future = concurrent.futures.Future()
        now = time.monotonic()
        with self._cond:
            if session.closed:
                raise InputError("the session is closed")
            if session.robot in self._pending:
                raise InputError("one observation at a time: wait for the reply to the last one")
            if session.last_seen is not None:
                gap = now - session.last_seen
                session.interval_s = gap if session.interval_s is None else 0.8 * session.interval_s + 0.2 * gap
            session.last_seen = now
            self._pending[session.robot] = _Pending(obs, state, requests, future, now)
            self._cond.notify_all()
        return future

    # -- the engine thread ----------------------------------------------------------------------
    def _take_batch(self) -> dict[str, _Pending] | None:
        with self._cond:
            self._reap()
            while not self._pending and not self._stop:
                self._cond.wait(0.5)
                self._reap()
            if self._stop:
                return None
            first = min(p.received for p in self._pending.values())
            while not self._stop:
                open_ = [r for r, s in self._sessions.items() if not s.closed]
                left = first + self.window_s - time.monotonic()
                if all(r in self._pending for r in open_) or left <= 0:
                    break
                self._cond.wait(left)
            if self.max_batch and len(self._pending) > self.max_batch:     # the longest waiting first
                keep = sorted(self._pending, key=lambda r: self._pending[r].received)[: self.max_batch]
                batch = {r: self._pending.pop(r) for r in keep}
            else:
                batch, self._pending = self._pending, {}
            # running from here on: a future cancelled before (its waiter gone) is dropped
            return {r: p for r, p in batch.items() if p.future.set_running_or_notify_cancel()}

    def _reap(self) -> None:
        """Closed sessions give back their robot slot: their requests are aborted in the
        engine (queued ones dropped, live ones' KV slots freed now), their text routes
        dropped, and a session opened later under the same name starts with nothing."""
        for robot, s in list(self._sessions.items()):
            if s.closed:
                self.engine.forget(robot)
                for rid in [rid for rid, owner in self._owner.items() if owner is s]:
                    del self._owner[rid]
                s.language.fail_questions("the session closed")
                del self._sessions[robot]
                self._free.append(robot)
                self._cond.notify_all()

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            try:
                self._frame(batch)
            except Exception as e:  # noqa: BLE001 - the frame's sessions get the error, the hub goes on
                self.log(f"frame failed: {type(e).__name__}: {e}")
                for robot, p in batch.items():
                    self._fail(robot, p, e)

    def _fail(self, robot: str, p: _Pending, err: BaseException) -> None:
        """This session's observation gets the traceback (the server sends it and closes the
        connection 1011); the session is closed here too, so its work is aborted and its text
        routed nowhere even before the connection goes."""
        if not p.future.done():
            p.future.set_exception(err if isinstance(err, SessionFailed) else SessionFailed.of(err))
        with self._cond:
            s = self._sessions.get(robot)
            if s is not None:
                s.closed = True
            self._cond.notify_all()

    def _frame(self, batch: dict[str, _Pending]) -> None:
        """One fleet frame over `batch`. What fails for one session (its requests, its policy
        I/O) fails that session only; once act() has opened the engine's frame, talk() closes
        it whatever happens between them."""
        sessions = {r: self._sessions[r] for r in batch}
        started = {}
        for r in list(batch):
            try:
                started[r] = self._start_requests(sessions[r], batch[r])
            except Exception as err:  # noqa: BLE001 - this session's fault
                self.log(f"session {r}: {type(err).__name__}: {err}")
                self._fail(r, batch.pop(r), err)
        if not batch:
            return
        e = self.model.cfg.expert
        noises = {r: torch.randn(e.horizon, e.action_dim, generator=sessions[r].noise) for r in batch}
        t0 = time.perf_counter()
        chunks = self.engine.act({r: p.obs for r, p in batch.items()}, noises=noises)   # raises: no frame open
        try:
            for robot, chunk in chunks.items():
                s, p = sessions[robot], batch[robot]
                try:
                    actions = self.adapter.actions(chunk.actions, p.state)[:, : s.inputs.action_dims]
                    p.future.set_result({"actions": actions,
                                         "server_timing": {"infer_ms": (time.perf_counter() - t0) * 1e3},
                                         "oxygen/text": self._take_outbox(s), "oxygen/requests": started[robot]})
                except ValueError as err:       # the policy I/O's checks (PolicyIOError)
                    p.future.set_exception(InputError(str(err)))
                except Exception as err:  # noqa: BLE001 - a fault of this session's policy I/O
                    self.log(f"session {robot}: {type(err).__name__}: {err}")
                    self._fail(robot, p, err)
            for robot, why in self.engine.faults.items():
                batch[robot].future.set_exception(InputError(why))
        finally:
            results = self.engine.talk()
        self.frames += 1
        for result in results.values():
            for d in result.deltas:
                self._route(d)
        self._expire_questions()

    def _start_requests(self, s: Session, p: _Pending) -> list[dict]:
        out = []
        for stream, value, timeout in p.requests:
            try:
                rid = self._request(s, stream, value, timeout)
            except (RequestRejected, ValueError) as err:      # ValueError: PromptTooLong, the deadline
                out.append({"stream": stream, "request_id": -1, "error": str(err)})
                continue
            self._owner[rid] = s
            out.append({"stream": stream, "request_id": rid, "error": ""})
        return out

    def _request(self, s: Session, stream: str, value, timeout) -> int:
        """Start one request of the session's (a stream's prompt, or an answer with its deadline)."""
        lang, tokens = self.language, self.language.max_tokens
        if stream != "answer":
            prompt = value if isinstance(value, str) else getattr(lang, f"{stream}_prompt")
            return s.language.start(stream, prompt, tokens)
        return s.language.ask_now(lang.answer_prompt, value, tokens, timeout, s.interval_s)

    def _route(self, d) -> None:
        s = self._owner.get(d.request_id)
        if s is None:
            return
        if d.done:
            del self._owner[d.request_id]
            s.language.finished(d)          # a memory entry joins the session's log
        with self._cond:      # one item per request and reply: its deltas joined
            item = next((i for i in s.outbox if i["request_id"] == d.request_id), None)
            if item is None:
                item = {"request_id": d.request_id, "stream": d.stream, "delta": "", "done": False}
                s.outbox.append(item)
            item["delta"] += d.delta
            if d.done:
                item.update(done=True, full_text=d.full_text, error=d.error)

    def _expire_questions(self) -> None:
        now = time.monotonic()
        for s in list(self._sessions.values()):
            for rid in s.language.expired(now):      # its work stops now; the caller gets the reason
                self._owner.pop(rid, None)
                self.engine.abort(rid)
                with self._cond:
                    s.outbox.append({"request_id": rid, "stream": "answer", "delta": "", "done": True,
                                     "full_text": "", "error": "not answered within its timeout"})

    def _take_outbox(self, s: Session) -> list:
        with self._cond:
            out, s.outbox = s.outbox, []
        return out
