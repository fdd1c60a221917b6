"""The native one-pass RMSNorm (engine/native/norms.cpp): ATen's values, row by row
independent of the batch, and the path every CPU inference norm takes where it is built."""
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
