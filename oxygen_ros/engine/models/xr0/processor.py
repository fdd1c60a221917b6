"""Policy I/O for Xiaomi-Robotics-0 (XR-0) checkpoints, as the official deploy path does it.
Its per-robot-type action statistics (where, parsing, the action mask): action_stats.py;
reading a checkpoint directory into an XR0PolicyIO: policy_io_loader.py.

The official repo (XiaomiRobotics/Xiaomi-Robotics-0) only holds deploy/eval code; the
checkpoint carries its own processor (`MiBotProcessor`, processing_mibot.py, loaded with
trust_remote_code and `use_fast=False`). Its source was NOT readable in any stored copy,
so what it does is pieced together from code that calls it. Sources, [copy] = a
third-party copy or caller, not the original:

  S1  XiaomiRobotics/Xiaomi-Robotics-0 README.md (deploy snippet)
  S2  deploy/server.py, "Copyright Xiaomi" (copies in 01-technologies/Xiaomi-Robotics-0
      and a vendored one) [copy]
  S3  eval_calvin/main.py (rosmontis2005/Xiaomi-Robotics-0-orchardbech) [copy]; the LIBERO
      client's state/prompt lines quoted by two eval ports of eval_libero/main.py [copy]
  S4  RLinf/RLinf rlinf/models/embodiment/xr0/xr0_action_model.py (replicates
      modeling_mibot.py forward and calls the checkpoint's processor) [copy]
  S5  XR-1 (same MiBotProcessor family): an XR-1 post-training script checking
      `processor.action_config[rt]["mean"/"std"]` ([1, H, D] tensors) and
      `get_action_mask(rt) == std > 1e-5`; an XR-1 codebase map: decode_action =
      x * std + mean; RLinf's XR-1 policy: robot types = action_config.keys() [copy]
  S6  Anonymous-694/Xiaomi-Robotics-0 xr0/mibot/utils/io.py, server/deploy.py (the
      post-training runtime, NOT the HF deploy path) [copy]
  S7  WorldFoundry's in-tree XR-0 runtime (worldfoundry/.../xiaomi_robotics_0/runtime.py)
      and an orchard smoke test that ran the CALVIN checkpoint [copy]

Facts used here:
- Prompt (S1, S2, S7): one ChatML string, no system turn,
      "<|im_start|>user\\nThe following observations are captured from multiple views.\\n"
      "# Base View\\n<|vision_start|><|image_pad|><|vision_end|>\\n"
      "# Left-Wrist View\\n<|vision_start|><|image_pad|><|vision_end|>\\n"
      "Generate robot actions for the task:\\n{instruction} /no_cot<|im_end|>\\n"
      "<|im_start|>assistant\\n<cot></cot><|im_end|>\\n"
  i.e. " /no_cot" right after the instruction inside the user turn, and an assistant turn
  that is the empty "<cot></cot>" and is CLOSED with <|im_end|>\\n. The processor expands
  each <|image_pad|> to the image's token count. Images in that order: [base, wrist_left].
  For robot types containing "bridge" or "fractal" the server instead passes the client's
  `language` verbatim as the text with ONE image [base] (S2): the client builds that
  prompt; its text is not in the deploy code, so prompt_text() returns the instruction
  unchanged there, exactly as the server does.
- The eval clients, not the server, capitalise the task and append "." (S3);
  `client_instruction()` does that.
- State (S1-S4): the RAW proprio state, zero-padded to state_dim = 32, goes to the model
  (`inputs["state"] = torch.from_numpy(state).view(1, 1, -1)`); the model's
  state_projector consumes it directly (S4). No normalisation on the deploy path.
  LIBERO: eef_pos(3) + axis-angle(3) + gripper_qpos(2) + 24 zeros; CALVIN:
  robot_obs[:7] + 25 zeros (S3).
- Robot types and statistics: the processor's `action_config` maps robot_type ->
  {"mean", "std"}, each [1, H, 32] (S5); `list_robot_types()` = its keys; an unknown
  type is a KeyError in the processor (S7). H is per robot type (CALVIN: mask and output
  [1, 10, 32] although config.action_length = 30, S7).
- Action mask (S5; XR-0 talk slides: "per-dim std-mask"): get_action_mask(rt) =
  std > 1e-5, float [1, H, 32]; the model multiplies the noisy action by it.
- decode_action (S5): x * std + mean on the whole [H, 32] chunk. The clients then cut:
  LIBERO/CALVIN take dims 0..6 (S3); CALVIN binarises the gripper sign (client-side).
  Actions are used as the env's own action (LIBERO/CALVIN are relative-EE envs); the
  deploy path adds NO state. (The post-training runtime, S6, rotates EE deltas into the
  current pose, a different path not covered here.)
- Images (S1, S2): `AutoProcessor.from_pretrained(..., use_fast=False)` = the slow
  Qwen2-VL image processor = PIL bicubic: resize_mode "pil" (qwen3vl_images).

ASSUMPTIONS (marked because the processor source was not readable):
- A1 where action_config lives on disk: transformers' ProcessorMixin.save_pretrained
  writes a processor's extra init arguments to processor_config.json, so it is read from
  processor_config.json, else preprocessor_config.json, key "action_config", as JSON
  {robot_type: {"mean": [[...32] x H] or [[[...]]] (leading 1), "std": same}}. A
  statistics file in that format can be given instead (stats_path=).
- A2 decode eps: 0 (S5's formula); unnormalize_eps= sets S6's 1e-6 (x * (std+eps) + mean).
- A3 mask threshold 1e-5 (S5, from XR-1's processor); mask_threshold= changes it.
- A4 robot actions = the dims active in the mask (any timestep), in dim order; for
  LIBERO/CALVIN statistics that are non-zero on dims 0..6 only this equals the clients'
  [:7] cut. If a checkpoint's std is non-zero past the robot's dims, pass active_dims=.

In the node (policy_io "xr0": policy_io_hooks.py builds it for engine/factory.py),
XR0PolicyIO stands in for PolicyIO:
`observation(images, state, task, stamp)` gives the engine's Observation (the camera
frames in our model's slots base_0_rgb, left_wrist_0_rgb = the prompt's [base,
wrist_left]; the raw state zero-padded to state_dim; `prompt_ids` = the tokens the
Qwen3-VL prefix (models/qwen3vl/modeling.py) puts after the last image: the deploy prompt's
tail "\nGenerate robot actions for the task:\n{instruction} /no_cot"; the robot type and
its action mask in `extra`), `actions(chunk, state)`, `model_actions`, `action_dims`,
`convention`, `action_rate_hz`, `summary()`. What that prefix does NOT yet reproduce of
the deploy prompt (the view headings between the images, the closed user turn and the
"<cot></cot>" assistant turn) is what `prompt_segments()` / `deploy_prompt_ids()` spell
out; the model's chunk horizon must be the robot type's (`horizon()`;
policy_io_hooks.fit_model sets it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...policy_io.errors import PolicyIOError
from ..qwen3vl.image_processing import Qwen3VLImageSettings, qwen3vl_pixels
from .action_stats import MASK_THRESHOLD, RobotStats

STATE_DIM = 32
ACTION_DIM = 32
VIEW_LABELS = ("Base View", "Left-Wrist View")
SINGLE_VIEW_MARKERS = ("bridge", "fractal")  # deploy/server.py: text = language, images = [base]
# Robot types named by the official deploy/eval code and docs (the checkpoint's own
# action_config decides what a given checkpoint accepts).
OFFICIAL_ROBOT_TYPES = ("libero_all", "calvin_abcd_orig", "calvin_abc_orig",
                        "agibot_pt_v3", "droid_pt", "midata_mix_ann_pt_v1", "molmoact_pt")
# Our Qwen3-VL model's camera slots (models/qwen3vl/modeling.py) for the prompt's two views, in
# the prompt's order [base, wrist_left]; bridge/fractal types use the first only.
MODEL_SLOTS = ("base_0_rgb", "left_wrist_0_rgb")
MAX_PROMPT_TOKENS = 200                      # Qwen3VLModelConfig.max_prompt_tokens' default
IMAGE_TEXT = "<|vision_start|><|image_pad|><|vision_end|>"


@dataclass
class XR0PolicyIO:
    """One XR-0 checkpoint's rules: raw state -> model state, chunk -> robot actions,
    instruction -> prompt text, camera frames -> Qwen3-VL pixels."""
    checkpoint_dir: Path
    stats_file: Path
    robots: dict[str, RobotStats]
    robot_type: str | None = None              # the default for the methods' robot_type=None
    image_settings: Qwen3VLImageSettings = field(default_factory=Qwen3VLImageSettings)
    image_settings_source: str = "Qwen3-VL defaults (no preprocessor_config.json)"
    state_dim: int = STATE_DIM
    action_dim: int = ACTION_DIM
    unnormalize_eps: float = 0.0
    mask_threshold: float = MASK_THRESHOLD
    delta_dims: dict[str, tuple[int, ...]] = field(default_factory=dict)  # robot_type -> dims
    # -- what the node reads (PolicyIO's names) --
    tokenizer: Any = None                      # anything with encode(text): the checkpoint's
    max_prompt_tokens: int = MAX_PROMPT_TOKENS
    action_rate_hz: float | None = None        # the data's rate, where a checkpoint file says it
    action_rate_source: str = ""
    camera_slots: tuple[str, ...] = MODEL_SLOTS
    convention: str = field(default="xr0", init=False)

    # ------------------------------------------------------------ robot types
    @property
    def robot_types(self) -> list[str]:
        return list(self.robots)

    def _robot(self, robot_type: str | None) -> tuple[str, RobotStats]:
        name = robot_type if robot_type is not None else self.robot_type
        if name is None:
            raise PolicyIOError(f"no robot_type given and no default set; the checkpoint defines: "
                                f"{', '.join(self.robots)}")
        if name not in self.robots:
            raise PolicyIOError(f"unknown robot_type {name!r}: {self.stats_file} defines "
                                f"{', '.join(self.robots)}")
        return name, self.robots[name]

    def horizon(self, robot_type: str | None = None) -> int:
        return self._robot(robot_type)[1].horizon

    def action_mask(self, robot_type: str | None = None) -> np.ndarray:
        """bool [32]: the dims active (std > threshold) at any timestep."""
        return self._robot(robot_type)[1].mask.any(axis=0)

    def model_action_mask(self, robot_type: str | None = None) -> np.ndarray:
        """float32 [H, 32], what get_action_mask(robot_type)[0] gives the model."""
        return self._robot(robot_type)[1].mask.astype(np.float32)

    def active_dims(self, robot_type: str | None = None) -> tuple[int, ...]:
        return self._robot(robot_type)[1].active_dims

    # ------------------------------------------------------------ state
    def state_vector(self, state_raw, robot_type: str | None = None) -> np.ndarray:
        """Raw proprio state -> float32 [32]: the raw values, zero-padded (the deploy path
        does not normalise the state; see the module docstring)."""
        self._robot(robot_type)           # a bad robot type fails here too
        x = np.asarray(state_raw)
        if x.ndim != 1 or x.size == 0 or x.dtype.kind not in "iuf":
            raise PolicyIOError(f"state must be a non-empty 1-D numeric vector, got "
                                f"{getattr(x, 'dtype', '')} shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise PolicyIOError(f"state contains NaN or inf: {x.tolist()}")
        if x.shape[0] > self.state_dim:
            raise PolicyIOError(f"state has {x.shape[0]} dims, more than the model's state_dim "
                                f"{self.state_dim}")
        out = np.zeros(self.state_dim, dtype=np.float32)
        out[: x.shape[0]] = x
        return out

    # ------------------------------------------------------------ actions
    def _chunk(self, chunk, stats: RobotStats, what: str) -> np.ndarray:
        try:
            import torch
            if isinstance(chunk, torch.Tensor):
                chunk = chunk.detach().float().cpu().numpy()
        except ImportError:                # pragma: no cover - torch is a dependency
            pass
        y = np.asarray(chunk)
        if y.ndim == 3 and y.shape[0] == 1:
            y = y[0]
        if y.ndim != 2 or y.shape != (stats.horizon, self.action_dim) or y.dtype.kind != "f":
            raise PolicyIOError(f"{what} must be a float [{stats.horizon}, {self.action_dim}] array "
                                f"(this robot type's horizon), got {y.dtype} shape {y.shape}")
        if not np.all(np.isfinite(y)):
            raise PolicyIOError(f"{what} contains NaN or inf")
        return y.astype(np.float64)

    def _delta(self, name: str) -> tuple[int, ...]:
        return self.delta_dims.get(name, ())

    def _delta_state(self, state_raw, dims, name) -> np.ndarray:
        if state_raw is None:
            raise PolicyIOError(f"robot_type {name!r} has delta dims {list(dims)}: pass the raw state")
        s = self.state_vector(state_raw, name).astype(np.float64)
        return s

    def decode(self, model_actions, robot_type: str | None = None) -> np.ndarray:
        """decode_action: [H, 32] model space -> [H, 32] robot space, x * (std + eps) + mean."""
        name, stats = self._robot(robot_type)
        y = self._chunk(model_actions, stats, "model actions")
        return y * (stats.std + self.unnormalize_eps) + stats.mean

    def actions(self, model_actions, state_raw=None, robot_type: str | None = None) -> np.ndarray:
        """Model chunk [H, 32] -> robot actions [H, n_active] float64: unnormalise, keep the
        active dims (in dim order), then add the raw state on delta dims (none by default:
        the official deploy path adds none)."""
        name, stats = self._robot(robot_type)
        out = self.decode(model_actions, name)[:, list(stats.active_dims)]
        dims = self._delta(name)
        if dims:
            state = self._delta_state(state_raw, dims, name)
            cols = [stats.active_dims.index(d) for d in dims]
            out[:, cols] += state[list(dims)]
        return out

    def model_actions(self, robot_actions, state_raw=None, robot_type: str | None = None) -> np.ndarray:
        """Inverse of actions(): robot actions [n, n_active] -> model space [n, 32] (inactive
        dims 0, as XR training targets have them), e.g. a previous chunk for RTC. Delta dims
        are taken relative to `state_raw`, the new observation's raw state."""
        name, stats = self._robot(robot_type)
        x = np.asarray(robot_actions)
        n_active = len(stats.active_dims)
        if x.ndim != 2 or x.shape[1] != n_active or not 1 <= x.shape[0] <= stats.horizon \
                or x.dtype.kind not in "iuf" or not np.all(np.isfinite(x)):
            raise PolicyIOError(f"robot actions must be a finite [n <= {stats.horizon}, {n_active}] "
                                f"array, got {x.dtype} shape {x.shape}")
        x = np.array(x, dtype=np.float64)
        dims = self._delta(name)
        if dims:
            state = self._delta_state(state_raw, dims, name)
            cols = [stats.active_dims.index(d) for d in dims]
            x[:, cols] -= state[list(dims)]
        n = x.shape[0]
        act = list(stats.active_dims)
        out = np.zeros((n, self.action_dim), dtype=np.float64)
        std = stats.std[:n, act] + self.unnormalize_eps
        normed = (x - stats.mean[:n, act]) / np.where(std == 0, 1.0, std)
        out[:, act] = np.where(stats.mask[:n, act], normed, 0.0)
        return out

    # ------------------------------------------------------------ prompt
    @staticmethod
    def client_instruction(task: str) -> str:
        """The eval clients' convention (eval_libero/eval_calvin): capitalise, append '.'."""
        if not isinstance(task, str):
            raise PolicyIOError(f"task must be a string, got {type(task).__name__}")
        return task.capitalize() + "."

    def single_view(self, robot_type: str | None = None) -> bool:
        name, _ = self._robot(robot_type)
        return any(marker in name for marker in SINGLE_VIEW_MARKERS)

    def prompt_text(self, instruction: str, robot_type: str | None = None,
                    view_labels: Sequence[str] = VIEW_LABELS) -> str:
        """The text given to the processor, exactly as deploy/server.py builds it."""
        if not isinstance(instruction, str):
            raise PolicyIOError(f"instruction must be a string, got {type(instruction).__name__}")
        if self.single_view(robot_type):
            return instruction             # the server passes the client's text verbatim
        views = "".join(f"# {label}\n<|vision_start|><|image_pad|><|vision_end|>\n" for label in view_labels)
        return ("<|im_start|>user\nThe following observations are captured from multiple views.\n"
                f"{views}Generate robot actions for the task:\n{instruction} /no_cot<|im_end|>\n"
                "<|im_start|>assistant\n<cot></cot><|im_end|>\n")

    def prompt_messages(self, instruction: str, robot_type: str | None = None,
                        view_labels: Sequence[str] = VIEW_LABELS) -> list[dict]:
        """The same prompt as chat messages (user: text and image parts; assistant: the
        empty "<cot></cot>"). `render_chatml(messages)` gives prompt_text() back; the
        deploy code itself passes the text, not messages."""
        if self.single_view(robot_type):
            raise PolicyIOError("bridge/fractal robot types take the client's own prompt text "
                                "(deploy/server.py passes `language` verbatim); use prompt_text()")
        if not isinstance(instruction, str):
            raise PolicyIOError(f"instruction must be a string, got {type(instruction).__name__}")
        content: list[dict] = [{"type": "text", "text": "The following observations are captured from multiple views.\n"}]
        for label in view_labels:
            content += [{"type": "text", "text": f"# {label}\n"}, {"type": "image"}, {"type": "text", "text": "\n"}]
        content.append({"type": "text", "text": f"Generate robot actions for the task:\n{instruction} /no_cot"})
        return [{"role": "user", "content": content},
                {"role": "assistant", "content": [{"type": "text", "text": "<cot></cot>"}]}]

    @staticmethod
    def render_chatml(messages: list[dict]) -> str:
        """ChatML as Qwen writes it: <|im_start|>role\\n...<|im_end|>\\n per turn, an image
        part as <|vision_start|><|image_pad|><|vision_end|>, no system turn added."""
        out = []
        for message in messages:
            parts = []
            for part in message["content"]:
                parts.append("<|vision_start|><|image_pad|><|vision_end|>" if part["type"] == "image"
                             else part["text"])
            out.append(f"<|im_start|>{message['role']}\n{''.join(parts)}<|im_end|>\n")
        return "".join(out)

    # ------------------------------------------------------------ images
    def expected_images(self, robot_type: str | None = None) -> int:
        return 1 if self.single_view(robot_type) else 2

    def images(self, frames, robot_type: str | None = None, device=None):
        """[base, wrist_left] HxWx3 uint8 RGB (just [base] for bridge/fractal) ->
        (pixel_values, grid_thw) by the checkpoint's image settings."""
        if isinstance(frames, np.ndarray) or not isinstance(frames, (list, tuple)):
            raise PolicyIOError("images: pass a list of HxWx3 uint8 frames in the prompt's order "
                                "[base, wrist_left]")
        want = self.expected_images(robot_type)
        if len(frames) != want:
            raise PolicyIOError(f"images: the prompt has {want} image slot(s) "
                                f"({'[base]' if want == 1 else '[base, wrist_left]'}), got {len(frames)} frames")
        return qwen3vl_pixels(list(frames), self.image_settings, device=device)

    # ------------------------------------------------------------ the node's interface
    @property
    def action_dims(self) -> int:
        """Robot action dimensions of the default robot type (its active dims)."""
        return len(self.active_dims())

    def prompt_tail(self, instruction: str, robot_type: str | None = None) -> str:
        """The deploy prompt's text after the last image and before <|im_end|>: what our
        Qwen3-VL prefix (which puts `<|im_start|>user\\n`, the images, then obs.prompt_ids)
        can carry of it. Bridge/fractal types have no such tail (the client's own text)."""
        if self.single_view(robot_type):
            raise PolicyIOError("bridge/fractal robot types take the client's own prompt text "
                                "(deploy/server.py passes `language` verbatim), which the node cannot build")
        if not isinstance(instruction, str):
            raise PolicyIOError(f"instruction must be a string, got {type(instruction).__name__}")
        return f"\nGenerate robot actions for the task:\n{instruction} /no_cot"

    def prompt_segments(self, instruction: str, robot_type: str | None = None,
                        view_labels: Sequence[str] = VIEW_LABELS) -> list[str | None]:
        """prompt_text() split at its images: text, None (an image: vision_start, the
        image's pads, vision_end), text, None, text. Joined with IMAGE_TEXT for each None it
        is prompt_text() again; token for token, each text piece is encoded on its own (the
        special tokens around the images split the text there anyway)."""
        text = self.prompt_text(instruction, robot_type, view_labels)
        if self.single_view(robot_type):
            return [text]
        pieces = text.split(IMAGE_TEXT)
        out: list[str | None] = [pieces[0]]
        for piece in pieces[1:]:
            out += [None, piece]
        return out

    def deploy_prompt_ids(self, instruction: str, image_tokens: Sequence[int], tokenizer=None,
                          robot_type: str | None = None) -> list[int]:
        """The deploy path's whole token sequence for a frame: prompt_text() with each image's
        <|image_pad|> expanded to its token count (image_tokens, in image order, e.g.
        qwen3vl_images.image_token_count(grids, merge_size)) and tokenised at once, as the
        processor does. The reference a prefix that reproduces the deploy prompt must equal."""
        tokenizer = tokenizer or self.tokenizer
        if tokenizer is None:
            raise PolicyIOError("no tokenizer: pass one or set XR0PolicyIO.tokenizer")
        segments = self.prompt_segments(instruction, robot_type)
        images = segments.count(None)
        if len(image_tokens) != images:
            raise PolicyIOError(f"the prompt has {images} image(s), got {len(image_tokens)} token counts")
        counts = iter(image_tokens)
        text = "".join(s if s is not None else
                       "<|vision_start|>" + "<|image_pad|>" * int(next(counts)) + "<|vision_end|>" for s in segments)
        return list(tokenizer.encode(text))

    def prompt_tokens(self, task: str, state=None, tokenizer=None) -> list[int]:
        """obs.prompt_ids for our prefix: the tokens of prompt_tail(task). Longer than
        max_prompt_tokens is an error (cutting would drop the task's end and " /no_cot")."""
        tokenizer = tokenizer or self.tokenizer
        if tokenizer is None:
            raise PolicyIOError("no tokenizer: pass one or set XR0PolicyIO.tokenizer")
        ids = list(tokenizer.encode(self.prompt_tail(task)))
        if len(ids) > self.max_prompt_tokens:
            raise PolicyIOError(f"the XR-0 prompt tail takes {len(ids)} tokens, more than {self.max_prompt_tokens}: "
                                "shorten the instruction")
        return ids

    def slot_frames(self, images: dict, robot_type: str | None = None) -> dict:
        """{model slot: HxWx3 uint8} for the prompt's views, in prompt order; missing views,
        extra cameras and bad frames are PolicyIOErrors."""
        if not isinstance(images, dict):
            raise PolicyIOError(f"images must be a dict of camera slot -> HxWx3 uint8, got {type(images).__name__}")
        want = self.camera_slots[: self.expected_images(robot_type)]
        extra = sorted(k for k, v in images.items() if k not in want and v is not None)
        if extra:
            raise PolicyIOError(f"XR-0 takes {len(want)} camera(s) {list(want)} (the prompt's "
                                f"{'[base]' if len(want) == 1 else '[base, wrist_left]'}), got extra {extra}")
        missing = [k for k in want if images.get(k) is None]
        if missing:
            raise PolicyIOError(f"XR-0's prompt needs every view {list(want)}; missing {missing}")
        for k in want:
            img = images[k]
            if not isinstance(img, np.ndarray) or img.ndim != 3 or img.shape[2] != 3 or img.size == 0 \
                    or img.dtype != np.uint8:
                raise PolicyIOError(f"camera {k}: expected a non-empty HxWx3 uint8 array, got "
                                    f"{getattr(img, 'dtype', type(img).__name__)} shape {getattr(img, 'shape', None)}")
        return {k: images[k] for k in want}

    def observation(self, images: dict, state, task: str, stamp: float = 0.0):
        """The engine's Observation for one frame (PolicyIO.observation's contract): the
        views in our model's slots, the state as the model reads it (raw, zero-padded to
        state_dim: the deploy path normalises nothing), prompt_ids = prompt_tokens(task),
        and in `extra` the robot type and its action mask (bool [action_dim]; the deploy
        model multiplies the noisy action by it)."""
        from ...observation.observation import Observation

        name, stats = self._robot(None)
        frames = self.slot_frames(images, name)
        return Observation(images=frames, state=self.state_vector(state, name).astype(np.float64),
                           instruction=task, stamp=stamp, prompt_ids=self.prompt_tokens(task, state),
                           extra={"robot_type": name, "action_mask": stats.mask.any(axis=0).copy(),
                                  "model_action_mask": stats.mask.astype(np.float32),
                                  # the whole deploy prompt, images in their places (models/qwen3vl/modeling.py)
                                  "prompt_segments": self.prompt_segments(task, name)})

    # ------------------------------------------------------------ summary
    def summary(self) -> dict:
        rate = self.action_rate_hz or "not in the checkpoint (set action_rate_hz)"
        default = {} if self.robot_type is None else {
            "horizon": self.horizon(), "action_dims": self.action_dims,
            "active_dims": list(self.active_dims()), "camera_slots": list(self.camera_slots[: self.expected_images()])}
        return {"checkpoint_dir": str(self.checkpoint_dir), "convention": "xr0",
                **default, "action_rate_hz": rate,
                "stats_file": str(self.stats_file), "robot_type": self.robot_type,
                "robot_types": {name: {"horizon": s.horizon, "active_dims": list(s.active_dims),
                                       "delta_dims": list(self._delta(name)),
                                       "images": self.expected_images(name)}
                                for name, s in self.robots.items()},
                "state_dim": self.state_dim, "action_dim": self.action_dim,
                "state_normalization": "none (raw, zero-padded)",
                "unnormalize": f"x * (std + {self.unnormalize_eps}) + mean",
                "mask_threshold": self.mask_threshold,
                "image_settings": self.image_settings_source,
                "resize_mode": self.image_settings.resize_mode}

    def describe(self) -> str:
        return "\n".join(f"{key}: {value}" for key, value in self.summary().items())
