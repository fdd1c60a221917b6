"""One engine serving several robots: their frames batched (OxyGen across robots).

Per fleet frame, over the robots whose observations are given:
1. `act(observations)`: every robot's prefix is built (its own cameras, instruction and
   state), all are prefilled in ONE batched call and their action chunks sampled in ONE
   batch (engine/fleet_batch.py: prefixes of different lengths padded and masked so each
   robot's K/V and chunk are those of its prefix alone); every chunk is handed out before
   any language work.
2. `talk()`: each robot's queued requests are admitted from THAT robot's prefix, the
   pool's free slots shared out fairly (below); then ONE decode batch runs over every live
   request of every robot, from this frame or earlier ones (OxygenEngine's decode step).

A robot missing from a frame's dict is left out of its prefill and action; its live
requests keep decoding, its queued ones wait for its next observation (they start from
its own prefix, never another robot's). A robot whose observation is unusable (whatever
building its prefix raises) is left out too and named in `faults`; the others' chunks
come regardless.

Fairness: while slots are free, admission goes round by round, one request per waiting
robot a round, the robot holding the fewest slots first (ties: a turn that rotates every
frame), so one robot's narration flood never starves another's answer. Each robot has its
own queue bound (`max_queue`); beyond it `submit` raises RequestRejected naming the robot
and the pool's state.

The KV pool and the decode machinery are an OxygenEngine's, whose pool gets one slot per
robot beyond the `max_requests` request slots: robot i's prefix goes in slot
max_requests + i, which no request ever holds, and each admitted request forks it.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
from typing import Hashable

import numpy as np
import torch

from .admission import Backlog
from .fleet_batch import FleetBatch
from .frame import ChunkResult, FrameResult, PhaseTimer
from .layers.engine_model import EngineModel
from .observation.observation import Observation, ObservationError
from .requests import LanguageRequest, RequestRejected, TextDelta
from .scheduler import EngineConfig, OxygenEngine
from .text.tokenizer import Tokenizer

RobotId = Hashable


@dataclasses.dataclass
class _OpenFrame:
    timer: PhaseTimer
    robots: list            # present robots, in slot order
    lengths: list[int]      # their prefix lengths
    chunks: dict            # robot -> ChunkResult


class FleetEngine:
    def __init__(self, model: EngineModel, tokenizer: Tokenizer, config: EngineConfig | None = None,
                 max_robots: int = 4):
        if max_robots < 1:
            raise ValueError(f"a fleet needs max_robots >= 1, got {max_robots}")
        self.config = config or EngineConfig()
        self.max_robots = max_robots
        self.model, self.tok = model, tokenizer
        # the request slots, then one prefix slot per robot (the pool adds one beyond capacity)
        self.core = OxygenEngine(model, tokenizer, dataclasses.replace(
            self.config, max_requests=self.config.max_requests + max_robots - 1))
        self.pool = self.core.pool
        self.batch = FleetBatch(model, self.pool, fused=self.config.fused)
        self.queues: dict[RobotId, collections.deque[LanguageRequest]] = {}   # registration order
        self.owner: dict[int, RobotId] = {}        # request id -> robot, while the request lives
        self.faults: dict[RobotId, str] = {}       # the last act()'s robots left out, and why
        self._counted: dict[int, int] = {}         # request id -> tokens reported so far
        self._turn = 0
        self._next_id = 1
        self._open: _OpenFrame | None = None
        self._noise: dict[RobotId, torch.Generator] = {}   # robot -> its own action noise

    # -- robots and requests ---------------------------------------------------------------
    @property
    def frame_index(self) -> int:
        return self.core.frame_index

    @property
    def robots(self) -> list:
        return list(self.queues)

    def busy(self) -> bool:
        """Whether any robot has a live or queued request."""
        return bool(self.core.live) or any(self.queues.values())

    def live_requests(self, robot: RobotId) -> int:
        return sum(self.owner[lv.req.request_id] == robot for lv in self.core.live)

    def backlog(self, robot: RobotId) -> Backlog:
        """The language work ahead of a new request of `robot` (admission.py estimates from
        it): every live request (they share the slots and the decode batch), then the queued
        requests fair admission lets in first: the robot's own, and of each other robot as
        many as one more than the robot's own (round by round, one a robot). Call it
        between frames, from the thread that runs them."""
        own = len(self.queues.get(robot, ()))
        queued = [r.max_new_tokens for r in self.queues.get(robot, ())]
        for other, queue in self.queues.items():
            if other != robot:
                queued += [r.max_new_tokens for r in list(queue)[:own + 1]]
        return Backlog(live=tuple(lv.req.max_new_tokens - len(lv.tokens) for lv in self.core.live),
                       queued=tuple(queued), slots=self.config.max_requests,
                       steps_per_frame=self.core._last_budget)

    def view(self, robot: RobotId) -> "RobotView":
        """What one robot's own code (its requests, its question estimates) sees of the fleet."""
        self._register(robot)
        return RobotView(self, robot)

    def _register(self, robot: RobotId) -> None:
        if robot not in self.queues:
            if len(self.queues) >= self.max_robots:
                raise ValueError(f"robot {robot!r}: the fleet serves at most {self.max_robots} robots "
                                 f"({', '.join(map(repr, self.queues))})")
            self.queues[robot] = collections.deque()

    def submit(self, robot: RobotId, req: LanguageRequest) -> int:
        """Queue a request of `robot`, admitted from that robot's prefix at its next frame;
        returns its id (unique across the fleet)."""
        try:
            self._register(robot)
            self.core.check_request(req)
        except (RequestRejected, ValueError) as e:
            raise RequestRejected(f"robot {robot!r}: {e}") from e
        queue = self.queues[robot]
        if len(queue) >= self.config.max_queue:
            free = self.config.max_requests - len(self.core.live)
            raise RequestRejected(
                f"robot {robot!r}: {len(queue)} of its requests already wait for a KV slot (max_queue "
                f"{self.config.max_queue}); the pool has {free} of {self.config.max_requests} slots free")
        req.request_id = self._next_id
        self._next_id += 1
        self.owner[req.request_id] = robot
        queue.append(req)
        return req.request_id

    def abort(self, request_id: int) -> bool:
        """Drop a request whose caller has gone (a closed session, an expired question): out
        of its robot's queue, or its KV slot freed at once; the other requests' K/V and
        tokens are unchanged (OxygenEngine.abort). No delta follows. Between frames only.
        True if it was queued or live."""
        if self._open is not None:
            raise RuntimeError("abort() inside a frame: call it before act() or after talk()")
        robot = self.owner.pop(request_id, None)
        self._counted.pop(request_id, None)
        if robot is None:
            return False
        queue = self.queues.get(robot, ())
        for req in queue:
            if req.request_id == request_id:
                queue.remove(req)
                return True
        return self.core.release_request(request_id)

    def forget(self, robot: RobotId) -> int:
        """A robot that has gone: every request of its aborted and its name unregistered, so
        a robot registered later under the same name starts with nothing (no slots held, an
        empty queue, its noise generator from its seed). Between frames only. Returns how
        many requests were dropped."""
        if self._open is not None:
            raise RuntimeError("forget() inside a frame: call it before act() or after talk()")
        mine = [rid for rid, r in self.owner.items() if r == robot]
        for rid in mine:
            self.abort(rid)
        self.queues.pop(robot, None)
        self._noise.pop(robot, None)
        return len(mine)

    # -- the frame ---------------------------------------------------------------------------
    @torch.inference_mode()
    def act(self, observations: dict, noises: dict | None = None, rtc: dict | None = None,
            expert_noise: dict | None = None, expert_rtc: dict | None = None) -> dict:
        """The fleet frame's first half: every given robot's chunk (a ChunkResult by robot),
        from one batched prefill and one batched sampling. `noises`, `rtc` (an RTCGuide),
        `expert_noise` and `expert_rtc` (by expert name) are per robot; noise not given is
        drawn from the robot's own generator (noise_generator). Robots whose observation
        cannot be used are left out and named in `faults`."""
        if self._open is not None:
            raise RuntimeError("act() called twice: call talk() to finish the frame first")
        if len(observations) > self.max_robots:
            raise ValueError(f"{len(observations)} observations for a fleet of at most {self.max_robots} robots")
        timer = PhaseTimer()
        self.core.tokens_this_frame = 0
        self.faults = {}
        robots, prefixes = [], []
        for robot, obs in observations.items():
            try:
                self._register(robot)
                prefix = self.core.prefix_embeddings(obs, timer)
                self.batch.check_length(prefix.shape[1])
            except (ObservationError, ValueError) as e:
                self.faults[robot] = str(e)       # this robot only: the others go on
                continue
            except Exception as e:  # noqa: BLE001 - a bad observation that slipped past the checks
                self.faults[robot] = f"{type(e).__name__}: {e}"     # is still this robot's alone
                continue
            robots.append(robot)
            prefixes.append(prefix)
        noises, rtc = noises or {}, rtc or {}
        guided = {r for r in robots if rtc.get(r) is not None and rtc[r].active(self.batch.horizon())}
        order = sorted(range(len(robots)), key=lambda i: robots[i] in guided)   # the batch's rows first
        robots, prefixes = [robots[i] for i in order], [prefixes[i] for i in order]
        e = self.model.cfg.expert
        noise = [self.core.frame_noise(noises[r] if noises.get(r) is not None else
                                       torch.randn(e.horizon, e.action_dim, generator=self.noise_generator(r)))
                 for r in robots]
        first = self.config.max_requests          # robot i's prefix slot: first + i
        lengths = [p.shape[1] for p in prefixes]
        actions: dict = {}
        ready: dict = {}
        extra: dict = {r: {} for r in robots}
        # one robot alone takes the single-robot path (its fused sampling, where built): a batch of
        # one gains nothing and the batched sampling is eager, slower (docs/benchmark.md, fleet mode)
        if self.batch.batched and len(robots) > 1:
            with timer("prefill"):
                span = self.batch.prefill(prefixes, first)
            plain = len(robots) - len(guided)     # rows 0..plain-1: one batch; the guided ones alone
            with timer("action"):
                if plain:
                    out = self.batch.sample(lengths[:plain], span, noise[:plain], first)
                    actions.update(zip(robots[:plain], out))
                    mark = timer.mark("chunk")
                    ready.update(dict.fromkeys(robots[:plain], mark))
                for i in range(plain, len(robots)):
                    actions[robots[i]] = self.batch.sample_one(prefixes[i], first + i, noise[i], rtc[robots[i]])
                    ready[robots[i]] = timer.mark("chunk")
        else:
            for i, robot in enumerate(robots):      # in turn: same results, not batched
                with timer("prefill"):
                    self.batch.prefill_one(prefixes[i], first + i)
                with timer("action"):
                    actions[robot] = self.batch.sample_one(prefixes[i], first + i, noise[i], rtc.get(robot))
                ready[robot] = timer.mark("chunk")
                extra[robot] = self.core.run_extra_experts(self.pool, first + i, lengths[i], prefixes[i], timer,
                                                           self._expert_noise(robot, (expert_noise or {}).get(robot)),
                                                           (expert_rtc or {}).get(robot))
        chunks = {}
        for robot in robots:
            times = {**timer.ms, **timer.marks, "chunk": ready[robot]}
            chunks[robot] = ChunkResult(self.frame_index, actions[robot].float().cpu().numpy(), times, extra[robot])
        self._open = _OpenFrame(timer, robots, lengths, chunks)
        return chunks

    @torch.inference_mode()
    def talk(self) -> dict:
        """The fleet frame's second half: admit each present robot's queued requests from its
        own prefix (fairly), then one decode batch over every robot's live requests. Returns
        a FrameResult per robot that was in the frame or got text (a robot absent from the
        frame has `actions` None)."""
        if self._open is None:
            raise RuntimeError("talk() without act(): no frame is open")
        frame, self._open = self._open, None
        timer = frame.timer
        deltas: list[TextDelta] = []
        with timer("admit"):
            self._admit(frame.robots, frame.lengths, deltas)
        steps = self.core.decode_phase(timer, deltas)
        results = self._results(frame, deltas, steps)
        self._turn += 1
        self.core.frame_index += 1
        return results

    def noise_generator(self, robot: RobotId) -> torch.Generator:
        """The robot's own action-noise generator, seeded from the engine's seed and the
        robot's name: one generator shared by the fleet would make a robot's chunk depend on
        which other robots were in the frames before (how many draws they took)."""
        gen = self._noise.get(robot)
        if gen is None:
            digest = hashlib.sha256(f"{self.config.seed}/{robot}".encode()).digest()
            gen = self._noise[robot] = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
        return gen

    def _expert_noise(self, robot: RobotId, given: dict | None) -> dict:
        """Each further expert's noise: as given, else from the robot's own generator."""
        given = dict(given or {})
        for expert in self.core.extra_experts():
            if given.get(expert.name) is None:
                given[expert.name] = torch.randn(expert.cfg.horizon, expert.cfg.action_dim,
                                                 generator=self.noise_generator(robot))
        return given

    def step(self, observations: dict, noises: dict | None = None, rtc: dict | None = None,
             expert_noise: dict | None = None, expert_rtc: dict | None = None) -> dict:
        """A whole fleet frame: act() then talk()."""
        self.act(observations, noises, rtc, expert_noise, expert_rtc)
        return self.talk()

    # -- admission -----------------------------------------------------------------------------
    def _admit(self, robots: list, lengths: list[int], deltas: list[TextDelta]) -> None:
        """Fill the free slots round by round, one request per waiting present robot a round,
        the robot holding the fewest slots first; then prefill each robot's prompts from its
        prefix (slot order: robots in frame order, so the slots stay dense)."""
        free = self.config.max_requests - len(self.core.live)
        held = collections.Counter(self.owner[lv.req.request_id] for lv in self.core.live)
        everyone = list(self.queues)
        turn = {r: (everyone.index(r) - self._turn) % len(everyone) for r in robots}
        plen = dict(zip(robots, lengths))
        picked: dict = {r: [] for r in robots}
        while free > 0:
            waiting = [r for r in robots if self.queues[r]]
            if not waiting:
                break
            for robot in sorted(waiting, key=lambda r: (held[r], turn[r])):
                if free == 0:
                    break
                queue = self.queues[robot]
                while queue:                 # a request that cannot fit ends with its error delta
                    req = queue.popleft()
                    ids = self.core.admissible_ids(req, plen[robot], deltas)
                    if ids is not None:
                        picked[robot].append((req, ids))
                        held[robot] += 1
                        free -= 1
                        break
        first = self.config.max_requests
        for i, robot in enumerate(robots):
            self.core.start_requests(picked[robot], first + i, plen[robot], deltas)

    # -- results -------------------------------------------------------------------------------
    def _results(self, frame: _OpenFrame, deltas: list[TextDelta], steps: int) -> dict:
        mine: dict = {r: [] for r in frame.robots}
        tokens = collections.Counter()
        for d in deltas:
            robot = self.owner[d.request_id]
            mine.setdefault(robot, []).append(d)
            tokens[robot] += d.token_count - self._counted.get(d.request_id, 0)
            self._counted[d.request_id] = d.token_count
            if d.done:
                self._counted.pop(d.request_id, None)
        per_token = self.pool.bytes_per_token
        kv = collections.Counter()
        live = collections.Counter()
        for slot, lv in enumerate(self.core.live):
            robot = self.owner[lv.req.request_id]
            kv[robot] += self.pool.lengths[slot] * per_token
            live[robot] += 1
        timings = frame.timer.result()
        results = {}
        for robot, robot_deltas in mine.items():
            chunk = frame.chunks.get(robot)
            results[robot] = FrameResult(
                frame_index=self.frame_index, actions=None if chunk is None else chunk.actions,
                deltas=robot_deltas,
                timings_ms={**timings, "chunk": chunk.timings_ms["chunk"]} if chunk else timings,
                expert_actions={} if chunk is None else chunk.expert_actions, decode_steps=steps,
                live_requests=live[robot], queued_requests=len(self.queues[robot]),
                tokens_emitted=tokens[robot], kv_bytes_in_use=kv[robot])
        for d in deltas:
            if d.done:
                self.owner.pop(d.request_id, None)
        return results


