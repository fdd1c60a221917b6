"""Policy I/O for StarVLA QwenPI_v3 checkpoints ("Qwen3VL-PI_v3"), as StarVLA's own code does it.
Where a run keeps its files: run_files.py; its dataset_statistics.json parsed: dataset_stats.py;
the state as text (normalised, binned, after the instruction): state_text.py.

Sources (repo starVLA/starVLA unless named otherwise; read for facts, no code copied):
  S1  starVLA/model/framework/VLM4A/QwenPI_v3.py: state2str_transform,
      add_discretized_state_to_instruction, predict_action (images, resize, state)
  S2  starVLA/model/modules/vlm/QWen3.py: build_qwenvl_inputs (chat messages, CoT_prompt,
      apply_chat_template(add_generation_prompt=True)), AutoProcessor.from_pretrained(base_vlm)
  S3  starVLA/model/framework/share_tools.py: read_mode_config / read_model_config
      (<run_dir>/checkpoints/<name>.pt with config.yaml | config.json and
      dataset_statistics.json in <run_dir> = the .pt's parents[1])
  S4  starVLA/dataloader/gr00t_lerobot/datasets.py: LeRobotMixtureDataset.save_dataset_statistics,
      combine_modality_stats, generate_action_mask_for_used_keys
  S5  starVLA/dataloader/gr00t_lerobot/transform/state_action.py: Normalizer (q99, min_max,
      mean_std, binary), and data_config.py: OxeBridgeDataConfig / OxeRT1DataConfig modes
  S6  examples/SimplerEnv/eval_files/model2simpler_interface.py: ModelClient.unnormalize_actions,
      get_action_stats (norm_stats[unnorm_key]["action"]), unnorm_key oxe_bridge / oxe_rt1
  S7  deployment/model_server/policy_wrapper.py + policy_norm_processor.py (the newer server
      path: training-time transforms rebuilt from the robot type's DataConfig)
  S8  starVLA/training/trainer_utils/trainer_tools.py: resize_images (PIL Image.resize);
      requirements.txt: transformers==4.57.0, torchvision==0.21.0

Facts used here:
- State text (S1): `np.digitize(state, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1`, the
  numbers joined by single spaces, and the instruction becomes
  f"{instruction} [STATE] {b1 b2 ...} [ACTION]" (one space on each side of both markers).
  The 256 left edges are -1 + k/128 (k = 0..255, exact in binary), so bin k holds
  [-1 + k/128, -1 + (k+1)/128): -1 -> 0, 0.0 -> 128 (an edge belongs to the bin above it),
  1 - 1/128 -> 255 and 1.0 -> 255 (nothing closes the last bin). Values above 1 also give
  255; values BELOW -1 give -1 (digitize returns 0), a token StarVLA itself would write.
  The default here is StarVLA's raw digitize, "-1" included (a checkpoint was trained on
  what its own code writes); `clip_state=True` (state_bins' clip=True) clips to [-1, 1]
  first, so < -1 gives bin 0. NaN is an error here (digitize would file it as 255). The
  docstring example in S1 ("[-0.5, 0.1, 0.8] -> 95 133 203") does not match its own code,
  which gives "64 140 230".
- Only `state[0]` of the example's [1, state_dim] state is written (S1). When a request
  carries no state the instruction is left as it is (S1); the SimplerEnv client (S6)
  sends none, so the released Bridge/RT-1 checkpoint is driven without state text there.
- Which normalisation the state gets before binning is the robot type's training
  transform (S5, S7): per state key "q99" (2 (x - q01) / (q99 - q01) - 1 where q01 != q99,
  else x unchanged; then clamped to [-1, 1]), "min_max" (2 (x - min) / (max - min) - 1 where
  min != max, else 0; NOT clamped), "mean_std" ((x - mean) / std where std != 0, else x),
  "binary" (1.0 if x > 0.5 else 0.0). OxeBridgeDataConfig and OxeRT1DataConfig: q99 on
  every state key except the last, `state.gripper`, which is binary. `state_modes` sets
  them (one mode for all dims, or one per dim); "none" passes an already-normalised state.
- The prompt (S2): one user message whose content is the images first (one
  {"type": "image"} per view, in the example's order), then ONE text part, the
  instruction (with state text), or `CoT_prompt.replace("{instruction}", that)` when the
  config has datasets.vla_data.CoT_prompt; apply_chat_template with
  add_generation_prompt=True. With Qwen3-VL's template (no default system turn) that is
  "<|im_start|>user\\n" + "<|vision_start|><|image_pad|><|vision_end|>" x n_images
  + text + "<|im_end|>\\n<|im_start|>assistant\\n". The processor expands each image_pad.
- dataset_statistics.json (S4): {key: {"action": {"mean", "std", "max", "min", "q01",
  "q99": [D floats], "mask": [D bools]}, "state": {same six, no mask}, "num_transitions",
  "num_trajectories"}}; the key is the embodiment tag / robot type (e.g. "oxe_bridge",
  "oxe_rt1"); the arrays are the used keys' stats concatenated in key order; mask is False
  on gripper keys ("gripper" in the key name), True elsewhere. Older files write the state
  stats under "proprio" (accepted).
- Action unnormalisation (S6, the stats-file path): clip to [-1, 1]; dim 6 := 0 if < 0.5
  else 1; out = where(mask, 0.5 (x + 1) (q99 - q01) + q01, x). The key: unnorm_key
  ("oxe_bridge" for WidowX, "oxe_rt1" for the Google robot; the only key when there is
  one). Here the binarised dims default to the mask's False dims (the gripper keys, =
  dim 6 on the 7-D OXE layouts) and `binary_dims=` overrides them.
  The newer server path (S7) applies Normalizer.inverse instead: q99 WITHOUT the clip and
  binary as x > 0.5; `clip_actions=False` gives the former; the two differ only where the
  model leaves [-1, 1] (and at exactly 0.5 on binary dims).
- No state is added to the actions (OXE actions are delta-EE commands; the clients send
  them to the env as they are); `delta_dims=` adds the raw state on chosen dims.
- Images (S1, S2, S8): numpy frames become PIL images; when the config has
  datasets.vla_data.image_size the model resizes every image with PIL `Image.resize`
  (default filter = bicubic) to that (width, height) before the processor; the processor
  is `AutoProcessor.from_pretrained(base_vlm)` with `use_fast` unset.

ASSUMPTIONS (marked because the source does not pin them):
- B1 resize_mode default "torch": transformers 4.57 (S8's pin) picks the fast image
  processor when use_fast is unset and torchvision is installed (the slow one since
  4.52 only when asked) [derived from transformers' release notes, not StarVLA code];
  it runs on the CPU (the processor's tensors are moved to the GPU afterwards).
  resize_mode="pil" selects the slow one.
- B2 image processor settings: Qwen3-VL's published ones (Qwen3VLImageSettings defaults),
  unless a preprocessor_config.json sits in the run directory or is passed (the processor
  comes from the BASE model's directory, which a StarVLA run directory does not hold).
- B3 state_modes default: "q99" on every dim (what the Bridge/RT-1 configs use for all
  but the gripper; pass e.g. ["q99"] * 7 + ["binary"] for them exactly).
- B4 state normalisation is computed in float64 (the transforms use the state's own
  dtype, float32 in the LeRobot loaders), which can move a value sitting within ~1e-7 of
  a bin edge to the neighbouring bin.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ...policy_io.errors import PolicyIOError
from ..qwen3vl.image_processing import RESIZE_MODES, Qwen3VLImageSettings, qwen3vl_pixels
from .dataset_stats import (EXPECTED_STATS, STAT_FIELDS, ActionStats, action_keys, entry_state_stats,
                            parse_action_stats)
from .run_files import (CONFIG_FILES, PREPROCESSOR_FILE, STATS_FILE, find_run_file, read_json, read_run_config,
                        run_dirs)
from .state_text import (ACTION_MARKER, BINARY_THRESHOLD, STATE_BINS, STATE_MARKER, STATE_MODES, bins_text,
                         normalize_state, state_bins, state_vector, with_state)

ACTION_NORMS = ("q99", "min_max")
DEFAULT_HORIZON = 16
IMAGE_SLOT = "<|vision_start|><|image_pad|><|vision_end|>"


def _get(d, *keys, default=None):
    for key in keys:
        if not isinstance(d, dict) or key not in d:
            return default
        d = d[key]
    return d


@dataclass
class StarVLAPolicyIO:
    """One StarVLA QwenPI_v3 run's rules: raw state -> state text in the instruction,
    instruction -> chat prompt, camera frames -> Qwen3-VL pixels, normalised chunk ->
    robot actions."""
    run_dir: Path
    stats_file: Path
    stats: dict                              # the whole dataset_statistics.json
    unnorm_key: str
    action_stats: ActionStats
    config: dict = field(default_factory=dict)
    config_file: Path | None = None
    action_norm: str = "q99"
    state_modes: tuple[str, ...] | str = "q99"
    clip_state: bool = False                 # True: clip to [-1, 1] before binning (StarVLA does not)
    clip_actions: bool = True
    binary_dims: tuple[int, ...] = ()
    delta_dims: tuple[int, ...] = ()
    horizon: int = DEFAULT_HORIZON
    n_images: int = 1
    cot_prompt: str | None = None
    train_image_size: tuple[int, int] | None = None     # (width, height) for PIL resize
    image_settings: Qwen3VLImageSettings = field(default_factory=lambda: Qwen3VLImageSettings(resize_mode="torch"))
    image_settings_source: str = "Qwen3-VL defaults (no preprocessor_config.json)"

    # ------------------------------------------------------------ keys
    @property
    def keys(self) -> list[str]:
        return action_keys(self.stats)

    @property
    def action_dim(self) -> int:
        return self.action_stats.dim

    @property
    def state_stats(self) -> dict | None:
        return entry_state_stats(self.stats[self.unnorm_key])

    # ------------------------------------------------------------ state
    def _modes(self, n: int) -> tuple[str, ...]:
        if isinstance(self.state_modes, str):
            return (self.state_modes,) * n
        if len(self.state_modes) != n:
            raise PolicyIOError(f"state has {n} dims but state_modes names {len(self.state_modes)}: "
                                f"{list(self.state_modes)}")
        return tuple(self.state_modes)

    def _raw_state(self, state) -> np.ndarray:
        return state_vector(state)

    def normalize_state(self, state) -> np.ndarray:
        """Raw state [S] -> the training transform's normalised state [S] float64 (S5)."""
        x = self._raw_state(state)
        return normalize_state(x, self._modes(x.size), self.state_stats, self.stats_file, self.unnorm_key)

    def state_bins(self, state, normalized: bool = False) -> np.ndarray:
        """Raw (or, with normalized=True, already normalised) state -> its 256-bin numbers."""
        x = self._raw_state(state) if normalized else self.normalize_state(state)
        return state_bins(x, clip=self.clip_state)

    def state_text(self, state, normalized: bool = False) -> str:
        """The state as the text between [STATE] and [ACTION]: bins joined by single spaces."""
        return bins_text(self.state_bins(state, normalized=normalized))

    # ------------------------------------------------------------ prompt
    def instruction_text(self, instruction: str, state=None, normalized: bool = False) -> str:
        """The one text part of the user turn: instruction + state text (when a state is
        given), wrapped by the config's CoT_prompt when it has one (S1, S2)."""
        if not isinstance(instruction, str):
            raise PolicyIOError(f"instruction must be a string, got {type(instruction).__name__}")
        text = instruction if state is None else with_state(instruction, self.state_text(state, normalized))
        if self.cot_prompt is not None:
            text = self.cot_prompt.replace("{instruction}", text)
        return text

    def _n_images(self, n_images: int | None) -> int:
        n = self.n_images if n_images is None else n_images
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise PolicyIOError(f"n_images must be an int >= 0, got {n!r}")
        return n

    def prompt_messages(self, instruction: str, state=None, n_images: int | None = None,
                        normalized: bool = False) -> list[dict]:
        """build_qwenvl_inputs' message: images first, then the text (S2)."""
        content: list[dict] = [{"type": "image"} for _ in range(self._n_images(n_images))]
        content.append({"type": "text", "text": self.instruction_text(instruction, state, normalized)})
        return [{"role": "user", "content": content}]

    def prompt_text(self, instruction: str, state=None, n_images: int | None = None,
                    normalized: bool = False) -> str:
        """The chat template's output for that message with add_generation_prompt=True
        (one image slot per view; the processor expands each <|image_pad|>)."""
        text = self.instruction_text(instruction, state, normalized)
        return (f"<|im_start|>user\n{IMAGE_SLOT * self._n_images(n_images)}{text}<|im_end|>\n"
                "<|im_start|>assistant\n")

    # ------------------------------------------------------------ actions
    def _chunk(self, chunk) -> np.ndarray:
        try:
            import torch
            if isinstance(chunk, torch.Tensor):
                chunk = chunk.detach().float().cpu().numpy()
        except ImportError:                 # pragma: no cover - torch is a dependency
            pass
        y = np.asarray(chunk)
        if y.ndim == 3 and y.shape[0] == 1:
            y = y[0]
        if y.ndim != 2 or y.shape[1] != self.action_dim or y.shape[0] != self.horizon or y.dtype.kind != "f":
            raise PolicyIOError(f"model actions must be a float [{self.horizon}, {self.action_dim}] array "
                                f"(horizon from the config, dims from {self.stats_file.name}), got "
                                f"{y.dtype} shape {y.shape}")
        if not np.all(np.isfinite(y)):
            raise PolicyIOError("model actions contain NaN or inf")
        return y.astype(np.float64)

    def unnormalize(self, model_actions) -> np.ndarray:
        """S6: clip to [-1, 1] (unless clip_actions=False), binarise the binary dims at 0.5,
        then where(mask, 0.5 (x + 1) (high - low) + low, x)."""
        y = self._chunk(model_actions)
        if self.clip_actions:
            y = np.clip(y, -1.0, 1.0)
        for d in self.binary_dims:
            y[:, d] = np.where(y[:, d] < BINARY_THRESHOLD, 0.0, 1.0)
        s = self.action_stats
        return np.where(s.mask, 0.5 * (y + 1.0) * (s.high - s.low) + s.low, y)

    def actions(self, model_actions, state=None) -> np.ndarray:
        """Normalised chunk [H, D] -> robot actions [H, D] float64; the raw state is added
        on delta_dims (none by default: StarVLA's clients add none)."""
        out = self.unnormalize(model_actions)
        if self.delta_dims:
            if state is None:
                raise PolicyIOError(f"delta_dims {list(self.delta_dims)} need the raw state")
            x = self._raw_state(state)
            if max(self.delta_dims) >= x.size:
                raise PolicyIOError(f"delta_dims {list(self.delta_dims)} exceed the state's {x.size} dims")
            out[:, list(self.delta_dims)] += x[list(self.delta_dims)]
        return out

    # ------------------------------------------------------------ images
    def images(self, frames, device=None):
        """HxWx3 uint8 RGB frames in the prompt's order -> (pixel_values, grid_thw): the
        config's image_size resize (PIL bicubic, S1/S8) when it has one, then the Qwen3-VL
        processor (B1, B2)."""
        if isinstance(frames, np.ndarray) or not isinstance(frames, (list, tuple)):
            raise PolicyIOError("images: pass a list of HxWx3 uint8 frames in the prompt's order")
        if self.n_images and len(frames) != self.n_images:
            raise PolicyIOError(f"images: the config names {self.n_images} view(s) "
                                f"(datasets.vla_data.obs), got {len(frames)} frames")
        out = []
        for i, frame in enumerate(frames):
            if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
                raise PolicyIOError(f"image {i}: expected an HxWx3 uint8 RGB array, got "
                                    f"{type(frame).__name__} {getattr(frame, 'dtype', '')} {getattr(frame, 'shape', '')}")
            if self.train_image_size is not None:
                from PIL import Image
                frame = np.array(Image.fromarray(np.ascontiguousarray(frame))
                                   .resize(self.train_image_size, resample=Image.BICUBIC))
            out.append(frame)
        return qwen3vl_pixels(out, self.image_settings, device=device)

    # ------------------------------------------------------------ the node's contract
    convention = "starvla"
    camera_slots = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")   # the Qwen3-VL models' slots

    @property
    def action_dims(self) -> int:
        return self.action_dim

    def observation(self, images: dict, state, task: str, stamp: float = 0.0):
        """The engine's Observation for one frame (PolicyIO.observation's contract): the
        config's views (the first n_images slots, resized to its image_size), and the whole
        chat prompt as segments for the Qwen3-VL prefix (models/qwen3vl/modeling.py): the images,
        then the instruction with the state as text; the head itself reads no state."""
        from ...observation.observation import Observation

        slots = self.camera_slots[: self.n_images or 1]
        missing = [s for s in slots if images.get(s) is None]
        if missing:
            raise PolicyIOError(f"StarVLA run {self.run_dir}: no image for {missing} (it takes {len(slots)} view(s))")
        frames = []
        for s in slots:
            frame = images[s]
            if self.train_image_size is not None:
                from PIL import Image
                frame = np.array(Image.fromarray(np.ascontiguousarray(frame)).resize(self.train_image_size,
                                                                                     resample=Image.BICUBIC))
            frames.append(frame)
        text = self.instruction_text(task, state)
        segments = ["<|im_start|>user\n", *([None] * len(frames)), f"{text}<|im_end|>\n<|im_start|>assistant\n"]
        return Observation(images=dict(zip(slots, frames)), state=np.zeros(1), instruction=text, stamp=stamp,
                           extra={"prompt_segments": segments})

    # ------------------------------------------------------------ summary
    def summary(self) -> dict:
        modes = self.state_modes if isinstance(self.state_modes, str) else list(self.state_modes)
        return {"run_dir": str(self.run_dir), "convention": "starvla-qwenpi_v3",
                "framework": _get(self.config, "framework", "name"),
                "config_file": str(self.config_file) if self.config_file else None,
                "stats_file": str(self.stats_file), "unnorm_key": self.unnorm_key, "keys": self.keys,
                "horizon": self.horizon, "action_dim": self.action_dim,
                "action_mask": self.action_stats.mask.tolist(), "binary_dims": list(self.binary_dims),
                "unnormalize": f"{'clip [-1, 1], ' if self.clip_actions else ''}binary dims >= 0.5 -> 1, "
                               f"where(mask, 0.5 (x + 1) ({STAT_FIELDS[self.action_norm][1]} - "
                               f"{STAT_FIELDS[self.action_norm][0]}) + {STAT_FIELDS[self.action_norm][0]}, x)",
                "delta_dims": list(self.delta_dims),
                "state_text": f"<instruction> {STATE_MARKER} b1 ... bS {ACTION_MARKER}, "
                              f"{STATE_BINS} bins on [-1, 1]"
                              f"{' (clipped first)' if self.clip_state else ' (below -1: bin -1, as StarVLA)'}",
                "state_modes": modes, "cot_prompt": self.cot_prompt, "n_images": self.n_images,
                "train_image_size": list(self.train_image_size) if self.train_image_size else None,
                "image_settings": self.image_settings_source, "resize_mode": self.image_settings.resize_mode}

    def describe(self) -> str:
        return "\n".join(f"{key}: {value}" for key, value in self.summary().items())


