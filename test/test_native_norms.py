"""The native one-pass RMSNorm (engine/native/norms.cpp) and gated activation
(activations.cpp): ATen's values, row by row independent of the batch, and the paths
CPU inference takes where they are built."""
import pytest
import torch
import torch.nn.functional as F

from oxygen_ros.engine import native
from oxygen_ros.engine.layers.blocks import RMSNorm, ada_rms_normalize, rms_normalize

needs_native = pytest.mark.skipif(not native.available(), reason="no native build (no C++ compiler)")


@needs_native
@pytest.mark.parametrize("rows,d", [(1, 64), (30, 576), (176, 960), (3, 7)])
def test_rms_norm_equals_aten(rows, d):
    gen = torch.Generator().manual_seed(rows * d)
    x = torch.randn(rows, d, generator=gen) * 3
    scale, shift = torch.randn(d, generator=gen), torch.randn(d, generator=gen)
    want = F.rms_norm(x, (d,), None, 1e-6)
    torch.testing.assert_close(torch.ops.oxygen_native.rms_norm(x, None, None, 1e-6), want, rtol=2e-6, atol=2e-6)
    torch.testing.assert_close(torch.ops.oxygen_native.rms_norm(x, scale, None, 1e-6), want * scale,
                               rtol=2e-6, atol=1e-5)
    torch.testing.assert_close(torch.ops.oxygen_native.rms_norm(x, scale, shift, 1e-6), want * scale + shift,
                               rtol=2e-6, atol=1e-5)


@needs_native
def test_per_row_terms_and_batch_independence():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 96, generator=gen)
    scale, shift = torch.randn(2, 5, 96, generator=gen), torch.randn(1, 1, 96, generator=gen)
    out = torch.ops.oxygen_native.rms_norm(x, scale, shift, 1e-6)
    torch.testing.assert_close(out, F.rms_norm(x, (96,), None, 1e-6) * scale + shift, rtol=2e-6, atol=1e-5)
    for b in range(2):
        for t in range(5):
            alone = torch.ops.oxygen_native.rms_norm(x[b, t][None], scale[b, t][None], shift[0], 1e-6)
            assert torch.equal(alone[0], out[b, t])


@needs_native
def test_inference_norms_run_natively_and_autograd_keeps_aten(monkeypatch):
    calls = []
    kernel = torch.ops.oxygen_native.rms_norm
    monkeypatch.setattr(torch.ops.oxygen_native, "rms_norm", lambda *a: calls.append(1) or kernel(*a), raising=False)
    norm = RMSNorm(32, 1e-6, "gemma")
    x = torch.randn(4, 32)
    with torch.inference_mode():
        norm(x)
        ada_rms_normalize(x, torch.ones(32), torch.zeros(32), 1e-6)
    assert len(calls) == 2
    leaf = x.clone().requires_grad_()
    rms_normalize(leaf, torch.ones(32), None, 1e-6).sum().backward()    # ATen's, with a gradient
    assert len(calls) == 2 and leaf.grad is not None


@needs_native
@pytest.mark.parametrize("act", ["gelu_tanh", "silu"])
def test_gated_activation_equals_aten(act):
    gen = torch.Generator().manual_seed(7)
    gate_up = torch.randn(3, 10, 2 * 1536, generator=gen) * 4
    gate_up[0, 0, :8] = torch.tensor([0.0, 1e-6, -1e-6, 30.0, -30.0, 100.0, -100.0, 1e-3])
    gate, up = gate_up.double().chunk(2, dim=-1)     # the exact values, to float32's precision
    want = ((F.gelu(gate, approximate="tanh") if act == "gelu_tanh" else F.silu(gate)) * up).float()
    out = torch.ops.oxygen_native.gated_activation(gate_up, act)
    torch.testing.assert_close(out, want, rtol=2e-6, atol=1e-12)
    alone = torch.ops.oxygen_native.gated_activation(gate_up[1, 4], act)
    assert torch.equal(alone, out[1, 4])


@needs_native
def test_the_gated_mlp_runs_the_native_activation_in_inference(monkeypatch):
    from oxygen_ros.engine.layers.blocks import GatedMLP

    calls = []
    kernel = torch.ops.oxygen_native.gated_activation
    monkeypatch.setattr(torch.ops.oxygen_native, "gated_activation",
                        lambda *a: calls.append(a[1]) or kernel(*a), raising=False)
    mlp = GatedMLP(16, 40, "silu")
    x = torch.randn(3, 16)
    with torch.inference_mode():
        native_out = mlp(x)
    assert calls == ["silu"]
    eager = mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))      # with autograd: ATen's
    torch.testing.assert_close(native_out, eager, rtol=1e-5, atol=1e-6)
    assert calls == ["silu"]
