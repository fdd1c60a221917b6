"""The control rate `oxygen demo` can hold on this machine, measured before the node starts.

A laptop or a shared 2-core CPU runs SmolLM2's frame several times slower than the
params file's rate assumes; run at that rate, every frame misses its deadline and the
timing summary reports a failure that only says "this machine is slower". So the demo
runs a few frames of the same engine (same params: model, k, threads, cameras, one or
two live requests as the node has) beside the running robot and recorder, and sets the
rate to what their median allows, with a margin for the node's threads and the spread.
"""
from __future__ import annotations

import gc
import math
import time

import numpy as np

# The demo measures while the sim renders and the recorder records (they share the
# cores); what the measurement cannot see is the node's own executor threads (image
# conversion, diagnostics, DDS) sharing the cores and the GIL with inference, and the
# spread between frames. That cost is roughly fixed per second, so the faster the
# engine, the larger its share: with the eager action expert, demo frames ran p50
# 1.41x and p95 1.61x the measured median; with the fused one (459 ms measured) p50
# 1.82x and p95 2.18x, and x1.9 left 27% of frames over the deadline. Hence x2.3. The
# slowest measured frame is no guide: one outside burst of load in a few frames set the
# rate to a third of what held.
MARGIN = 2.3
RATE_STEP_HZ = 0.05
MIN_RATE_HZ = 0.1          # control_rate_hz's lowest value (node/params.py): a slower machine overruns it


def measure_frame_ms(params: dict, image_size: int, frames: int = 6, warmup: int = 2,
                     robots=()) -> list[float]:
    """Frame times (ms) of the params' engine on synthetic observations with live requests;
    with `robots`, a fleet's frames (every robot's observation batched, each with its own
    requests)."""
    from ..engine.observation.observation import Observation
    from ..engine.requests import LanguageRequest
    from ..engine.factory import build_engine

    model, _tok, engine = build_engine(params, {r: params for r in robots} or None)
    try:
        rng = np.random.default_rng(0)
        slots = model.cfg.camera_slots[: len(params["camera_topics"])]
        obs = Observation(images={s: rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8)
                                  for s in slots},
                          state=np.zeros(len(params["joint_names"])), instruction=params["instruction"])
        tokens = min(int(params["narration_max_tokens"]), engine.config.max_new_tokens)

        def request():
            return LanguageRequest(params["narration_prompt"], "narration", tokens, ignore_eos=True)

        times = []
        for i in range(warmup + frames):
            # a narration and a memory entry per robot, as the node has
            if robots:
                for r in robots:
                    while engine.live_requests(r) + len(engine.queues.get(r, ())) < 2:
                        engine.submit(r, request())
            else:
                while len(engine.live) + len(engine.pending) < 2:
                    engine.submit(request())
            t0 = time.perf_counter()
            engine.step({r: obs for r in robots} if robots else obs)
            if i >= warmup:
                times.append((time.perf_counter() - t0) * 1e3)
        return times
    finally:
        del model, engine
        gc.collect()


def holdable_rate_hz(frame_ms: list[float], configured_hz: float) -> float:
    """The configured rate, or lower: what the median frame allows with MARGIN, in RATE_STEP_HZ steps."""
    allowed = 1e3 / (MARGIN * float(np.median(frame_ms)))
    stepped = max(MIN_RATE_HZ, math.floor(allowed / RATE_STEP_HZ) * RATE_STEP_HZ)
    return round(min(configured_hz, stepped), 2)


def sim_camera_hz(control_rate_hz: float) -> float:
    """The simulated robot's camera rate for a control rate: 3 images a frame, 5..10 Hz
    (more only costs the CPU the model runs on: the MuJoCo Panda renders its 3 views in
    ~55 ms on a CPU, so 10 Hz is already half a core)."""
    return min(10.0, max(5.0, 3 * float(control_rate_hz)))
