"""A fleet engine's frames equal each robot served alone: one batched prefill and action
sampling over robots with prefixes of different lengths, one decode batch over every
robot's requests, fair admission across robots."""
import numpy as np
import pytest
import torch

from engine_fixtures import observation, tiny
from oxygen_ros.engine.bench.baselines import IsolatedRunner
from oxygen_ros.engine.fleet import FleetEngine
from oxygen_ros.engine.requests import LanguageRequest, RequestRejected
from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine

ROBOTS = ("r0", "r1", "r2")


@pytest.fixture(autouse=True)
def few_denoise_steps():
    """3 Euler steps instead of 10 (the file's runtime); the batching is per step alike."""
    model, _ = tiny()
    steps = model.cfg.expert.denoise_steps
    model.set_action_schedule(denoise_steps=3)
    try:
        yield
    finally:
        model.set_action_schedule(denoise_steps=steps)

INSTRUCTIONS = ("pick up the cup", "open the top drawer and look inside it", "stack")


def robot_observation(robot: str, frame: int):
    """Robot i: its own images and state, i + 1 cameras and its own instruction, so the
    robots' prefixes differ in content and length."""
    i = ROBOTS.index(robot)
    obs = observation(100 * i + frame, cameras=i + 1)
    obs.instruction = INSTRUCTIONS[i]
    return obs


def qwen_robot_observation(robot: str, frame: int):
    """Qwen3-VL: robot i's images change size frame to frame (a wrist camera on odd
    frames), so the robots' rope layouts differ too."""
    from test_engine_qwen3vl import observation as qwen_observation

    i = ROBOTS.index(robot)
    obs = qwen_observation(7 * i + frame)
    obs.instruction = INSTRUCTIONS[i]
    return obs


def model_of(family: str):
    """(model, tokenizer, observation of robot and frame) of a model family."""
    if family == "qwen3vl":
        from test_engine_qwen3vl import qwen_tiny

        return (*qwen_tiny(), qwen_robot_observation)
    return (*tiny(), robot_observation)


def robot_noise(model, robot: str, frame: int) -> torch.Tensor:
    e = model.cfg.expert
    return torch.randn(e.horizon, e.action_dim,
                       generator=torch.Generator().manual_seed(1000 * ROBOTS.index(robot) + frame))


def robot_requests(robot: str, frame: int) -> list[LanguageRequest]:
    """0-2 requests per robot and frame, in the first 3 frames: prompts, token limits and
    EOS handling differ by robot and frame."""
    i = ROBOTS.index(robot)
    if frame >= 3:
        return []
    return [LanguageRequest(f"{robot} x{'y' * (frame + j)}", max_new_tokens=3 + (3 * i + 2 * frame + j) % 6,
                            ignore_eos=(i + frame + j) % 2 == 0)
            for j in range((frame + i) % 3)]


def copy_request(req: LanguageRequest) -> LanguageRequest:
    return LanguageRequest(req.prompt, req.stream, req.max_new_tokens, req.ignore_eos)


def config(**kw) -> EngineConfig:
    return EngineConfig(**{"max_requests": 8, "max_queue": 16, "steps_per_frame": 2, **kw})


def assert_kv_matches(fleet: FleetEngine, alone: dict, twin: dict) -> int:
    """Every live fleet request's K/V (its robot's prefix, its prompt, its tokens so far)
    equals its twin's in that robot's own engine, over what both have written; returns
    how many were compared."""
    compared = 0
    for slot, lv in enumerate(fleet.core.live):
        robot, other = twin[lv.req.request_id]
        engine = alone[robot]
        mates = [s for s, a in enumerate(engine.live) if a.req is other]
        if not mates:
            continue
        n = min(lv.length, engine.live[mates[0]].length)
        got = fleet.pool.k[:, slot, :, :n], fleet.pool.v[:, slot, :, :n]
        want = engine.pool.k[:, mates[0], :, :n], engine.pool.v[:, mates[0], :, :n]
        assert (got[0] - want[0]).abs().max() <= 1e-5 and (got[1] - want[1]).abs().max() <= 1e-5, robot
        compared += 1
    return compared


