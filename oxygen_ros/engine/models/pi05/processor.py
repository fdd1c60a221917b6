"""PolicyIO: one checkpoint's rules from robot observation to model input and back to actions."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...observation.observation import Observation
from ...policy_io import checkpoint as ckpt
from ...policy_io.deltas import to_absolute, to_delta
from ...policy_io.errors import PolicyIOError
from .image_processing import camera_pixels
from ...policy_io.normalize import OPENPI_EPS, normalize, unnormalize
from .prompt import MAX_PROMPT_TOKENS, discretize, encode_prompt, state_prompt, stateless_prompt
from ...policy_io.stats import LEROBOT_EPS, FoundStats, read_lerobot, read_openpi, read_stats_file

log = logging.getLogger(__name__)

CONVENTIONS = ("openpi", "lerobot")
REQUIRED_STATS = {"quantile": ("q01", "q99"), "mean_std": ("mean", "std"), "none": ()}
REMEDY = ("Remedies: put the statistics in place (openpi: assets/<asset_id>/norm_stats.json; "
          "LeRobot: the .safetensors files that the normalizer_processor/unnormalizer_processor "
          "steps of policy_preprocessor.json/policy_postprocessor.json name as state_file), or pass "
          "normalization='none' if the robot's state and actions are already in model space.")


def _vector(state, what: str = "state") -> np.ndarray:
    x = np.asarray(state)
    if x.ndim != 1 or x.size == 0 or x.dtype.kind not in "iuf":
        raise PolicyIOError(f"{what} must be a non-empty 1-D numeric vector, got "
                            f"{getattr(x, 'dtype', '')} shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise PolicyIOError(f"{what} contains NaN or inf: {x.tolist()}")
    return x


def _width(stats: dict[str, np.ndarray], mode: str) -> int | None:
    names = REQUIRED_STATS[mode] or tuple(stats)
    return len(stats[names[0]]) if names and names[0] in stats else None


@dataclass
class PolicyIO:
    """Observation -> (pixels, mask, prompt) and model chunk -> robot actions, per convention.

    `actions()` returns float64 [H, action_dims]; the arithmetic before that cast is done in
    the convention's own precision (openpi: numpy with float64 statistics; LeRobot: the
    chunk's dtype with float32 statistics), so the values match the reference pipelines.
    """
    convention: str
    normalization: str
    horizon: int
    denoise_steps: int
    action_dims: int
    state_in_prompt: bool
    image_size: int
    checkpoint_dir: Path
    asset_id: str | None = None
    stats_files: list[Path] = field(default_factory=list)
    state_stats: dict[str, np.ndarray] = field(default_factory=dict)
    action_stats: dict[str, np.ndarray] = field(default_factory=dict)
    eps: dict[str, float] = field(default_factory=dict)          # LeRobot's per-step eps
    delta_action_mask: tuple[bool, ...] | None = None
    n_action_steps: int | None = None                            # LeRobot's config, if it says
    tokenizer: Any = None                                        # anything with encode(text)
    max_prompt_tokens: int = MAX_PROMPT_TOKENS
    prompt_cuts: int = 0                                         # prompts cut to max_prompt_tokens
    action_rate_hz: float | None = None                          # the data's rate, where a file says it
    action_rate_source: str = ""                                 # that file and key

    def images(self, images: dict[str, np.ndarray | None]) -> tuple[torch.Tensor, list[bool]]:
        return camera_pixels(images, self.convention, self.image_size)

    def normalized_state(self, state) -> np.ndarray:
        x = _vector(state)
        width = _width(self.state_stats, self.normalization)
        if self.normalization != "none" and width < x.shape[0]:
            raise PolicyIOError(f"state has {x.shape[0]} dims but the statistics only {width}")
        return normalize(x, self.state_stats, self.normalization, self.convention,
                         self.eps.get("state", LEROBOT_EPS))

    def _bins(self, task, state) -> list[int] | None:
        if not isinstance(task, str):
            raise PolicyIOError(f"task must be a string, got {type(task).__name__}")
        return discretize(self.normalized_state(state)) if self.state_in_prompt else None

    def prompt(self, task: str, state=None) -> str:
        """The prefix text; `state` may be None when the prompt carries no state."""
        bins = self._bins(task, state)
        return stateless_prompt(task) if bins is None else state_prompt(task, bins)

    def prompt_tokens(self, task: str, state=None, tokenizer=None) -> list[int]:
        """Token ids with BOS, cut to the first max_prompt_tokens (a warning, not an error)."""
        tokenizer = tokenizer or self.tokenizer
        if tokenizer is None:
            raise PolicyIOError("no tokenizer: pass one or set PolicyIO.tokenizer")
        ids = encode_prompt(tokenizer, task, self._bins(task, state))
        if len(ids) > self.max_prompt_tokens:
            # as both conventions do: keep the first tokens. Warned the first time and every
            # 1000th, since a control loop cuts the same prompt every frame.
            self.prompt_cuts += 1
            if self.prompt_cuts == 1 or self.prompt_cuts % 1000 == 0:
                log.warning("prompt is %d tokens, longer than %d: keeping the first %d (the task text "
                            "or state may be cut; %d prompts cut so far)", len(ids), self.max_prompt_tokens,
                            self.max_prompt_tokens, self.prompt_cuts)
            ids = ids[: self.max_prompt_tokens]
        return ids

    def observation(self, images: dict, state, task: str, stamp: float = 0.0) -> Observation:
        """The engine's input for one frame: pixels and prompt ids made by this checkpoint's rules."""
        pixels, _ = self.images(images)
        return Observation(images={}, state=np.asarray(state, np.float64), instruction=task, stamp=stamp,
                           pixels=pixels, prompt_ids=self.prompt_tokens(task, state))

    def actions(self, chunk, state=None) -> np.ndarray:
        """Model chunk [H, >= action_dims] (normalized) -> robot actions [H, action_dims], float64."""
        if isinstance(chunk, torch.Tensor):
            chunk = chunk.detach().cpu()
            chunk = (chunk if chunk.dtype in (torch.float32, torch.float64) else chunk.float()).numpy()
        y = np.asarray(chunk)
        if y.ndim != 2 or y.shape[1] < self.action_dims or y.dtype.kind != "f":
            raise PolicyIOError(f"action chunk must be a float [H, >= {self.action_dims}] array, got "
                                f"{y.dtype} shape {y.shape}")
        mode, eps = self.normalization, self.eps.get("actions", LEROBOT_EPS)
        if self.convention == "openpi":   # unnormalize the statistics' dims, then cut
            width = _width(self.action_stats, mode)
            if mode != "none" and width > y.shape[1]:
                raise PolicyIOError(f"action statistics have {width} dims, the chunk only {y.shape[1]}")
            out = unnormalize(y, self.action_stats, mode, "openpi", eps)[:, : self.action_dims]
        else:                             # cut, then unnormalize
            stats = {k: v[: self.action_dims] for k, v in self.action_stats.items()}
            out = unnormalize(y[:, : self.action_dims], stats, mode, "lerobot", eps)
        if self.delta_action_mask:
            out = to_absolute(out, self._delta_state(state), self.delta_action_mask)
        return np.asarray(out, dtype=np.float64)

    def _delta_state(self, state) -> np.ndarray:
        """The raw state delta actions are relative to, checked against the mask."""
        raw = _vector(state)
        if raw.shape[0] < len(self.delta_action_mask):
            raise PolicyIOError(f"delta_action_mask covers {len(self.delta_action_mask)} dims "
                                f"but the state has {raw.shape[0]}")
        return raw

    def model_actions(self, robot_actions, state=None) -> np.ndarray:
        """The inverse of actions() on the first action_dims dims: robot actions
        [n, >= action_dims] -> model space [n, action_dims], float64 (e.g. the previous chunk
        as RTC's target). Delta dims are taken relative to `state`, the NEW observation's
        raw state, so a remainder planned from an older state is re-anchored; then the
        convention's normalize() with the action statistics (the training targets' formula;
        LeRobot's mean_std divides by std + eps there, its actions() multiplies by std alone,
        so a round trip differs by that eps, ~1e-8 relative)."""
        x = np.asarray(robot_actions)
        if x.ndim != 2 or x.shape[1] < self.action_dims or x.dtype.kind not in "iuf" \
                or not np.all(np.isfinite(x)):
            raise PolicyIOError(f"robot actions must be a finite [n, >= {self.action_dims}] array, got "
                                f"{x.dtype} shape {x.shape}")
        x = np.array(x[:, : self.action_dims], np.float64)
        if self.delta_action_mask:
            x = to_delta(x, self._delta_state(state), self.delta_action_mask)
        mode, eps = self.normalization, self.eps.get("actions", LEROBOT_EPS)
        width = _width(self.action_stats, mode)
        if mode == "none" or width >= self.action_dims:
            return normalize(x, self.action_stats, mode, self.convention, eps)
        # openpi only: dims past its statistics, as actions() passes them (quantile: as is,
        # mean_std: padded mean 0, std 1, i.e. times 1 + 1e-6)
        head = normalize(x[:, :width], self.action_stats, mode, "openpi", eps)
        tail = x[:, width:] if mode == "quantile" else x[:, width:] / (1.0 + OPENPI_EPS)
        return np.concatenate([head, tail], axis=1)

    def summary(self) -> dict:
        return {"checkpoint_dir": str(self.checkpoint_dir), "convention": self.convention,
                "normalization": self.normalization, "asset_id": self.asset_id,
                "horizon": self.horizon, "n_action_steps": self.n_action_steps,
                "denoise_steps": self.denoise_steps, "action_dims": self.action_dims,
                "delta_action_mask": list(self.delta_action_mask or []),
                "state_in_prompt": self.state_in_prompt, "image_size": self.image_size,
                "action_rate_hz": self.action_rate_hz or "not in the checkpoint (set action_rate_hz)",
                "stats_files": [str(p) for p in self.stats_files],
                "state_stats_dims": _width(self.state_stats, self.normalization)}

    def describe(self) -> str:
        return "\n".join(f"{key}: {value}" for key, value in self.summary().items())


def _require(found: FoundStats, mode: str, convention: str, action_dims: int) -> None:
    have = [f"{part}.{s}" for part in ("state", "actions") for s in getattr(found, part)]
    missing = [f"{part}.{s}" for part in ("state", "actions") for s in REQUIRED_STATS[mode]
               if s not in getattr(found, part)]
    if missing:
        other = "mean_std" if mode == "quantile" else "quantile"
        usable = all(s in getattr(found, p) for p in ("state", "actions") for s in REQUIRED_STATS[other])
        raise PolicyIOError(
            f"{mode} normalization needs {', '.join(missing)}, which the checkpoint does not provide"
            f" (found: {', '.join(have) or 'no statistics'}). "
            + (f"{found.problem}. " if found.problem else "")
            + (f"Its statistics suit normalization='{other}'. " if usable else "")
            + f"Looked for: {'; '.join(found.looked_for)}. {REMEDY}")
    for part in ("state", "actions"):
        lengths = {s: len(getattr(found, part)[s]) for s in REQUIRED_STATS[mode]}
        if len(set(lengths.values())) > 1:
            raise PolicyIOError(f"{part} statistics disagree on their width: {lengths} "
                                f"(in {', '.join(map(str, found.files))})")
    width = _width(found.actions, mode)
    if convention == "lerobot" and width < action_dims:
        raise PolicyIOError(f"action statistics have {width} dims, fewer than action_dims={action_dims}")
    if width < action_dims:   # openpi passes the dims past its statistics through unchanged
        log.warning("action dims %d..%d have no statistics: they stay in model space (as in openpi)",
                    width, action_dims - 1)


def load_policy_io(checkpoint_dir: str | os.PathLike, convention: str = "auto", *,
                   asset_id: str | None = None, normalization: str | None = None,
                   action_dims: int | None = None, state_in_prompt: bool | None = None,
                   delta_action_mask: list[bool] | None = None, image_size: int = 224,
                   stats_path: str | os.PathLike | None = None) -> PolicyIO:
    """Read a checkpoint directory's own files into its PolicyIO; every default comes from them.

    stats_path: a statistics file used instead of the checkpoint's (see stats.read_stats_file),
    e.g. for LeRobot base checkpoints, which ship none."""
    root = ckpt.checkpoint_root(checkpoint_dir)
    if convention == "auto":
        convention = ckpt.detect_convention(root)
    if convention not in CONVENTIONS:
        raise PolicyIOError(f"convention must be 'auto', 'openpi' or 'lerobot', got {convention!r}")
    if normalization is not None and normalization not in REQUIRED_STATS:
        raise PolicyIOError(f"normalization must be one of {list(REQUIRED_STATS)}, got {normalization!r}")
    if not isinstance(image_size, int) or image_size < 1:
        raise PolicyIOError(f"image_size must be a positive int, got {image_size!r}")
    config = ckpt.read_json(root / ckpt.CONFIG_FILE)
    found = read_openpi(root, asset_id, config) if convention == "openpi" else read_lerobot(root, config)
    if stats_path:
        found = read_stats_file(stats_path, found)
    if normalization is None:
        if found.mode_problem:
            raise PolicyIOError(f"{found.mode_problem}; pass normalization= to choose one")
        normalization = found.mode or "quantile"
    if action_dims is None:
        action_dims = (ckpt.lerobot_action_dims(config) if convention == "lerobot"
                       else _width(found.actions, normalization)) or ckpt.MODEL_ACTION_DIMS
    if not isinstance(action_dims, int) or action_dims < 1:
        raise PolicyIOError(f"action_dims must be a positive int, got {action_dims!r}")
    if normalization != "none":
        _require(found, normalization, convention, action_dims)
    if delta_action_mask is not None:
        if not all(isinstance(b, (bool, np.bool_)) for b in delta_action_mask) \
                or len(delta_action_mask) > action_dims:
            raise PolicyIOError(f"delta_action_mask must be at most {action_dims} bools, "
                                f"got {delta_action_mask!r}")
        delta_action_mask = tuple(bool(b) for b in delta_action_mask) if any(delta_action_mask) else None
    if state_in_prompt is None:   # openpi's pi05_libero: Pi0Config(discrete_state_input=False)
        discrete = ckpt.lookup(config, "discrete_state_input", "model.discrete_state_input")
        state_in_prompt = not (convention == "openpi" and discrete is False)
    horizon, steps = ckpt.horizon_and_steps(config)
    n_action_steps = config.get("n_action_steps") if convention == "lerobot" else None
    rate, rate_source = ckpt.action_rate_hz(root)
    return PolicyIO(
        convention=convention, normalization=normalization, horizon=horizon, denoise_steps=steps,
        action_dims=action_dims, state_in_prompt=bool(state_in_prompt), image_size=image_size,
        checkpoint_dir=root, asset_id=found.asset_id,
        stats_files=found.files if normalization != "none" else [],
        state_stats=found.state if normalization != "none" else {},
        action_stats=found.actions if normalization != "none" else {},
        eps=found.eps, delta_action_mask=delta_action_mask,
        n_action_steps=n_action_steps if isinstance(n_action_steps, int) else None,
        action_rate_hz=rate, action_rate_source=rate_source)
