"""The OxyGen frame scheduler: one shared prefill per frame, cross-frame batched decoding.

Per frame: prefill the observation once into the pool's staging slot; the action expert
denoises against it and the chunk is handed out (`act`); then (`talk`) queued language requests are admitted from that same prefix (the
first takes the staging slot itself, others fork it; with CUDA graphs the prefix sits in
the reserved extra slot and every request forks it) with their prompts prefilled in
one batch; then every live request, whatever frame it started in, decodes k steps in
one batched call per step. Finished requests free their slot; the rest carry over.
"""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import numpy as np
import torch

from . import native
from .admission import Backlog
from .chunk_graphs import ChunkStep
from .decode_graphs import DecodeStep
from .frame import ChunkResult, FrameResult, PhaseTimer
from .layers.engine_model import EngineModel
from .observation.observation import Observation
from .requests import LanguageRequest, RequestRejected, TextDelta
from .text.tokenizer import TextStream, Tokenizer
from .transfer import to_device


@dataclass
class EngineConfig:
    max_requests: int = 8          # KV pool slots for live language requests
    max_queue: int = 16            # requests waiting for a slot beyond the free ones
    max_len: int = 0               # KV entries per slot; 0 = derived from the profile
    max_new_tokens: int = 64       # upper bound accepted per request
    steps_per_frame: int = 1       # decode budget k; 0 = automatic (fit `period_s`)
    period_s: float = 0.1          # control period used by the automatic budget
    max_auto_steps: int = 32
    cameras: int = 0               # cameras in use (0 = every camera slot); sizes the slots
    cuda_graphs: bool = True       # replay prefill, action chunk and decode step from CUDA graphs (CUDA only)
    fused: bool = True             # native fused action sampling where built (CPU; else eager)
    seed: int = 0

    def slot_len(self, model: EngineModel) -> int:
        """KV entries per slot: the prefix (images, task + state), a request's prompt and
        its new tokens (or the action chunk, which uses the slot tail during a frame)."""
        if self.max_len:
            return self.max_len
        c = model.cfg
        cams = (self.cameras or len(c.camera_slots)) * c.vision.tokens_per_image
        return cams + 2 * c.max_prompt_tokens + max(self.max_new_tokens, c.expert.tokens)


@dataclass
class LiveRequest:
    req: LanguageRequest
    tokens: list[int]
    length: int               # valid KV entries in the slot (the newest token not yet written)
    text: TextStream