def serve(robots, frames: int, absent=None, batched=True, once_per_frame=False, family="tiny"):
    """The same workload through a fleet and through one OxygenEngine per robot (stepped
    only on that robot's frames); checks chunks per frame and K/V of live requests, and
    returns both sides' finished texts by (robot, submission index). `batched` False: the
    per-robot path other models take; `once_per_frame`: the GPU schedule's token reads
    (every robot's admitted first tokens and the decode steps' tokens in one transfer);
    `family` "qwen3vl": a Qwen3-VL model (its robots served in turn, not batched)."""
    model, tok, robot_observation = model_of(family)
    absent = absent or {}
    fleet = FleetEngine(model, tok, config(), max_robots=3)
    if family == "tiny":
        assert fleet.batch.batched, "the tiny profile batches its robots' prefills and chunks"
        fleet.batch.batched = batched
    else:
        assert not fleet.batch.batched, "Qwen3-VL's prefixes are not batched (fleet_batch.py)"
    fleet.core.sync_every_step = not once_per_frame
    alone = {r: OxygenEngine(model, tok, config()) for r in robots}
    twin, order, texts = {}, {}, {"fleet": {}, "alone": {}}
    kv_compared, batched_frames, absent_decoded = 0, 0, 0
    f = 0
    while f < frames or fleet.busy() or any(e.live or e.pending for e in alone.values()):
        present = [r for r in robots if f not in absent.get(r, ())] if f < frames else list(robots)
        for r in robots:
            for req in robot_requests(r, f):
                other = copy_request(req)
                rid = fleet.submit(r, req)
                alone[r].submit(other)
                order[rid] = (r, len([k for k in order.values() if k[0] == r]))
                twin[rid] = (r, other)
        obs = {r: robot_observation(r, f) for r in present}
        noise = {r: robot_noise(model, r, f) for r in present}
        live_before = len(fleet.core.live)
        chunks = fleet.act(obs, noise)
        assert list(chunks) == present and not fleet.faults
        assert len(fleet.core.live) == live_before, "no language work before the chunks are out"
        # requests of two robots, carried over from earlier frames, decode together in talk()
        batched_frames += len({fleet.owner[lv.req.request_id] for lv in fleet.core.live}) >= 2
        results = fleet.talk()
        for r in robots:
            if r not in present:
                if r in results:
                    assert results[r].actions is None
                    absent_decoded += bool(results[r].deltas)
                continue
            ref = alone[r].step(obs[r], noise[r])
            assert np.array_equal(results[r].actions, chunks[r].actions)
            assert np.abs(ref.actions - results[r].actions).max() <= 1e-5, (r, f)
            for d in ref.finished:       # the robot's own engine numbers its requests 1, 2, ...
                texts["alone"][(r, d.request_id - 1)] = d.full_text
        for r, res in results.items():
            for d in res.deltas:
                assert fleet.owner.get(d.request_id, r) == r and order[d.request_id][0] == r
                if d.done:
                    texts["fleet"][order[d.request_id]] = d.full_text
        kv_compared += assert_kv_matches(fleet, alone, twin)
        f += 1
    return texts, kv_compared, batched_frames, absent_decoded


@pytest.mark.parametrize("n_robots", [1, 2, 3])
def test_each_robot_equals_itself_served_alone(n_robots):
    """Each robot's chunks (within 1e-5) and texts (token-identical) in a fleet of 1-3
    robots with different prefixes equal that robot served alone by OxygenEngine with the
    same noise and request schedule; requests of several robots decode in one batch."""
    robots = ROBOTS[:n_robots]
    texts, kv_compared, batched_frames, _ = serve(robots, 4)
    assert texts["fleet"] == texts["alone"]
    expected = sum(len(robot_requests(r, f)) for r in robots for f in range(4))
    assert len(texts["fleet"]) == expected > 0
    assert kv_compared > 0
    if n_robots > 1:
        assert batched_frames > 0, "the workload must decode several robots' requests together"


