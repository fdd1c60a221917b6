#!/usr/bin/env python3
"""Real-Time Chunking off vs on, A/B in one run: the simulated robot driven by the node's
own chunk path, rounds interleaved, the same observations' noise in both.

    .venv/bin/python scripts/rtc_ab.py [--params config/demo.yaml] [--model NAME] [--rate 0.33 --action-rate 2]
        [--rounds 4 --frames-per-round 8] [--velocities] [--out FILE.json]

RTC only helps where its condition d <= s <= H - d holds (d: the guided chunk's latency
in action steps, s: the steps executed per replanning period); the script checks it.

Each mode has its own simulated robot: tools/panda_world.py (the MuJoCo Panda: rendered
cameras, position actuators, 500 Hz physics) commanded at 100 Hz by tools/trajectory_executor.py (what a Jazzy
joint_trajectory_controller does with a trajectory). Each frame runs what the node runs,
ROS-free: the observation from the world, the RTC guide from node/rtc_planner.py, the
engine's act() (its chunk latency is the real compute time of this machine), the policy
I/O and the joint envelope, node/chunk_plan.py's stamping, dropping and velocities; the
trajectory reaches the executor at observation time + latency, and the world runs on to
the next replanning tick on a virtual clock. Prints, per mode, the boundary jumps at the
chunk switches (the plan's jumps, then the same switches scored on the commanded and on
the measured joints, tools/arm_motion.py), the tracking error, the chunk latency, the
action phase and RTC's delay; --out writes JSON.
"""
import argparse
import json
import math
import statistics
import sys
import time

import numpy as np
import torch

from oxygen_ros.engine.observation.observation import Observation
from oxygen_ros.engine.rtc import RTCConfig
from oxygen_ros.node.chunk_plan import plan_chunk
from oxygen_ros.node.joint_space import JointSpace
from oxygen_ros.engine.factory import build_engine, build_policy_io
from oxygen_ros.node.robot_time import action_rate, warm_up_rtc
from oxygen_ros.node.rtc_planner import RTCPlanner
from oxygen_ros.tools.params_files import config_file, params_from_file, with_node_defaults
from oxygen_ros.tools.sim_robot import VIEW_OF_SLOT
from oxygen_ros.tools.panda_world import PandaWorld
from oxygen_ros.tools.arm_motion import score_stats, switch_scores
from oxygen_ros.tools.trajectory_executor import TrajectoryExecutor, jump_stats

CONTROL_HZ = 100.0      # the simulated controller's update rate


class Arm:
    """One mode's robot and its RTC planner, on a virtual clock."""

    def __init__(self, mode: str, p: dict, policy, joints: JointSpace, rate: float, horizon: int):
        self.mode = mode
        self.world = PandaWorld(p["joint_names"], p["joint_lower_limits"], p["joint_upper_limits"])
        # partial goals (JTC's allow_partial_joints_goal): a head may drive fewer joints than the arm has
        self.executor = TrajectoryExecutor(list(joints.names), self.world.q, allow_partial_joints_goal=True)
        config = RTCConfig(mode=mode, schedule=p["rtc_schedule"], beta=p["rtc_beta"],
                           execution_horizon=p["rtc_execution_horizon"])
        self.planner = RTCPlanner(config, policy, rate, horizon)
        self.t = 0.0
        self.warm_jumps = 0
        self.latency_ms, self.action_ms, self.delays = [], [], []
        self.samples = []       # per control update: t, commanded q, v, then measured q, v

    def run_until(self, t_end: float) -> None:
        dt = 1.0 / CONTROL_HZ
        while self.t + dt <= t_end + 1e-9:
            self.t += dt
            q_cmd, v_cmd = self.executor.sample(self.t)
            self.world.command(q_cmd)
            self.world.step(dt)
            self.samples.append((self.t, q_cmd, v_cmd, self.world.q, self.world.velocities()))

    def arm_motion(self) -> dict:
        """The measured switches (after warm-up) scored on the commanded and on the actual
        joints (tools/arm_motion.py), and the tracking error from the first of them on."""
        switches = [j.time for j in self.executor.jumps[self.warm_jumps:]]
        t = np.array([s[0] for s in self.samples])
        q_cmd, v_cmd, q, v = (np.array([s[i] for s in self.samples]) for i in (1, 2, 3, 4))
        error = (q_cmd - q)[t >= switches[0]] if switches else np.zeros((0, q.shape[1]))
        cmd, act = (score_stats(switch_scores(t, a, b, switches)) for a, b in ((q_cmd, v_cmd), (q, v)))
        return {"tracking_rms": float(np.sqrt(np.mean(error ** 2))) if error.size else float("nan"),
                **{f"commanded_{k}": x for k, x in cmd.items() if k != "count"},
                **{f"actual_{k}": x for k, x in act.items() if k != "count"}}


