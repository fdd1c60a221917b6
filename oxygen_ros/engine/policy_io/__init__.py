"""ROS-free policy I/O for pi0.5 checkpoints, following openpi or LeRobot exactly.

Between a robot's raw observation and the model, and between the model's normalized action
chunk and the robot: camera resize-with-pad and scaling, state normalization and
discretization into the prompt, action unnormalization, cutting to the robot's dims and
delta -> absolute. All of it is read from the checkpoint directory's own files:

    io = load_policy_io("/data/pi05_libero")          # convention detected from the files
    pixels, mask = io.images({"base_0_rgb": rgb, "left_wrist_0_rgb": wrist})
    text = io.prompt("pick up the bowl", state)        # or io.prompt_tokens(task, state, tok)
    actions = io.actions(chunk, state)                  # [horizon, action_dims] float64
"""
from __future__ import annotations

from .errors import PolicyIOError
from .images import SLOTS
from .limits import LimitsIO
from .policy import PolicyIO, load_policy_io

__all__ = ["LimitsIO", "PolicyIO", "PolicyIOError", "SLOTS", "load_policy_io"]
