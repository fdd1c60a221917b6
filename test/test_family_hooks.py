"""The families' policy I/O and weights hooks through engine/registry.py (issue 43): the
factory asks the registry, which family builds a convention, and that family's hooks; the
rules are the ones the factory used to spell out by profile name."""
from __future__ import annotations

import sys

import pytest

from oxygen_ros.engine import factory, registry


def _old_choice(p: dict) -> str:
    """engine/factory.choose_policy_io before the families exported their own (its "auto")."""
    if p["policy_io"] != "auto":
        return p["policy_io"]
    if p["model"] == "xr0" and p["checkpoint"]:
        return "xr0"
    if p["model"] == "starvla-pi" and p["checkpoint"]:
        return "starvla"
    return "checkpoint" if p["model"] in ("pi05", "pi05-quarter") and p["checkpoint"] else "limits"


@pytest.mark.parametrize("profile", registry.profile_names() + ["nope"])
def test_choose_policy_io_is_what_it_was_for_every_profile(profile):
    assert factory.policy_io_values() == ("auto", "limits", "openpi", "lerobot", "xr0", "starvla")
    for checkpoint in ("", "/some/dir"):
        for value in factory.policy_io_values():
            p = {"model": profile, "checkpoint": checkpoint, "policy_io": value}
            assert factory.choose_policy_io(p) == _old_choice(p), p
    with pytest.raises(ValueError, match="policy_io must be one of auto, limits, openpi, lerobot, xr0, starvla"):
        factory.choose_policy_io({"model": profile, "checkpoint": "", "policy_io": "jax"})


def test_each_convention_is_built_by_one_family():
    assert registry.policy_io_family("limits") is None
    built_by = {c: registry.policy_io_family(c).name for c in ("checkpoint", "openpi", "lerobot", "xr0", "starvla")}
    assert built_by == {"checkpoint": "pi05", "openpi": "pi05", "lerobot": "pi05", "xr0": "xr0", "starvla": "starvla"}


def test_a_fleet_refuses_xr0_before_loading_anything():
    robots = {"a": {"model": "tiny", "checkpoint": "", "policy_io": "limits"},
              "b": {"model": "xr0", "checkpoint": "/nowhere", "policy_io": "auto"}}
    with pytest.raises(ValueError, match=r"fleet mode does not serve policy_io xr0 yet \(each robot type fixes "
                                         r"the shared model's chunk horizon\): run one node per XR-0 robot"):
        factory.build_engine({}, robots)


def test_serve_asks_the_profiles_family_only_where_its_checkpoint_brings_a_policy_io(monkeypatch):
    calls = []
    pi05 = registry.family("pi05")
    monkeypatch.setattr(pi05, "serve_policy_io", lambda *a: calls.append(a) or "io")
    assert factory.checkpoint_policy_io("pi05-quarter", "/ckpt", "model", "tok") == "io"
    assert calls == [("pi05-quarter", "/ckpt", "model", "tok")]
    for profile, checkpoint in (("pi05", None), ("tiny", "/ckpt"), ("smol", "/ckpt"), ("xr0-cpu", "/ckpt")):
        assert factory.checkpoint_policy_io(profile, checkpoint, "model", "tok") is None
    assert registry.family("xr0").serve_policy_io("xr0", "/ckpt", None, None) is None
    assert registry.family("starvla").serve_policy_io("starvla-pi", "/ckpt", None, None) is None
    assert len(calls) == 1


def test_prepare_weights_is_the_smol_familys_alone(monkeypatch):
    smollm2 = registry.family("smollm2")
    converted = []

    class Cached:
        weights, converted = "/cache/smol.safetensors", True

    monkeypatch.setattr(smollm2, "ensure_cached", lambda path, progress: converted.append((path, progress)) or Cached)
    said = []
    for profile, checkpoint in (("tiny", None), ("xr0-cpu", None), ("smol", "/x/model.safetensors")):
        registry.prepare_weights(profile, checkpoint, said.append)
    assert said == [] and converted == []
    registry.prepare_weights("smol", None, said.append)
    registry.prepare_weights("smol", "/x/other.gguf", said.append)
    assert converted == [(None, sys.stdout), ("/x/other.gguf", sys.stdout)]
    assert said[0].startswith("checking the SmolLM2 weights cache")
    assert said[1] == "weights: /cache/smol.safetensors (converted now)"


def test_a_family_that_ships_weights_gives_its_folder_as_the_default_checkpoint():
    """smol-panda's empty checkpoint means the weights in its package folder (wherever it is
    installed), for the model and for its policy I/O alike; a given checkpoint wins; profiles
    without shipped weights keep their empty checkpoint."""
    from oxygen_ros.engine.models.smol_panda import SHIPPED_DIR

    assert registry.default_checkpoint("smol-panda") == str(SHIPPED_DIR)
    p = {"model": "smol-panda", "checkpoint": "", "policy_io": "openpi"}
    assert factory.with_checkpoint(p)["checkpoint"] == str(SHIPPED_DIR) and p["checkpoint"] == ""
    assert factory.with_checkpoint({**p, "checkpoint": "/mine"})["checkpoint"] == "/mine"
    for profile in ("tiny", "smol", "pi05", "xr0", "nonexistent"):
        assert registry.default_checkpoint(profile) == ""
        assert factory.with_checkpoint({"model": profile, "checkpoint": ""})["checkpoint"] == ""