def frame(arm: Arm, engine, policy, joints, p, slots, size, rate, noise, measure: bool) -> None:
    t_obs = arm.t
    state = arm.world.q.copy()
    images = {s: arm.world.render(VIEW_OF_SLOT[i % 3], size) for i, s in enumerate(slots)}
    obs = policy.observation(images, state, p["instruction"], t_obs)
    guide, _ = arm.planner.guide(t_obs, state)
    t0 = time.perf_counter()
    chunk = engine.act(obs, noise=noise, rtc=guide)
    latency = time.perf_counter() - t0
    engine.talk()
    arm.run_until(t_obs + latency)                  # the robot runs on while the chunk is inferred
    positions, _ = joints.clip(policy.actions(chunk.actions, state))
    planned = plan_chunk(positions, t_obs, 1.0 / rate, arm.t, with_velocities=p["trajectory_velocities"])
    if not planned.empty:
        arm.executor.receive(list(joints.names), planned.stamp_s, planned.times, planned.positions,
                             None if planned.velocities is None else planned.velocities.tolist(), now=arm.t)
        arm.planner.published(planned.stamp_s, positions, latency)
    if measure:
        arm.latency_ms.append(latency * 1e3)
        arm.action_ms.append(chunk.timings_ms["action"])
        arm.delays.append(arm.planner.last_delay)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default=str(config_file("demo.yaml")))
    ap.add_argument("--rate", type=float, default=0.5, help="replanning rate (Hz); the demo's on 2 cores")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--frames-per-round", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2, help="frames per mode before measuring")
    ap.add_argument("--action-rate", type=float, default=0.0,
                    help="action rate (Hz) instead of the params file's (random experts have no data rate)")
    ap.add_argument("--velocities", action="store_true",
                    help="send point velocities: the controller then interpolates cubically from the "
                         "commanded state and velocity, so the velocity jump is 0 by construction")
    ap.add_argument("--model", default="", help="model profile instead of the params file's (e.g. qwen3vl-tiny: "
                                                "XR-0's head, its flow time the other way round)")
    ap.add_argument("--out", default="", help="write the figures as JSON here")
    a = ap.parse_args()

    p = params_from_file(a.params)
    p.setdefault("rtc_schedule", "exp"), p.setdefault("rtc_beta", 10.0), p.setdefault("rtc_execution_horizon", 10)
    p.update(narration_every_n_frames=0, memory_every_n_frames=0, trajectory_velocities=a.velocities)
    if a.action_rate:
        p["action_rate_hz"] = a.action_rate
    if a.model:
        p["model"] = a.model
    full = with_node_defaults(p)
    model, tok, engine = build_engine(full)
    joints = JointSpace.from_lists(p["joint_names"], p["joint_lower_limits"], p["joint_upper_limits"])
    dims = model.cfg.expert.action_dim
    # a head with fewer action dims than joints (StarVLA's 7) drives the first ones; the rest hold
    action_joints = joints if dims >= len(joints.names) else JointSpace.from_lists(
        p["joint_names"][:dims], p["joint_lower_limits"][:dims], p["joint_upper_limits"][:dims])
    policy = build_policy_io(full, model, tok, joints, action_joints)
    rate, source = action_rate(full, policy)
    horizon = model.cfg.expert.horizon
    slots = model.cfg.camera_slots[: len(p["camera_topics"])]
    size = 160
    period = 1.0 / a.rate
    print(f"model {p['model']}, replanning {a.rate:g} Hz, actions {rate:g} Hz ({source}), horizon {horizon}, "
          f"{a.rounds} rounds x {a.frames_per_round} frames per mode, interleaved", file=sys.stderr)
    arms = {m: Arm(m, full, policy, joints, rate, horizon) for m in ("off", "guided")}
    warm_up_rtc(engine, policy, arms["guided"].planner.config, p["instruction"], len(joints.names))   # as the node does
    gen = torch.Generator().manual_seed(0)
    total = a.warmup + a.rounds * a.frames_per_round
    noises = [torch.randn(horizon, model.cfg.expert.action_dim, generator=gen) for _ in range(total)]
    schedule = [(None, a.warmup)] + [(r, a.frames_per_round) for r in range(a.rounds)]
    try:
        _run_rounds(arms, schedule, engine, policy, action_joints, full, slots, size, rate, noises, period)
    finally:
        for arm in arms.values():      # their renderers: an EGL context left to exit raises
            arm.world.close()
    rows = {}
    for mode, arm in arms.items():
        jumps = arm.executor.jumps[arm.warm_jumps:]
        rows[mode] = {**jump_stats(jumps), "chunk_latency_ms_median": statistics.median(arm.latency_ms),
                      "action_ms_median": statistics.median(arm.action_ms),
                      "rtc_delay_steps_mean": float(np.mean(arm.delays)), **arm.arm_motion()}
    off, on = rows["off"], rows["guided"]
    # RTC's condition d <= s <= H - d (paper): the robot must still be executing the previous
    # chunk when the new one lands, and what it executes meanwhile must fit in the new one
    d = math.ceil(on["chunk_latency_ms_median"] / 1e3 * rate)
    steps = round(period * rate)
    print(f"RTC condition d <= s <= H - d: d = {d} (guided latency x rate), s = {steps} (period x rate), "
          f"H - d = {horizon - d}: {'met' if d <= steps <= horizon - d else 'NOT MET: choose --rate/--action-rate'}")
    print(f"{'':28}{'RTC off':>12}{'RTC guided':>12}{'on/off':>9}")
    for key, label in [("position_max", "position jump max (rad)"), ("position_p95", "position jump p95 (rad)"),
                       ("velocity_max", "velocity jump max (rad/s)"), ("velocity_p95", "velocity jump p95 (rad/s)"),
                       ("commanded_velocity_change_max", "cmd vel change max (rad/s)"),
                       ("actual_velocity_change_max", "actual vel change max"),
                       ("commanded_velocity_change_p95", "cmd vel change p95"),
                       ("actual_velocity_change_p95", "actual vel change p95"),
                       ("commanded_course_deviation_max", "cmd course dev max (rad)"),
                       ("actual_course_deviation_max", "actual course dev max"),
                       ("actual_course_deviation_p95", "actual course dev p95"),
                       ("tracking_rms", "tracking error rms (rad)"),
                       ("chunk_latency_ms_median", "chunk latency p50 (ms)"), ("action_ms_median", "action phase p50 (ms)"),
                       ("rtc_delay_steps_mean", "RTC delay d (steps, mean)"), ("count", "switches measured")]:
        ratio = on[key] / off[key] if off[key] else float("nan")
        print(f"{label:<28}{off[key]:>12.4f}{on[key]:>12.4f}{ratio:>9.2f}")
    print(f"RTC's extra action time: {100 * (on['action_ms_median'] / off['action_ms_median'] - 1):+.0f}%")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"params": a.params, "model": p["model"], "replanning_hz": a.rate, "action_rate_hz": rate,
                       "velocities": a.velocities, "rtc_condition": {"d": d, "s": steps, "H": horizon},
                       "rounds": a.rounds, "frames_per_round": a.frames_per_round, "modes": rows}, fh, indent=2)
    return 0


def _run_rounds(arms, schedule, engine, policy, joints, full, slots, size, rate, noises, period) -> None:
    """Every mode's frames, round by round, interleaved."""
    f = {m: 0 for m in arms}
    for r, n in schedule:
        for mode, arm in arms.items():
            for _ in range(n):
                frame(arm, engine, policy, joints, full, slots, size, rate, noises[f[mode]], measure=r is not None)
                f[mode] += 1
                # on to the next tick after the one just run (a chunk faster than one control
                # update leaves arm.t on this tick: it must not be run again)
                arm.run_until((math.floor(arm.t / period + 1e-9) + 1) * period)
            if r is None:
                arm.warm_jumps = len(arm.executor.jumps)        # switches from now on are measured
            print(f"  round {r if r is not None else 'warm-up'} {mode}: {len(arm.executor.jumps)} switches",
                  file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