def test_qwen3vl_robots_equal_themselves_served_alone():
    """The same for three robots on a Qwen3-VL model (three-axis RoPE, DeepStack, XR-0's
    head), whose prefixes the fleet prefills one robot at a time."""
    texts, kv_compared, batched_frames, _ = serve(ROBOTS, 4, family="qwen3vl")
    assert texts["fleet"] == texts["alone"]
    assert len(texts["fleet"]) == sum(len(robot_requests(r, f)) for r in ROBOTS for f in range(4)) > 0
    assert kv_compared > 0 and batched_frames > 0


def test_a_robot_left_out_of_frames_blocks_nobody():
    """A robot missing from some frames gets no chunk there (nor does it hold up the
    others'); its live requests keep decoding and its queued ones start from its own next
    prefix: texts and chunks still equal each robot alone, with tokens read once per frame
    too. The per-robot path (not batched) gives the same."""
    absent = {"r1": (1, 2), "r2": (0, 2)}
    for robots, batched, once in ((ROBOTS, True, True), (ROBOTS[1:], False, False)):
        texts, _, _, absent_decoded = serve(robots, 4, absent, batched=batched, once_per_frame=once)
        assert texts["fleet"] == texts["alone"] and texts["fleet"]
        assert absent_decoded > 0, "an absent robot's live requests must have kept decoding"


def test_one_robots_flood_does_not_starve_another():
    """With the pool full of robot A's requests and more of A's waiting, B's one request
    is admitted at the first free slot, ahead of A's earlier queued ones, and its text is
    B's request decoded alone from B's prefix at that frame."""
    model, tok = tiny()
    fleet = FleetEngine(model, tok, config(max_requests=3), max_robots=2)
    flood = [LanguageRequest(f"flood {j}", max_new_tokens=4 + 3 * j, ignore_eos=True) for j in range(6)]
    for req in flood:
        fleet.submit("r0", req)
    answer = LanguageRequest("and you?", max_new_tokens=3, ignore_eos=True)
    obs, texts = {}, {}
    f = 0
    while fleet.busy() or f < 2:
        if f == 1:
            fleet.submit("r1", answer)
        obs[f] = {r: robot_observation(r, f) for r in ("r0", "r1")}
        results = fleet.step(obs[f], {r: robot_noise(model, r, f) for r in obs[f]})
        for res in results.values():
            texts.update({d.request_id: d.full_text for d in res.finished})
        assert len(fleet.core.live) <= 3
        f += 1
    assert flood[0].start_frame == 0 and flood[3].start_frame > 1, "A's requests must fill the pool and queue"
    assert answer.start_frame <= min(r.start_frame for r in flood[3:]), "B must not wait behind A's queue"
    ref = []
    IsolatedRunner(model, tok).language(obs[answer.start_frame]["r1"], LanguageRequest(
        answer.prompt, max_new_tokens=3, ignore_eos=True), deltas=ref)
    assert texts[answer.request_id] == ref[-1].full_text
    assert len(texts) == 7


def test_a_full_queue_refusal_names_the_robot():
    """Past its queue bound, a robot's request is refused with its name and the pool's
    state; another robot's requests are still accepted."""
    model, tok = tiny()
    fleet = FleetEngine(model, tok, config(max_requests=1, max_queue=2), max_robots=2)
    for _ in range(2):
        fleet.submit("r0", LanguageRequest("hello", max_new_tokens=2))
    with pytest.raises(RequestRejected, match=r"robot 'r0'.*max_queue 2.*1 of 1 slots free"):
        fleet.submit("r0", LanguageRequest("hello", max_new_tokens=2))
    fleet.submit("r1", LanguageRequest("hi", max_new_tokens=2))
    with pytest.raises(RequestRejected, match=r"robot 'r1'.*empty prompt"):
        fleet.submit("r1", LanguageRequest(" "))
    with pytest.raises(RequestRejected, match=r"robot 'r2'.*at most 2 robots"):
        fleet.submit("r2", LanguageRequest("hi"))


