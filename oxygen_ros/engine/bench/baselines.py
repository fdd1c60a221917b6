"""The baselines OxyGen is measured against, built from the same model code.

- isolated_*: one task alone (its own prefill), the exactness reference.
- SequentialEngine: isolated execution of every task in the frame, one after another.
- SharedEngine: one prefill shared by all tasks, language decoded to completion in-frame.
- ParallelEngine: action and language on separate threads, each with its own model copy.
"""
from __future__ import annotations

import copy
import queue
import threading

import torch

from ..frame import FrameResult, PhaseTimer
from ..layers.engine_model import EngineModel
from ..observation.observation import Observation
from ..requests import LanguageRequest, TextDelta
from ..scheduler import EngineBase, EngineConfig, OxygenEngine, LiveRequest
from ..text.tokenizer import TextStream, Tokenizer


class IsolatedRunner(EngineBase):
    """Runs one task at a time with a private one-slot pool."""

    def __init__(self, model: EngineModel, tokenizer: Tokenizer, config: EngineConfig | None = None):
        super().__init__(model, tokenizer, config)
        self.pool = model.new_pool(1, self.config.slot_len(model))
        self.gate: threading.Event | None = None    # when set: decoding waits while it is clear

    @torch.inference_mode()
    def action(self, obs: Observation, noise, timer: PhaseTimer | None = None, rtc=None) -> torch.Tensor:
        """The action chunk alone (its own prefill); marks "chunk" on the timer when ready."""
        timer = timer or PhaseTimer()
        prefix = self.prefix_embeddings(obs, timer)
        with timer("prefill"):
            self.model.prefill(prefix, self.pool, 0)
        with timer("action"):
            actions = self.model.sample_actions(self.pool, 0, prefix.shape[1], self.frame_noise(noise),
                                                self.config.fused, rtc, prefix=prefix)
        timer.mark("chunk")
        return actions

    @torch.inference_mode()
    def expert_action(self, obs: Observation, name: str, noise, timer: PhaseTimer | None = None, rtc=None):
        """A further expert's chunk alone (numpy [H, D]), from its own prefill (guided by
        `rtc` where given)."""
        timer = timer or PhaseTimer()
        prefix = self.prefix_embeddings(obs, timer)
        with timer("prefill"):
            self.model.prefill(prefix, self.pool, 0)
        names = [e.name for e in self.extra_experts()]
        expert = self.extra_experts()[names.index(name)]
        with timer(f"action:{name}"):
            chunk = self.model.sample_actions(self.pool, 0, prefix.shape[1], self.expert_noise(expert, {name: noise}),
                                              rtc=rtc, prefix=prefix, expert=names.index(name) + 1)
        return chunk.float().cpu().numpy()

    @torch.inference_mode()
    def language(self, obs: Observation, req: LanguageRequest, timer: PhaseTimer | None = None,
                 deltas: list[TextDelta] | None = None) -> list[int]:
        """Greedy-decode one request alone from its own prefill; returns its tokens."""
        timer = timer or PhaseTimer()
        deltas = [] if deltas is None else deltas
        prefix = self.prefix_embeddings(obs, timer)
        plen = prefix.shape[1]
        with timer("prefill"):
            self.model.prefill(prefix, self.pool, 0)
        ids = self.prompt_ids(req)
        with timer("admit"):
            hidden = self.model.extend(torch.tensor([ids], device=self.model.device), self.pool, 0, plen)
            token = int(self.model.greedy_next(hidden[:, -1])[0])
        live = LiveRequest(req, [], plen + len(ids), TextStream(self.tok))
        done = self.accept_token(live, token, deltas)
        with timer("decode"):
            while not done:
                if self.gate is not None:
                    self.gate.wait()
                nxt = self.model.decode(torch.tensor([live.tokens[-1]], device=self.model.device),
                                        self.pool, torch.tensor([live.length], device=self.model.device))
                live.length += 1
                done = self.accept_token(live, int(nxt[0]), deltas)
        return live.tokens


class SequentialEngine(IsolatedRunner):
    """Isolated execution: the action with its own prefill, then each request alone."""

    def step(self, obs: Observation, noise=None, rtc=None, expert_noise: dict | None = None,
             expert_rtc: dict | None = None) -> FrameResult:
        timer = PhaseTimer()
        self.tokens_this_frame = 0
        actions = self.action(obs, noise, timer, rtc)
        # every further expert alone too: its own prefill, as without a shared prefix
        extra = {e.name: self.expert_action(obs, e.name, self.expert_noise(e, expert_noise), timer,
                                            (expert_rtc or {}).get(e.name))
                 for e in self.extra_experts()}
        deltas: list[TextDelta] = []
        while self.pending:
            req = self.pending.popleft()
            req.start_frame = self.frame_index
            self.language(obs, req, timer, deltas)
        res = _result(self, actions, deltas, timer, live=0, kv=0)
        res.expert_actions = extra
        return res


class SharedEngine(OxygenEngine):
    """One shared prefill; every request decoded to completion inside its frame."""

    def _decode_budget(self, timer: PhaseTimer) -> int:
        return 1 << 30


class ParallelEngine(EngineBase):
    """Naive parallelism: an action worker (this thread) and a language worker thread,
    each with its own copy of the model; requests run alone to completion in the worker."""

    def __init__(self, model: EngineModel, tokenizer: Tokenizer, config: EngineConfig | None = None):
        super().__init__(model, tokenizer, config)
        self.actor = IsolatedRunner(model, tokenizer, self.config)
        self.talker = IsolatedRunner(copy.deepcopy(model), tokenizer, self.config)
        self._jobs: queue.Queue = queue.Queue()
        self._out: queue.Queue = queue.Queue()
        self._counted: dict[int, int] = {}
        self._running = threading.Event()
        self._running.set()
        self.talker.gate = self._running
        self._thread = threading.Thread(target=self._work, daemon=True)
        self._thread.start()

    def _work(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._running.wait()
            obs, req = job
            deltas: list[TextDelta] = []
            self.talker.language(obs, req, deltas=deltas)
            for d in deltas:
                self._out.put(d)

    def step(self, obs: Observation, noise=None, rtc=None) -> FrameResult:
        timer = PhaseTimer()
        while self.pending:
            req = self.pending.popleft()
            req.start_frame = self.frame_index
            self._jobs.put((obs, req))
        actions = self.actor.action(obs, noise, timer, rtc)
        deltas = []
        while not self._out.empty():
            deltas.append(self._out.get_nowait())
        self.tokens_this_frame = 0
        for d in deltas:
            self.tokens_this_frame += d.token_count - self._counted.get(d.request_id, 0)
            self._counted[d.request_id] = d.token_count
        return _result(self, actions, deltas, timer, live=self._jobs.qsize(), kv=0)

    def pause(self):
        """Hold the language worker at its next token (the benchmark's other modes' rounds)."""
        self._running.clear()

    def resume(self):
        self._running.set()

    def close(self):
        """Stop the worker; requests not yet started are dropped."""
        self._running.set()
        while not self._jobs.empty():
            self._jobs.get_nowait()
        self._jobs.put(None)
        self._thread.join(timeout=60)


def _result(engine: EngineBase, actions, deltas, timer, live: int, kv: int) -> FrameResult:
    res = FrameResult(frame_index=engine.frame_index, actions=actions.float().cpu().numpy(),
                      deltas=deltas, timings_ms=timer.result(),
                      live_requests=live, queued_requests=len(engine.pending),
                      tokens_emitted=engine.tokens_this_frame, kv_bytes_in_use=kv)
    engine.frame_index += 1
    return res
