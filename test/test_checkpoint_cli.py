"""`oxygen checkpoint DIR` reports what the node would read, without loading the weights,
and exits non-zero naming what is missing."""
import dataclasses
import json

import pytest

from oxygen_ros.cli import main
from pi05_fixtures import lerobot_ckpt, model_checkpoint, toy_config, train_tokenizer

spm = pytest.importorskip("sentencepiece")

STATE_Q = {"q01": [-1.0, -2.0, 0.0], "q99": [1.0, 2.0, 0.08]}
ACTION_Q = {"q01": [-1.0, -2.0], "q99": [1.0, 2.0]}
CONFIG = {"type": "pi05", "chunk_size": 7, "n_action_steps": 7, "num_inference_steps": 4,
          "output_features": {"action": {"type": "ACTION", "shape": [2]}}}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from safetensors.torch import save_file

    from oxygen_ros.engine.models.pi05.modeling import build_random_model
    from oxygen_ros.engine.models.pi05.tokenizer import SentencePieceTokenizer

    root = tmp_path_factory.mktemp("ckpt")
    cfg = toy_config(SentencePieceTokenizer(train_tokenizer(root)))
    tensors = model_checkpoint(build_random_model(cfg, seed=1), "lerobot")
    dirs = {}
    for name, stats in (("good", True), ("bare", False)):
        d = lerobot_ckpt(root / name, state=STATE_Q if stats else None,
                         actions=ACTION_Q if stats else None, config=CONFIG)
        save_file(tensors, str(d / "model.safetensors"))
        dirs[name] = d
    return cfg, dirs


@pytest.fixture
def toy_profile(toy, monkeypatch):
    """The pi05 profile at the toy widths (the 3B profile's widths cannot be written here)."""
    from oxygen_ros.engine.models.pi05 import configuration as config

    monkeypatch.setitem(config.PROFILES, "pi05", dataclasses.replace(toy[0], name="pi05"))


def test_reports_layout_dims_horizon_statistics_and_prompt(toy, toy_profile, capsys):
    d = toy[1]["good"]
    assert main(["checkpoint", str(d), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    w, io = r["weights"], r["policy_io"]
    assert (w["layout"], w["model_action_dim"], w["horizon"], w["denoise_steps"]) == ("lerobot", 6, 7, 4)
    assert w["layers"] == {"vision": 2, "backbone": 2, "expert": 2} and w["problems"] == []
    assert (io["convention"], io["normalization"], io["action_dims"]) == ("lerobot", "quantile", 2)
    assert io["stats_files"] == [str(d / "policy_preprocessor_step_2_normalizer_processor.safetensors"),
                                 str(d / "policy_postprocessor_step_0_unnormalizer_processor.safetensors")]
    assert io["state_stats_dims"] == 3 and io["prompt_format"].startswith("Task: {task}, State:")
    assert r["ok"] is True


def test_missing_statistics_exit_1_with_the_files_looked_for(toy, toy_profile, capsys):
    assert main(["checkpoint", str(toy[1]["bare"])]) == 1
    err = capsys.readouterr().err
    assert "policy_preprocessor.json" in err and "normalization='none'" in err
    assert main(["checkpoint", str(toy[1]["bare"]), "--normalization", "none"]) == 0


def test_weights_that_do_not_fit_the_profile_are_named(toy, capsys):
    assert main(["checkpoint", str(toy[1]["good"])]) == 1       # the real 3B pi05 profile
    assert "shape" in capsys.readouterr().err