def test_a_faulty_observation_leaves_only_that_robot_out():
    """A robot whose observation is unusable (NaN state) is named in `faults` and gets no
    chunk; the other robot's chunk equals its isolated action inference."""
    model, tok = tiny()
    fleet = FleetEngine(model, tok, config(), max_robots=2)
    bad = robot_observation("r1", 0)
    bad.state = np.full(8, np.nan)
    good = robot_observation("r0", 0)
    chunks = fleet.act({"r0": good, "r1": bad}, {"r0": robot_noise(model, "r0", 0)})
    assert list(chunks) == ["r0"] and "NaN" in fleet.faults["r1"]
    ref = IsolatedRunner(model, tok).action(good, robot_noise(model, "r0", 0)).numpy()
    assert np.abs(chunks["r0"].actions - ref).max() <= 1e-5
    results = fleet.talk()
    assert list(results) == ["r0"]


def test_a_guided_robot_beside_a_batched_one():
    """A robot with an active Real-Time Chunking guide is sampled alone after the batched
    prefill, the other in the batch: both equal isolated action inference (guided with the
    same guide), and the guide changes the chunk."""
    from oxygen_ros.engine.rtc import RTCConfig, RTCGuide

    model, tok = tiny()
    fleet = FleetEngine(model, tok, config(), max_robots=2)
    previous = np.random.default_rng(5).uniform(-1, 1, (7, 8)).astype(np.float32)
    guide = RTCGuide(RTCConfig(mode="guided", execution_horizon=6), previous, delay=2)
    obs = {r: robot_observation(r, 0) for r in ("r0", "r1")}
    noise = {r: robot_noise(model, r, 0) for r in obs}
    chunks = fleet.act(obs, noise, rtc={"r0": guide})
    fleet.talk()
    iso = IsolatedRunner(model, tok)
    guided = iso.action(obs["r0"], noise["r0"], rtc=guide).numpy()
    assert np.abs(chunks["r0"].actions - guided).max() <= 1e-5
    assert np.abs(chunks["r0"].actions - iso.action(obs["r0"], noise["r0"]).numpy()).max() > 1e-3
    assert np.abs(chunks["r1"].actions - iso.action(obs["r1"], noise["r1"]).numpy()).max() <= 1e-5


def test_a_robots_backlog_counts_what_fair_admission_puts_ahead_of_it():
    """Every live request, the robot's own queue, and of each other robot as many queued
    requests as one more than the robot's own (one a robot per round)."""
    model, tok = tiny()
    fleet = FleetEngine(model, tok, config(max_requests=2), max_robots=3)
    for j in range(4):
        fleet.submit("r0", LanguageRequest(f"a{j}", max_new_tokens=5 + j))
    fleet.submit("r1", LanguageRequest("b", max_new_tokens=3))
    view = fleet.view("r1")
    assert view.backlog() == fleet.backlog("r1")
    b = fleet.backlog("r1")
    assert sorted(b.queued) == [3, 5, 6] and b.live == () and b.slots == 2
    assert sorted(fleet.backlog("r0").queued) == [3, 5, 6, 7, 8]
    assert sorted(fleet.backlog("r2").queued) == [3, 5]     # none of its own: one of each other robot
    fleet.step({r: robot_observation(r, 0) for r in ("r0", "r1")},
               {r: robot_noise(model, r, 0) for r in ("r0", "r1")})
    # one frame (k=2): b (3 tokens) is done, a0 has 2 of 5 left, a1 waits for the freed slot
    b = fleet.backlog("r1")
    assert (b.live, b.queued, b.steps_per_frame) == ((2,), (6,), 2)
    assert view.submit(LanguageRequest("c", max_new_tokens=2)) in fleet.owner