class EngineBase:
    """Shared parts: request intake, prefix construction, token bookkeeping."""

    def __init__(self, model: EngineModel, tokenizer: Tokenizer, config: EngineConfig | None = None):
        if model.cfg.expert is None:
            raise ValueError(f"{model.cfg.name} has no action head (a language-only model), and an engine "
                             "samples an action chunk every frame: generate text with "
                             "engine.generate.greedy_generate (oxygen generate)")
        self.model, self.tok = model, tokenizer
        self.config = config or EngineConfig()
        self.frame_index = 0
        self.pending: collections.deque[LanguageRequest] = collections.deque()
        self._next_id = 1
        self._noise = torch.Generator().manual_seed(self.config.seed)
        self.tokens_this_frame = 0
        if self.config.fused and model.device.type == "cpu":
            native.available()      # build or load now, not during the first frame

    # -- intake ------------------------------------------------------------------------
    def capacity_left(self) -> int:
        return self.config.max_queue - len(self.pending)

    def submit(self, req: LanguageRequest) -> int:
        """Queue a request for admission at the next frame; returns its id."""
        self.check_request(req)
        if self.capacity_left() <= 0:
            raise RequestRejected(
                f"too many language requests waiting ({len(self.pending)} queued); try again later")
        req.request_id = self._next_id
        self._next_id += 1
        self.pending.append(req)
        return req.request_id

    def check_request(self, req: LanguageRequest) -> None:
        """RequestRejected if the request itself cannot be served (its prompt, its token limit)."""
        if not req.prompt or not req.prompt.strip():
            raise RequestRejected("empty prompt")
        n = self.prompt_tokens(req.prompt)  # RequestRejected where it names a part the model lacks
        limit = self.model.cfg.max_prompt_tokens
        if n > limit:
            raise RequestRejected(f"prompt has {n} tokens, the limit is {limit}")
        if not 1 <= req.max_new_tokens <= self.config.max_new_tokens:
            raise RequestRejected(
                f"max_new_tokens must be in 1..{self.config.max_new_tokens}, got {req.max_new_tokens}")

    # -- helpers -------------------------------------------------------------------------
    def prefix_embeddings(self, obs: Observation, timer: PhaseTimer):
        """The frame's prefix, as the model builds it from the observation (pi0.5-style:
        embeddings [1, L, W]; Qwen3-VL: models/qwen3vl/modeling.Prefix)."""
        with timer("vision"):
            return self.model.observation_prefix(obs, self.tok)

    def frame_noise(self, noise) -> torch.Tensor:
        e = self.model.cfg.expert
        if noise is None:
            return torch.randn(e.horizon, e.action_dim, generator=self._noise)
        return torch.as_tensor(noise, dtype=torch.float32).reshape(e.horizon, e.action_dim)

    def extra_experts(self) -> tuple:
        """The model's further action experts (models/qwen3vl/configuration.ExtraExpert), after its first."""
        return self.model.cfg.extra_experts

    def expert_noise(self, expert, given: dict | None) -> torch.Tensor:
        e = expert.cfg
        noise = (given or {}).get(expert.name)
        if noise is None:
            return torch.randn(e.horizon, e.action_dim, generator=self._noise)
        return torch.as_tensor(noise, dtype=torch.float32).reshape(e.horizon, e.action_dim)

    def run_extra_experts(self, pool, slot: int, plen: int, prefix, timer: PhaseTimer,
                          expert_noise: dict | None = None, expert_rtc: dict | None = None) -> dict:
        """Every further expert's chunk on the frame's prefix in `slot`, in order (guided by
        its RTCGuide in `expert_rtc`, by name, where given), each timed as phase
        "action:<name>" and marked "chunk:<name>" when ready."""
        out = {}
        for i, expert in enumerate(self.extra_experts(), start=1):
            noise = self.expert_noise(expert, expert_noise)
            with timer(f"action:{expert.name}"):
                chunk = self.model.sample_actions(pool, slot, plen, noise, rtc=(expert_rtc or {}).get(expert.name),
                                                  prefix=prefix, expert=i)
                out[expert.name] = chunk.float().cpu().numpy()
            timer.mark(f"chunk:{expert.name}")
        return out

    def prompt_ids(self, req: LanguageRequest) -> list[int]:
        return self.model.request_ids(self.tok, req.prompt)

    def prompt_tokens(self, prompt: str) -> int:
        """The tokens `prompt` takes against the prompt limit (check_request's count; a learned
        prompt's marker is its rows). RequestRejected where it names a part the model lacks."""
        return len(self.model.request_ids(self.tok, prompt))

    def accept_token(self, live: LiveRequest, token: int, deltas: list[TextDelta]) -> bool:
        """Record a generated token and its text delta; True when the request is done."""
        req = live.req
        is_eos = token in self.tok.eos_ids and not req.ignore_eos
        if not is_eos:
            live.tokens.append(token)
            self.tokens_this_frame += 1
        text = "" if is_eos else live.text.push(token)
        done = is_eos or len(live.tokens) >= req.max_new_tokens
        if done:
            text += live.text.close()
        deltas.append(TextDelta(req.request_id, req.stream, req.start_frame, text,
                                len(live.tokens), done, live.text.text if done else ""))
        return done


