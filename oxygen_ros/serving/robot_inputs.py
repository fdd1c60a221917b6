"""The observation keys of openpi's robot configs, repacked into the engine's camera slots,
state and prompt, and the reply's actions cut to the robot's dimensions.

A client of a π0.5 fine-tune sends its robot's own keys (openpi's LIBERO, DROID and ALOHA
examples); openpi's input transforms map them onto the model's three camera slots (base,
left wrist, right wrist; a missing one is masked), and its output transforms keep the
robot's first action dimensions. Images may come HWC or CHW, uint8 or float in [0, 1], as
openpi's transforms accept them. ALOHA's joint sign flips and gripper conversion
(openpi's `adapt_to_pi`) are that checkpoint's data convention and are not applied here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .wire import Limits

PROMPT_KEY = "prompt"
MAX_IMAGE_SIDE = 4096            # larger images are refused, not resized
# characters a string may have, checked before anything tokenises it (the language keys are
# sessions.py's); a longer one is refused with the reason in the reply, the session goes on
STRING_CAPS = {PROMPT_KEY: 1000, "oxygen/narrate": 1000, "oxygen/remember": 1000, "oxygen/ask": 2000}
MAX_KEYS = 64                    # entries of a map (an observation, ALOHA's images, an array's tags)
MAX_LIST = 64                    # elements of a list (a shape, a state sent as a list)
MAX_CONTAINERS = 1024            # maps and lists in one message


class InputError(ValueError):
    """An observation that does not fit the session's robot inputs (names the key)."""


@dataclass(frozen=True)
class RobotInputs:
    name: str
    cameras: tuple[str, ...]       # key of the image for camera slot 0, 1, ... ("" : that slot masked)
    state: tuple[tuple[str, int], ...]   # (key, dims) concatenated into the state vector
    action_dims: int               # the reply's actions keep this many dimensions

    @property
    def keys(self) -> list[str]:
        return [k for k in self.cameras if k] + [k for k, _ in self.state] + [PROMPT_KEY]


INPUTS = {
    "libero": RobotInputs("libero", ("observation/image", "observation/wrist_image"),
                          (("observation/state", 8),), 7),
    "droid": RobotInputs("droid", ("observation/exterior_image_1_left", "observation/wrist_image_left"),
                         (("observation/joint_position", 7), ("observation/gripper_position", 1)), 8),
    "aloha": RobotInputs("aloha", ("images/cam_high", "images/cam_left_wrist", "images/cam_right_wrist"),
                         (("state", 14),), 14),
}


def _lookup(obs: dict, key: str):
    """obs[key], where "a/b" may also be the nested obs["a"]["b"] (ALOHA's images)."""
    if key in obs:
        return obs[key]
    head, _, rest = key.partition("/")
    if rest and isinstance(obs.get(head), dict) and rest in obs[head]:
        return obs[head][rest]
    raise InputError(f"missing key {key!r}")


def hwc_uint8(image, key: str) -> np.ndarray:
    """An image as HxWx3 uint8 (from HWC or CHW, uint8 or float in [0, 1])."""
    x = np.asarray(image) if isinstance(image, np.ndarray) else None
    if x is None or x.ndim != 3:
        raise InputError(f"{key}: an image must be a 3-D array, got {type(image).__name__} "
                         f"{getattr(image, 'shape', '')}")
    if x.shape[0] == 3 and x.shape[2] != 3:
        x = x.transpose(1, 2, 0)
    if x.shape[2] != 3 or min(x.shape[:2]) < 1 or max(x.shape[:2]) > MAX_IMAGE_SIDE:
        raise InputError(f"{key}: an image must be HxWx3 or 3xHxW with sides 1..{MAX_IMAGE_SIDE}, "
                         f"got shape {list(np.shape(image))}")
    if x.dtype == np.uint8:
        return np.array(x, order="C")      # a copy: arrays decoded from a message are read-only
    if x.dtype.kind != "f":
        raise InputError(f"{key}: an image must be uint8 or float in [0, 1], got {x.dtype}")
    if not np.all(np.isfinite(x)):
        raise InputError(f"{key}: the image has NaN or inf")
    return np.ascontiguousarray((np.clip(x, 0.0, 1.0) * 255).astype(np.uint8))


def repack(obs, inputs: RobotInputs, slots) -> tuple[dict, np.ndarray, str]:
    """(images by camera slot, state, prompt) from one observation dict; InputError naming
    the first missing or misshapen key."""
    if not isinstance(obs, dict):
        raise InputError(f"an observation must be a map, got {type(obs).__name__}")
    images = {}
    for slot, key in zip(slots, inputs.cameras):
        if key:
            images[slot] = hwc_uint8(_lookup(obs, key), key)
    parts = []
    for key, dims in inputs.state:
        raw = _lookup(obs, key)
        try:
            v = np.asarray(raw)
        except (ValueError, TypeError, OverflowError):      # ragged nesting and the like
            raise InputError(f"{key}: expected {dims} numbers, got a {type(raw).__name__} "
                             "that is not an array") from None
        if v.dtype.kind not in "iuf" or v.size != dims:
            raise InputError(f"{key}: expected {dims} numbers, got {v.dtype} shape {list(v.shape)}")
        parts.append(v.reshape(-1).astype(np.float64))
    state = np.concatenate(parts)
    if not np.all(np.isfinite(state)):
        raise InputError(f"{', '.join(k for k, _ in inputs.state)}: the state has NaN or inf")
    prompt = obs.get(PROMPT_KEY, "")
    if not isinstance(prompt, str):
        raise InputError(f"{PROMPT_KEY}: expected a string, got {type(prompt).__name__}")
    return images, state, prompt


def wire_limits(inputs: RobotInputs, max_message_bytes: int) -> Limits:
    """msgpack's limits for an observation of `inputs`: strings up to the longest cap in
    UTF-8 (so one over its cap still reaches the check that says so in the reply), byte
    strings up to the message, lists and maps a little over what the schema holds."""
    return Limits(max_str_len=4 * max(STRING_CAPS.values()), max_bin_len=max_message_bytes,
                  max_array_len=max(MAX_LIST, *(dims for _, dims in inputs.state)),
                  max_map_len=max(MAX_KEYS, 2 * len(inputs.keys)), max_containers=MAX_CONTAINERS)


def over_cap(key: str, value) -> str:
    """Why a string is too long for `key` ("" if it is not a string or fits)."""
    cap = STRING_CAPS.get(key)
    if cap is None or not isinstance(value, str) or len(value) <= cap:
        return ""
    return f"{key}: {len(value)} characters, at most {cap}"
