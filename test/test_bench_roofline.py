"""The roofline model's costs and the measured kernel floor behind `oxygen bench --roofline`."""
import json

import pytest
import torch

from engine_fixtures import tiny
from oxygen_ros.cli import main
from oxygen_ros.engine.layers.blocks import Packed
from oxygen_ros.engine.bench.roofline import FrameCosts, KernelFloor, Peaks

PHASES = ("vision", "prefill", "action", "admit", "decode")


def test_decode_step_streams_every_weight_once_plus_the_kv_it_reads():
    model, _ = tiny()
    costs = FrameCosts(model)
    bb = model.backbone
    weights = sum(p.numel() for p in bb.layers.parameters()) + bb.head_weight().numel()
    kv_per_token = 2 * bb.cfg.depth * bb.cfg.num_kv_heads * bb.cfg.head_dim
    one, two = costs.decode_step([100]), costs.decode_step([100, 50])
    assert one.bytes == (weights + 100 * kv_per_token) * 4
    # a second row adds its KV but no weights, and twice the product FLOPs
    assert two.bytes - one.bytes == 50 * kv_per_token * 4
    assert two.flops > 2 * weights * 2 > one.flops
    slow = Peaks(gflops=1.0, gbps=1e6)     # FLOP-bound machine: time = FLOPs / peak
    assert one.seconds(slow) == pytest.approx(one.flops / 1e9)


def test_action_cost_grows_with_denoise_steps_but_reads_modulations_once():
    model, _ = tiny()
    steps = model.cfg.expert.denoise_steps
    try:
        a1 = FrameCosts(model).action(50)
        model.set_action_schedule(denoise_steps=2 * steps)
        a2 = FrameCosts(model).action(50)
    finally:
        model.set_action_schedule(denoise_steps=steps)
    per_step_bytes = (a2.bytes - a1.bytes) / steps
    assert per_step_bytes > 0
    assert a1.bytes == pytest.approx(steps * per_step_bytes + FrameCosts(model).modulation_params * 4)


def test_kernel_floor_times_every_backbone_and_expert_weight():
    model, _ = tiny()
    floor = KernelFloor(model, repeats=1)

    def packed_elements(key):
        return sum(p.numel() for p in floor.products[key] if isinstance(p, Packed))

    norms = lambda layers: sum(p.numel() for n, p in layers.named_parameters() if "norm" in n)
    bb_layers, ex_layers = model.backbone.layers, model.expert.layers
    assert packed_elements("backbone") == sum(p.numel() for p in bb_layers.parameters()) - norms(bb_layers)
    assert packed_elements("expert") == sum(p.numel() for p in ex_layers.parameters()) - norms(ex_layers)
    assert packed_elements("head") == model.backbone.head_weight().numel()
    vision_linears = [m for m in model.vision.modules() if isinstance(m, torch.nn.Linear)]
    assert packed_elements("vision") == sum(m.weight.numel() for m in vision_linears)
    step = floor.decode_step([80, 90, 100])
    assert step > 0 and ("backbone", 3) in floor._cache and ("head", 3) in floor._cache
    assert floor.decode_step([1, 2, 3]) == step        # timed once per row count, then cached


def test_bench_roofline_reports_floor_per_phase(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--model", "tiny", "--workload", "libero", "--frames", "3", "--tokens", "4",
                 "--modes", "sequential,shared,oxygen", "--roofline", "--json", str(out)]) == 0
    roof = json.loads(out.read_text())["roofline"]
    for mode in ("sequential", "shared", "oxygen"):
        m = roof["modes"][mode]
        assert m["frame_floor_ms"] == pytest.approx(sum(m["phases"][p]["floor_ms"] for p in PHASES))
        assert m["floor_ratio"] == pytest.approx(m["frame_floor_ms"] / m["frame_roofline_ms"])
    seq, ox = roof["modes"]["sequential"]["phases"], roof["modes"]["oxygen"]["phases"]
    # isolated execution prefills twice per frame; oxygen once
    assert seq["prefill"]["floor_ms"] == pytest.approx(2 * ox["prefill"]["floor_ms"])
    assert roof["decode_step_batch1"]["floor_ms"] > 0
    assert "kernel floor" in capsys.readouterr().out


def test_kernel_floor_passes_raise_the_peaks_they_beat(monkeypatch):
    from oxygen_ros.engine.bench import roofline
    model, _ = tiny()
    monkeypatch.setattr(roofline, "STREAMING_MIN_BYTES", 0)    # tiny's weights are cache-sized
    floor = KernelFloor(model, repeats=1)
    seconds = floor.prefill(64)
    elements = sum(p.numel() for p in floor.products["backbone"])
    assert floor.best_gflops >= 2 * 64 * elements / seconds / 1e9 * 0.999
    raised = floor.raise_peaks(Peaks(gflops=1e-9, gbps=1e-9))
    assert raised.gflops == floor.best_gflops and raised.gbps == floor.best_gbps > 0
    assert floor.raise_peaks(Peaks(gflops=1e9, gbps=1e9)) == Peaks(1e9, 1e9)