def test_an_abort_frees_its_slot_at_once_and_leaves_the_others_exact():
    """Aborting a live request mid-decode and a queued one, then forgetting their robot,
    frees their KV slots at once: no delta of theirs follows, the pool's live slots are the
    remaining requests' (the last slot moved into each hole), and every remaining request's
    text equals it decoded alone from the same prefix. A robot registered again under the
    forgotten name holds nothing and is served exactly. The single-robot engine's abort does
    the same; neither aborts inside a frame."""
    model, tok = tiny()
    # the same observation every frame: a request's text then depends on its prompt alone;
    # r1 first, so its requests take the first slots and an abort moves one of r0's
    obs = {r: robot_observation(r, 0) for r in ("r1", "r0")}
    noise = {r: robot_noise(model, r, 0) for r in obs}
    iso = IsolatedRunner(model, tok)

    def alone(robot, req):
        ref = []
        iso.language(obs[robot], LanguageRequest(req.prompt, max_new_tokens=req.max_new_tokens,
                                                 ignore_eos=True), deltas=ref)
        return ref[-1].full_text

    fleet = FleetEngine(model, tok, config(max_requests=3), max_robots=2)
    keep = [LanguageRequest(f"keep {'x' * j}", max_new_tokens=5 + 2 * j, ignore_eos=True) for j in range(3)]
    drop = [LanguageRequest(f"drop {'y' * j}", max_new_tokens=30, ignore_eos=True) for j in range(3)]
    for a, b in zip(keep, drop):
        fleet.submit("r0", a)
        fleet.submit("r1", b)
    texts, seen = {}, set()

    def collect(results):
        for res in results.values():
            texts.update({d.request_id: d.full_text for d in res.finished})

    collect(fleet.step(obs, noise))
    assert [lv.req for lv in fleet.core.live] == [drop[0], keep[0], keep[1]]
    with pytest.raises(RuntimeError, match="inside a frame"):
        fleet.act(obs, noise)
        fleet.abort(drop[0].request_id)
    collect(fleet.talk())
    assert fleet.abort(drop[0].request_id) and fleet.abort(drop[2].request_id)      # live, queued
    assert not fleet.abort(drop[2].request_id)
    assert fleet.forget("r1") == 1 and "r1" not in fleet.queues
    assert fleet.live_requests("r1") == 0 == sum(fleet.owner[lv.req.request_id] == "r1" for lv in fleet.core.live)
    assert fleet.pool.live == len(fleet.core.live) == 1
    again = LanguageRequest("back again", max_new_tokens=4, ignore_eos=True)
    fleet.submit("r1", again)
    assert fleet.live_requests("r1") == 0 and list(fleet.queues["r1"]) == [again]
    while fleet.busy():
        results = fleet.step(obs, noise)
        seen |= {d.request_id for res in results.values() for d in res.deltas}
        collect(results)
        assert fleet.pool.live == len(fleet.core.live)
    assert not seen & {r.request_id for r in drop}
    assert len(texts) == 4
    assert [texts[r.request_id] for r in keep] == [alone("r0", r) for r in keep]
    assert texts[again.request_id] == alone("r1", again)
    assert fleet.owner == {} and fleet.pool.live == 0

    engine = OxygenEngine(model, tok, config(max_requests=3))
    reqs = [LanguageRequest(f"one {'z' * j}", max_new_tokens=6 + j, ignore_eos=True) for j in range(4)]
    for r in reqs:
        engine.submit(r)
    engine.step(obs["r0"], noise["r0"])
    assert engine.abort(reqs[0].request_id) and engine.abort(reqs[3].request_id)     # slot 0 live, queued
    assert engine.pool.live == len(engine.live) == 2 and not engine.pending
    done = {}
    while engine.live:
        res = engine.step(obs["r0"], noise["r0"])
        assert reqs[0].request_id not in {d.request_id for d in res.deltas}
        done.update({d.request_id: d.full_text for d in res.finished})
    assert [done[r.request_id] for r in reqs[1:3]] == [alone("r0", r) for r in reqs[1:3]]