def _dims(values, n: int, what: str) -> tuple[int, ...]:
    dims = tuple(int(d) for d in values)
    if len(set(dims)) != len(dims) or any(not 0 <= d < n for d in dims):
        raise PolicyIOError(f"{what} must be distinct dims in 0..{n - 1}, got {list(dims)}")
    return tuple(sorted(dims))


def _stats_file(stats_path, dirs: list[Path]) -> Path:
    """The dataset_statistics.json: the one given, else the run's (S3)."""
    if stats_path is not None:
        stats_file = Path(os.path.expanduser(str(stats_path)))
        if not stats_file.is_file():
            raise PolicyIOError(f"statistics file {stats_file} does not exist; it should hold {EXPECTED_STATS}")
        return stats_file
    stats_file = find_run_file(dirs, (STATS_FILE,))
    if stats_file is None:
        raise PolicyIOError(f"no {STATS_FILE} in {' or '.join(str(d) for d in dirs)}: StarVLA writes it "
                            f"beside config.yaml in the run directory (the .pt's parent's parent); it "
                            f"should hold {EXPECTED_STATS}. Or pass stats_path=.")
    return stats_file


def _run_settings(config: dict, config_file, stats_file: Path, unnorm_key: str, d: int, n_images: int | None):
    """(horizon, n_images, CoT prompt, train image size) from the run's config, checked
    against the statistics' action dims `d`."""
    action_cfg = _get(config, "framework", "action_model", default={}) or {}
    horizon = action_cfg.get("action_horizon")
    if horizon is None and action_cfg.get("future_action_window_size") is not None:
        horizon = int(action_cfg["future_action_window_size"]) + 1
    horizon = DEFAULT_HORIZON if horizon is None else horizon
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise PolicyIOError(f"{config_file}: framework.action_model.action_horizon must be a positive int, got {horizon!r}")
    cfg_dim = action_cfg.get("action_dim")
    if cfg_dim is not None and cfg_dim != d:
        raise PolicyIOError(f"{config_file}: framework.action_model.action_dim is {cfg_dim} but "
                            f"{stats_file.name}[{unnorm_key!r}].action has {d} dims")
    vla = _get(config, "datasets", "vla_data", default={}) or {}
    cot = vla.get("CoT_prompt")
    if n_images is None:
        obs = vla.get("obs")
        n_images = len(obs) if isinstance(obs, (list, tuple)) and obs else 1
    size = vla.get("image_size")
    if size is not None:
        if not isinstance(size, (list, tuple)) or len(size) != 2 or not all(isinstance(v, int) and v > 0 for v in size):
            raise PolicyIOError(f"{config_file}: datasets.vla_data.image_size must be [width, height], got {size!r}")
        size = (int(size[0]), int(size[1]))
    return horizon, n_images, cot, size


