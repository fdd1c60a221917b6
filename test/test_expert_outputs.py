"""A further action expert's outputs from the parameters (node/expert_outputs.py) and its
own action statistics (engine/policy_io/expert_actions.py): openpi's and LeRobot's
formulas on hand-checked numbers, the inverse RTC uses, and clear errors."""
import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from oxygen_ros.engine.registry import get_config
from oxygen_ros.engine.policy_io import LimitsIO, PolicyIOError
from oxygen_ros.engine.policy_io.expert_actions import StatsActionIO
from oxygen_ros.engine.rtc import RTCConfig
from oxygen_ros.node.expert_outputs import expert_outputs, expert_positions

CFG = get_config("qwen3vl-multi-tiny")          # further experts: hands (6 dims, H 6), base (3 dims, H 5)


def params(**kw):
    p = {"expert_joint_names": ["a,b", "x"], "expert_joint_lower_limits": [0.0, 0.0, -2.0],
         "expert_joint_upper_limits": [1.0, 1.0, 2.0], "expert_trajectory_topics": [],
         "expert_action_rates_hz": [], "expert_action_statistics": [], "expert_action_normalizations": []}
    p.update(kw)
    return p


def openpi_file(tmp_path, **actions):
    path = tmp_path / "norm_stats.json"
    path.write_text(json.dumps({"norm_stats": {"actions": actions}}))
    return str(path)


def test_openpi_quantile_statistics_map_a_chunk_onto_the_datasets_range(tmp_path):
    # (y + 1) / 2 * (q99 - q01 + 1e-6) + q01: y = -1 -> q01, y = 1 -> q99 + 1e-6, y = 0 -> midpoint
    io = StatsActionIO.from_file(openpi_file(tmp_path, q01=[0.2, -1.0, 9.0], q99=[0.4, 1.0, 9.0]),
                                 "quantile", joints=2, horizon=3)
    chunk = np.array([[-1.0, -1.0, 5.0], [0.0, 0.0, 5.0], [1.0, 1.0, 5.0]])
    out = io.actions(chunk)
    assert out.shape == (3, 2)                       # the joints' dims only
    np.testing.assert_allclose(out, [[0.2, -1.0], [0.3 + 0.5e-6, 0.0 + 0.5e-6], [0.4 + 1e-6, 1.0 + 1e-6]], atol=1e-12)
    np.testing.assert_allclose(io.model_actions(out), chunk[:, :2], atol=1e-12)


def test_openpi_mean_std_and_lerobot_tensors(tmp_path):
    io = StatsActionIO.from_file(openpi_file(tmp_path, mean=[1.0, 2.0], std=[0.5, 2.0]), "mean_std", 2, 1)
    # y * (std + 1e-6) + mean
    np.testing.assert_allclose(io.actions([[2.0, -1.0]]), [[2.0 + 2e-6, -1e-6]], atol=1e-12)
    path = tmp_path / "stats.safetensors"
    save_file({"action.q01": torch.tensor([0.0, 10.0]), "action.q99": torch.tensor([2.0, 10.0])}, str(path))
    io = StatsActionIO.from_file(path, "quantile", 2, 1)
    # LeRobot: (y + 1) * d / 2 + q01, eps 1e-8 only where d == 0
    np.testing.assert_allclose(io.actions([[0.0, 1.0]]), [[1.0, 10.0 + 1e-8]], rtol=1e-6)
    assert io.formulas == "lerobot"


def test_statistics_errors_name_what_is_wrong(tmp_path):
    f = openpi_file(tmp_path, mean=[0.0], std=[1.0])
    with pytest.raises(PolicyIOError, match=r"quantile normalization needs .*q01.*it has what mean_std needs"):
        StatsActionIO.from_file(f, "quantile", 1, 1)
    with pytest.raises(PolicyIOError, match="1 dims for 2 joints"):
        StatsActionIO.from_file(f, "mean_std", 2, 1)
    with pytest.raises(PolicyIOError, match="must be one of"):
        StatsActionIO.from_file(f, "minmax", 1, 1)
    with pytest.raises(PolicyIOError, match="does not exist"):
        StatsActionIO.from_file(tmp_path / "nope.json", "quantile", 1, 1)


def test_expert_outputs_take_statistics_per_expert_and_a_planner_each(tmp_path):
    f = openpi_file(tmp_path, q01=[0.2, 0.2, 0.2, 0.2, 0.2, 0.2], q99=[0.4, 0.4, 0.4, 0.4, 0.4, 0.4])
    outs = expert_outputs(params(expert_action_statistics=[f, ""]), CFG, 10.0, RTCConfig("guided"))
    hands, base = outs
    assert isinstance(hands.io, StatsActionIO) and isinstance(base.io, LimitsIO)
    assert hands.rtc is not base.rtc and hands.rtc.enabled and hands.rtc.horizon == 6 and base.rtc.horizon == 5
    # statistics, then the joint limits' clip: 3 in model space -> (3 + 1) / 2 * 0.2 + 0.2 = 0.6
    # (limits would have made it 2.0, clipped to 1.0)
    positions, clipped = expert_positions(hands, np.full((6, 6), 3.0))
    assert positions.shape == (6, 2) and np.allclose(positions, 0.6, atol=1e-5) and clipped == 0
    positions, clipped = expert_positions(base, np.full((5, 3), 3.0))      # limits: 3 -> 4.0, clipped to 2
    assert np.all(positions == 2.0) and clipped == 5


def test_expert_output_parameters_fail_configure_clearly(tmp_path):
    with pytest.raises(ValueError, match=r"expert_action_statistics\[0\] \(hands\).*does not exist"):
        expert_outputs(params(expert_action_statistics=[str(tmp_path / "x.json")]), CFG, 10.0, RTCConfig())
    with pytest.raises(ValueError, match="expert_action_normalizations takes at most one entry"):
        expert_outputs(params(expert_action_normalizations=["quantile"] * 3), CFG, 10.0, RTCConfig())


def test_an_rtc_mode_a_head_cannot_run_fails_configure():
    """RTC applies to every expert; XR-0's and PI_v3's heads have one flow time per chunk, so
    trained RTC (per-token times) is refused at configure, naming the head."""
    from oxygen_ros.node.robot_time import check_rtc_mode

    check_rtc_mode("trained", get_config("tiny"))           # pi0.5's expert: both modes
    for mode in ("off", "guided"):
        check_rtc_mode(mode, CFG)
    with pytest.raises(ValueError, match="trained is not available for the XR-0 head of model qwen3vl-multi-tiny"):
        check_rtc_mode("trained", CFG)
    with pytest.raises(ValueError, match="trained is not available for the PI_v3 head of model starvla-cpu"):
        check_rtc_mode("trained", get_config("starvla-cpu"))