class OxygenEngine(EngineBase):
    """The OxyGen scheduler (see the module docstring).

    Each live slot's newest token (not yet in the KV) stays on the device in
    `_next_ids`, so decoding needs nothing from the host. With `sync_every_step`
    (the CPU default, where a transfer is free) tokens are read after admission and
    after every decode step, and the loop stops once every request is done. Without it
    (GPU) a frame has a single device-to-host transfer, at its end, of the admitted
    requests' first tokens and all k steps' tokens; a request that finished earlier
    in the frame rides along and its extra tokens are dropped.
    """

    def __init__(self, model: EngineModel, tokenizer: Tokenizer, config: EngineConfig | None = None):
        super().__init__(model, tokenizer, config)
        self.pool = model.new_pool(self.config.max_requests, self.config.slot_len(model))
        self.live: list[LiveRequest] = []          # live[i] holds pool slot i
        self.decoder = DecodeStep(model, self.pool, graphs=self.config.cuda_graphs)
        self.chunk = ChunkStep(model, self.pool, graphs=self.config.cuda_graphs, fused=self.config.fused)
        if self.decoder.graphs:
            self.decoder.capture_all()       # now, while the pool is empty, not mid-frame
        if self.chunk.graphs:
            self.chunk.capture_all()         # prefill + chunk per prefix bucket, likewise
        self.sync_every_step = model.device.type == "cpu"
        self._next_ids = torch.zeros(self.pool.capacity + 1, dtype=torch.long, device=model.device)
        self._unread_first: tuple[int, torch.Tensor] | None = None   # (first slot, tokens)
        self._step_ms = None                 # smoothed cost of one decode step (auto budget)
        self._last_budget = 1                # the last frame's decode budget k (backlog)
        self._open = None                    # the frame between act() and talk()

    def capacity_left(self) -> int:
        return self.pool.free_slots + self.config.max_queue - len(self.pending)

    def backlog(self) -> Backlog:
        """The language work the engine holds now (engine/admission.py estimates from it);
        call it between frames, from the thread that runs them."""
        return Backlog(live=tuple(lv.req.max_new_tokens - len(lv.tokens) for lv in self.live),
                       queued=tuple(r.max_new_tokens for r in self.pending),
                       slots=self.config.max_requests, steps_per_frame=self._last_budget)

    @torch.inference_mode()
    def act(self, obs: Observation, noise=None, rtc=None, expert_noise: dict | None = None,
            expert_rtc: dict | None = None) -> ChunkResult:
        """The frame's first half: prefill the observation once and sample the action
        chunk (guided by `rtc`, an engine.rtc.RTCGuide, where given), then every further
        expert's on the same prefix (`expert_noise`, `expert_rtc`: their noise and guides by
        name). The chunks are
        handed out before any language work, so a caller publishes them at once; `talk()`
        then admits and decodes and finishes the frame."""
        if self._open is not None:
            raise RuntimeError("act() called twice: call talk() to finish the frame first")
        timer = PhaseTimer()
        self.tokens_this_frame = 0
        prefix = self.prefix_embeddings(obs, timer)
        plen = prefix.shape[1]
        staging = self.chunk.slot
        with timer("prefill"):
            self.chunk.prefill(prefix)
        with timer("action"):
            actions = self.chunk.sample(plen, self.frame_noise(noise), rtc).float().cpu().numpy()
        timer.mark("chunk")
        extra = self.run_extra_experts(self.pool, staging, plen, prefix, timer, expert_noise, expert_rtc)
        self._open = (timer, staging, plen, actions, extra)
        return ChunkResult(self.frame_index, actions, {**timer.ms, **timer.marks}, extra)

    @torch.inference_mode()
    def talk(self) -> FrameResult:
        """The frame's second half: admit queued requests from this frame's prefix and run
        the decode budget over every live request. Returns the whole frame's result."""
        if self._open is None:
            raise RuntimeError("talk() without act(): no frame is open")
        (timer, staging, plen, actions, extra), self._open = self._open, None
        deltas: list[TextDelta] = []
        with timer("admit"):
            self._admit(staging, plen, deltas)
        steps = self.decode_phase(timer, deltas)
        result = FrameResult(
            frame_index=self.frame_index, actions=actions, deltas=deltas,
            timings_ms=timer.result(), expert_actions=extra, decode_steps=steps, live_requests=len(self.live),
            queued_requests=len(self.pending),
            tokens_emitted=self.tokens_this_frame,
            kv_bytes_in_use=self.pool.bytes_in_use())
        self.frame_index += 1
        return result

    def decode_phase(self, timer: PhaseTimer, deltas: list[TextDelta]) -> int:
        """The frame's decode budget over every live request (phase "decode"), its tokens
        read; returns the steps run. (talk(), and engine/fleet.py for a fleet's frame.)"""
        k = self._last_budget = self._decode_budget(timer)
        with timer("decode"):
            steps = self._decode(k, deltas)
            if self._unread_first is not None:
                self._collect(None, deltas)
        if steps:
            per_step = timer.ms["decode"] / steps
            self._step_ms = per_step if self._step_ms is None else 0.7 * self._step_ms + 0.3 * per_step
        return steps

    def warm_up(self, obs: Observation, rtc=None, expert_rtc: dict | None = None) -> float:
        """The frame's first half once, outside any frame (nothing counted, no noise drawn,
        nothing admitted), so one-time costs of a path, such as RTC's first backward pass,
        are paid at configure and not by the first chunks. Returns its milliseconds."""
        t0 = time.perf_counter()
        e = self.model.cfg.expert
        zeros = {x.name: torch.zeros(x.cfg.horizon, x.cfg.action_dim) for x in self.extra_experts()}
        self.act(obs, torch.zeros(e.horizon, e.action_dim), rtc, zeros, expert_rtc)
        self._open = None
        return (time.perf_counter() - t0) * 1e3

    def step(self, obs: Observation, noise=None, rtc=None, expert_noise: dict | None = None,
             expert_rtc: dict | None = None) -> FrameResult:
        """A whole frame: act() then talk()."""
        self.act(obs, noise, rtc, expert_noise, expert_rtc)
        return self.talk()

    def _admit(self, staging: int, plen: int, deltas: list[TextDelta]) -> None:
        batch: list[tuple[LanguageRequest, list[int]]] = []
        while self.pending and len(batch) < self.pool.free_slots:
            req = self.pending.popleft()
            ids = self.admissible_ids(req, plen, deltas)
            if ids is not None:
                batch.append((req, ids))
        self.start_requests(batch, staging, plen, deltas)

    def admissible_ids(self, req: LanguageRequest, plen: int, deltas: list[TextDelta]) -> list[int] | None:
        """The request's prompt ids, or None (and a finished delta with the error) when the
        prefix, its prompt and its new tokens do not fit in a slot."""
        ids = self.prompt_ids(req)
        if plen + len(ids) + req.max_new_tokens > self.pool.max_len:
            deltas.append(TextDelta(req.request_id, req.stream, self.frame_index, "", 0, True, "",
                                    error=f"request needs {plen + len(ids) + req.max_new_tokens} KV "
                                          f"entries, a slot holds {self.pool.max_len}"))
            return None
        return ids

    def start_requests(self, batch: list[tuple[LanguageRequest, list[int]]], staging: int, plen: int,
                       deltas: list[TextDelta]) -> None:
        """Admit `batch` from the prefix of `plen` entries in slot `staging`: each request
        forks it into the next free slot (or takes it, when `staging` is that slot) and the
        prompts are prefilled in one batched call; their first tokens come from the prompts'
        last positions. Several calls in one frame (a fleet: one per robot's prefix) leave
        their first tokens to be read together."""
        if not batch:
            return
        first_slot = self.pool.staging_slot      # the batch's slots: first_slot.. (no holes)
        for i in range(len(batch)):
            if first_slot + i != staging:
                self.pool.copy_prefix(staging, first_slot + i, plen)   # fork the shared prefix
        width = max(len(ids) for _, ids in batch)
        padded = torch.zeros(len(batch), width, dtype=torch.long)
        for row, (_, ids) in enumerate(batch):
            padded[row, : len(ids)] = torch.tensor(ids)
        hidden = self.model.extend(to_device(padded, self.model.device), self.pool, first_slot, plen)
        last = to_device([len(ids) - 1 for _, ids in batch], hidden.device)
        first = self.model.greedy_next(hidden[torch.arange(len(batch), device=hidden.device), last])
        for req, ids in batch:
            req.start_frame = self.frame_index
            slot = self.pool.claim(plen + len(ids))
            assert slot == len(self.live)
            self.live.append(LiveRequest(req, [], plen + len(ids), TextStream(self.tok)))
        self._next_ids[first_slot:first_slot + len(batch)] = first
        if self._unread_first is not None:     # an earlier batch of this frame, just before these slots
            earlier_slot, earlier = self._unread_first
            assert earlier_slot + earlier.shape[0] == first_slot
            first_slot, first = earlier_slot, torch.cat([earlier, first])
        self._unread_first = (first_slot, first)
        if self.sync_every_step:
            self._collect(None, deltas)

    def _decode(self, k: int, deltas: list[TextDelta]) -> int:
        """Up to k batched decode steps over every live request; returns the steps run."""
        if not self.live:
            return 0
        budget = min(k, max(lv.req.max_new_tokens - len(lv.tokens) for lv in self.live))
        per_sync = 1 if self.sync_every_step else budget
        steps = 0
        while steps < budget and self.live:
            n = min(per_sync, budget - steps)
            self._decode_steps(n, deltas)
            steps += n
        return steps

    def _decode_steps(self, n: int, deltas: list[TextDelta]) -> None:
        """n batched steps, then one host transfer of their tokens."""
        b = len(self.live)
        start = [lv.length for lv in self.live]
        lengths = to_device(start, self.model.device)
        top = self.pool.max_len - 1      # writes of finished riders stay inside their slot
        ids = self._next_ids[:b]
        produced = []
        for s in range(n):
            ids = self.decoder(ids, lengths, min(max(start) + s, top) + 1)
            produced.append(ids)
            lengths = (lengths + 1).clamp_(max=top)
        self._next_ids[:b] = ids
        self._collect(torch.stack(produced, dim=1), deltas)

    def _collect(self, stepped: torch.Tensor | None, deltas: list[TextDelta]) -> None:
        """Account for new tokens: admitted requests' first tokens (if not yet read) and
        `stepped` [live, n] from decode steps. Finished requests are released after."""
        fresh_slot, fresh = self._unread_first or (len(self.live), None)
        parts = [t.reshape(-1) for t in (fresh, stepped) if t is not None]
        flat = torch.cat(parts).tolist() if parts else []      # the one host transfer
        n_fresh = 0 if fresh is None else fresh.shape[0]
        per_row = 0 if stepped is None else stepped.shape[1]
        self._unread_first = None
        finished = []
        for slot, lv in enumerate(self.live):
            if fresh_slot <= slot < fresh_slot + n_fresh:
                if self.accept_token(lv, flat[slot - fresh_slot], deltas):
                    finished.append(slot)
                    continue
            row = flat[n_fresh + slot * per_row: n_fresh + (slot + 1) * per_row]
            for token in row:
                lv.length += 1
                if self.accept_token(lv, token, deltas):
                    finished.append(slot)
                    break
            self.pool.lengths[slot] = lv.length
        self._release(finished)

    def abort(self, request_id: int) -> bool:
        """Drop a request whose caller has gone: out of the queue, or its KV slot freed at
        once (the last live slot moves into the hole, as when a request finishes, so the
        others' K/V and tokens are unchanged). No delta follows. Between frames only (the
        open frame's staging slot sits past the live ones). True if it was queued or live."""
        if self._open is not None:
            raise RuntimeError("abort() inside a frame: call it before act() or after talk()")
        for req in self.pending:
            if req.request_id == request_id:
                self.pending.remove(req)
                return True
        return self.release_request(request_id)

    def release_request(self, request_id: int) -> bool:
        """Free a live request's slot now (abort's live half; FleetEngine's too)."""
        for slot, lv in enumerate(self.live):
            if lv.req.request_id == request_id:
                self._release([slot])
                return True
        return False

    def _release(self, slots: list[int]) -> None:
        for slot in sorted(slots, reverse=True):
            moved = self.pool.release(slot)
            if moved is not None:
                self.live[slot] = self.live[moved]
                self._next_ids[slot] = self._next_ids[moved]
            self.live.pop()

    def _decode_budget(self, timer: PhaseTimer) -> int:
        k = self.config.steps_per_frame
        if k > 0:
            return k
        if self._step_ms is None:
            return 1
        spent = (time.perf_counter() - timer._t0) * 1e3
        left = self.config.period_s * 1e3 - spent
        return int(np.clip(left // self._step_ms, 1, self.config.max_auto_steps))