def _image_settings(preprocessor_config, dirs: list[Path], resize_mode: str) -> tuple[Qwen3VLImageSettings, str]:
    """The Qwen3-VL image settings and where they came from (B2): the preprocessor config
    given, else one among `dirs`, else Qwen3-VL's defaults."""
    pre_file = Path(os.path.expanduser(str(preprocessor_config))) if preprocessor_config is not None \
        else find_run_file(dirs, (PREPROCESSOR_FILE,))
    if pre_file is not None:
        if not pre_file.is_file():
            raise PolicyIOError(f"preprocessor config {pre_file} does not exist")
        settings = Qwen3VLImageSettings.from_hf_dict(read_json(pre_file), resize_mode=resize_mode)
        source = str(pre_file)
    else:
        settings = Qwen3VLImageSettings(resize_mode=resize_mode)
        source = "Qwen3-VL defaults (no preprocessor_config.json)"
    return settings, source


def load_starvla_policy_io(path: str | os.PathLike, unnorm_key: str | None = None, *,
                           stats_path: str | os.PathLike | None = None, action_norm: str = "q99",
                           state_modes: str | Sequence[str] = "q99", clip_state: bool = False,
                           clip_actions: bool = True, binary_dims: Sequence[int] | None = None,
                           delta_dims: Sequence[int] = (), n_images: int | None = None,
                           resize_mode: str = "torch",
                           preprocessor_config: str | os.PathLike | None = None) -> StarVLAPolicyIO:
    """Read a StarVLA run's dataset_statistics.json and config (S3 layout).

    path: the run directory, its checkpoints/ directory, or a .pt file in it.
    unnorm_key: the statistics key (required when the file has several).
    stats_path: a dataset_statistics.json elsewhere. action_norm: "q99" (S6) or "min_max".
    state_modes: one mode for all state dims or one per dim (STATE_MODES; see B3).
    clip_state: clip the normalised state to [-1, 1] before binning (default False: StarVLA's
    np.digitize, which writes -1 below -1).
    binary_dims: the action dims binarised at 0.5 (default: where the mask is False).
    n_images: image slots in the prompt (default: len(datasets.vla_data.obs), else 1).
    resize_mode: "torch" (B1) or "pil". preprocessor_config: a Qwen3-VL
    preprocessor_config.json (else one in the run directory, else Qwen3-VL's defaults)."""
    _, dirs = run_dirs(path)
    if action_norm not in ACTION_NORMS:
        raise PolicyIOError(f"action_norm must be one of {ACTION_NORMS}, got {action_norm!r}")
    if resize_mode not in RESIZE_MODES:
        raise PolicyIOError(f"resize_mode must be one of {RESIZE_MODES}, got {resize_mode!r}")
    modes = state_modes if isinstance(state_modes, str) else tuple(state_modes)
    for m in ((modes,) if isinstance(modes, str) else modes):
        if m not in STATE_MODES:
            raise PolicyIOError(f"state mode {m!r} is not one of {STATE_MODES}")

    stats_file = _stats_file(stats_path, dirs)
    stats = read_json(stats_file)
    keys = action_keys(stats)
    if not keys:
        raise PolicyIOError(f"{stats_file} has no key with 'action' statistics (top-level keys: "
                            f"{sorted(stats)}); expected {EXPECTED_STATS}")
    if unnorm_key is None:
        if len(keys) != 1:
            raise PolicyIOError(f"{stats_file} holds several keys {keys}: pass unnorm_key= "
                                "(StarVLA's SimplerEnv client: oxe_bridge for WidowX, oxe_rt1 for the Google robot)")
        unnorm_key = keys[0]
    elif unnorm_key not in keys:
        raise PolicyIOError(f"unnorm_key {unnorm_key!r} is not in {stats_file}; it holds {keys}")
    action_stats = parse_action_stats(stats[unnorm_key], f"{stats_file}: {unnorm_key!r}", action_norm)
    d = action_stats.dim
    bdims = _dims(binary_dims, d, "binary_dims") if binary_dims is not None \
        else tuple(int(i) for i in np.flatnonzero(~action_stats.mask))
    ddims = _dims(delta_dims, d, "delta_dims")

    config_file = find_run_file([stats_file.parent, *dirs], CONFIG_FILES)
    config = read_run_config(config_file) if config_file is not None else {}
    horizon, n_images, cot, size = _run_settings(config, config_file, stats_file, unnorm_key, d, n_images)
    settings, source = _image_settings(preprocessor_config, [stats_file.parent, *dirs], resize_mode)
    return StarVLAPolicyIO(run_dir=stats_file.parent, stats_file=stats_file, stats=stats, unnorm_key=unnorm_key,
                           action_stats=action_stats, config=config, config_file=config_file,
                           action_norm=action_norm, state_modes=modes, clip_state=bool(clip_state),
                           clip_actions=bool(clip_actions), binary_dims=bdims, delta_dims=ddims,
                           horizon=horizon, n_images=n_images, cot_prompt=cot if isinstance(cot, str) else None,
                           train_image_size=size, image_settings=settings, image_settings_source=source)