class RobotView:
    """One robot's side of a FleetEngine, with the surface of an OxygenEngine that the
    per-robot code uses (submit, prompt_tokens, backlog, config, pool, frame_index); frames are the fleet's."""

    def __init__(self, fleet: FleetEngine, robot: RobotId):
        self.fleet, self.robot = fleet, robot

    @property
    def config(self) -> EngineConfig:
        return self.fleet.config

    @property
    def pool(self):
        return self.fleet.pool

    @property
    def frame_index(self) -> int:
        return self.fleet.frame_index

    def submit(self, req: LanguageRequest) -> int:
        return self.fleet.submit(self.robot, req)

    def prompt_tokens(self, prompt: str) -> int:
        return self.fleet.core.prompt_tokens(prompt)

    def backlog(self) -> Backlog:
        return self.fleet.backlog(self.robot)


class FleetOfOne:
    """An OxygenEngine behind FleetEngine's frame API (dicts by robot), so one loop drives
    a node that serves one robot and one that serves several; the one robot keeps
    OxygenEngine's own paths (chunk and CUDA graphs, RTC, further experts)."""

    def __init__(self, engine: OxygenEngine, robot: RobotId = ""):
        self.engine, self.robot = engine, robot
        self.faults: dict[RobotId, str] = {}
        self._acted = False

    def act(self, observations: dict, rtc: dict | None = None, expert_rtc: dict | None = None) -> dict:
        self.faults, self._acted = {}, False
        if self.robot not in observations:
            return {}
        try:
            chunk = self.engine.act(observations[self.robot], rtc=(rtc or {}).get(self.robot),
                                    expert_rtc=(expert_rtc or {}).get(self.robot))
        except (ObservationError, ValueError) as e:
            self.faults[self.robot] = str(e)
            return {}
        self._acted = True
        return {self.robot: chunk}

    def talk(self) -> dict:
        """The frame's language, if act() made a chunk (no frame is open otherwise)."""
        if not self._acted:
            return {}
        self._acted = False
        return {self.robot: self.engine.talk()}
