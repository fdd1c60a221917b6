"""The trajectories of a model's further action experts (several experts on one prefix,
engine/models/qwen3vl/modeling.py `extra_experts`): each drives its own joints (a humanoid's
hands, its base), on its own topic, at its own action rate, with its own chunk horizon.

From the parameters, per extra expert in the model's order:
- `expert_trajectory_topics[i]`: its JointTrajectory topic ("" or missing:
  `joint_trajectory/<name>`);
- `expert_joint_names[i]`: its joints, comma-separated;
- `expert_joint_lower_limits` / `expert_joint_upper_limits`: every extra expert's joint
  limits one after the other, in that order (the `limits` convention: model actions in
  [-1, 1] map onto them, and published positions are clipped into them);
- `expert_action_rates_hz[i]`: the rate of its chunk's points (0 or missing: the first
  expert's action rate);
- `expert_action_statistics[i]`: its own action statistics file (openpi norm_stats.json
  or LeRobot normalizer .safetensors; engine/policy_io/expert_actions.py), normalization
  `expert_action_normalizations[i]` (quantile, the default, or mean_std); "" or missing:
  the limits convention above. Either way the positions are clipped into its limits.
Its chunk is stamped at the frame's observation, spaced at its rate and published right
after the first expert's, past points dropped as for the first (node/chunk_plan.py).
With RTC on (rtc_* parameters, shared by every expert) each expert has its own planner:
its own previous chunk, delay and guide (node/rtc_planner.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.rtc import RTCConfig
from .joint_space import JointSpace
from .rtc_planner import RTCPlanner


@dataclass
class ExpertOutput:
    name: str
    joints: JointSpace
    io: object                 # LimitsIO or StatsActionIO over the expert's joints
    action_dt: float           # seconds between its chunk's points
    topic: str
    horizon: int
    rtc: RTCPlanner            # its previous chunk and delay (mode off: never guides)


def expert_topic(name: str, topics: list, i: int) -> str:
    """Further expert i's trajectory topic: expert_trajectory_topics[i], or where that is
    missing or "", joint_trajectory/<its name> (oxygen record follows the same rule)."""
    return topics[i] if i < len(topics) and topics[i] else f"joint_trajectory/{name}"


def expert_outputs(p: dict, cfg, first_action_rate_hz: float, rtc: RTCConfig,
                   robot_joints: JointSpace | None = None) -> list[ExpertOutput]:
    """The ExpertOutputs of the model's extra experts (none for a one-expert model);
    ValueError naming the parameter when one does not fit the model."""
    from ..engine.policy_io import LimitsIO, PolicyIOError
    from ..engine.policy_io.expert_actions import StatsActionIO

    experts = cfg.extra_experts
    names, topics, rates = p["expert_joint_names"], p["expert_trajectory_topics"], p["expert_action_rates_hz"]
    stats, norms = p["expert_action_statistics"], p["expert_action_normalizations"]
    if not experts:
        if names:
            raise ValueError(f"expert_joint_names is set but model {cfg.name} has one action expert")
        return []
    if len(names) != len(experts):
        raise ValueError(f"model {cfg.name} has {len(experts)} further action expert(s) "
                         f"({', '.join(e.name for e in experts)}): expert_joint_names needs one "
                         f"comma-separated entry for each, got {len(names)}")
    for key in ("expert_trajectory_topics", "expert_action_rates_hz", "expert_action_statistics",
                "expert_action_normalizations"):
        if len(p[key]) > len(experts):
            raise ValueError(f"{key} takes at most one entry per further expert ({len(experts)}), "
                             f"got {len(p[key])}")
    joint_lists = [[n.strip() for n in entry.split(",") if n.strip()] for entry in names]
    lower, upper = list(p["expert_joint_lower_limits"]), list(p["expert_joint_upper_limits"])
    total = sum(len(j) for j in joint_lists)
    if len(lower) != total or len(upper) != total:
        raise ValueError(f"expert_joint_lower_limits and expert_joint_upper_limits need {total} values (every "
                         f"further expert's joints in order), got {len(lower)} and {len(upper)}")
    out, at = [], 0
    for i, (expert, joints) in enumerate(zip(experts, joint_lists)):
        if not joints:
            raise ValueError(f"expert_joint_names[{i}] ({expert.name}) names no joint")
        if len(joints) > expert.cfg.action_dim:
            raise ValueError(f"expert {expert.name} has {expert.cfg.action_dim} action dimensions for "
                             f"{len(joints)} joints in expert_joint_names[{i}]")
        space = JointSpace.from_lists(joints, lower[at:at + len(joints)], upper[at:at + len(joints)],
                                      "expert_joint")
        at += len(joints)
        rate = rates[i] if i < len(rates) and rates[i] > 0 else first_action_rate_hz
        topic = expert_topic(expert.name, topics, i)
        horizon = expert.cfg.horizon
        if i < len(stats) and stats[i]:
            norm = norms[i] if i < len(norms) and norms[i] else "quantile"
            try:
                io = StatsActionIO.from_file(stats[i], norm, len(joints), horizon)
            except PolicyIOError as e:
                raise ValueError(f"expert_action_statistics[{i}] ({expert.name}): {e}") from e
        else:
            io = LimitsIO.from_limits(space.lower, space.upper, space.lower, space.upper, horizon)
        # published positions stay inside the robot's joint limits whatever the expert's say
        envelope = space.inside(robot_joints) if robot_joints is not None else space
        out.append(ExpertOutput(expert.name, envelope, io, 1.0 / rate, topic, horizon,
                                RTCPlanner(rtc, io, rate, horizon)))
    return out


def expert_positions(out: ExpertOutput, chunk: np.ndarray) -> tuple[np.ndarray, int]:
    """An expert's model chunk [H, action_dim] as joint positions [H, J], clipped into its
    limits; and how many values were clipped."""
    return out.joints.clip(out.io.actions(chunk))


def rtc_figures(experts: list) -> dict:
    """Each further expert's RTC planner figures, named by expert, for diagnostics."""
    out = {}
    for e in experts:
        out.update({f"rtc_delay_steps:{e.name}": e.rtc.last_delay, f"rtc_guided_chunks:{e.name}": e.rtc.guided_chunks,
                    f"rtc_plain_chunks:{e.name}": e.rtc.plain_chunks, f"rtc_input_gaps:{e.name}": e.rtc.input_gaps,
                    f"rtc_delays_clamped:{e.name}": e.rtc.clamped})
    return out
