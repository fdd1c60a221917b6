"""The packed (and oneDNN-blocked) projection layout computes what the plain layers do,
and stays correct when weights change after packing."""
import copy

import pytest
import torch
from torch import nn

from oxygen_ros.engine.layers.blocks import Packed, packed_groups


def _layers(seed=0, width=16):
    torch.manual_seed(seed)
    return nn.Linear(width, 8, bias=False), nn.Linear(width, 4, bias=False)


def test_packed_output_equals_the_layers_and_params_are_views():
    a, b = _layers()
    x = torch.randn(3, 16)
    ref = [a(x), b(x)]
    packed = Packed(a, b)
    packed.pack()
    assert a.weight.data_ptr() == packed.matrix.data_ptr()      # no second dense copy
    for got, want in zip(packed.apply(x), ref):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_in_place_load_after_packing_is_seen():
    a, b = _layers()
    packed = Packed(a, b)
    packed.pack()
    with torch.no_grad():
        a.weight.copy_(torch.ones_like(a.weight))             # e.g. a loader copying weights
    x = torch.randn(2, 16)
    torch.testing.assert_close(packed.apply(x)[0], x.sum(-1, keepdim=True).expand(2, 8),
                               rtol=1e-5, atol=1e-5)


def test_replaced_weights_fall_back_to_the_layers():
    a, b = _layers()
    packed = Packed(a, b)
    packed.pack()
    b.weight = nn.Parameter(torch.zeros(4, 16))                # e.g. a dtype/device change
    assert torch.equal(packed.apply(torch.randn(2, 16))[1], torch.zeros(2, 4))


def test_deep_copy_packs_its_own_layers():
    a, b = _layers()
    packed = Packed(a, b)
    packed.pack()
    twin = copy.deepcopy(packed)
    assert twin.matrix.data_ptr() != packed.matrix.data_ptr()
    assert twin.linears[0].weight.data_ptr() == twin.matrix.data_ptr()
    x = torch.randn(5, 16)
    for got, want in zip(twin.apply(x), packed.apply(x)):
        assert torch.equal(got, want)


def test_large_matrices_use_the_blocked_copy_and_drop_it_when_stale():
    a, b = _layers(width=8192)                 # 12 x 8192: above the oneDNN threshold
    packed = Packed(a, b)
    packed.pack()
    if packed.blocked is None:
        pytest.skip("oneDNN is not available in this torch build")
    x = torch.randn(3, 8192)
    torch.testing.assert_close(packed.apply(x)[0], a(x), rtol=1e-4, atol=1e-3)
    with torch.no_grad():
        b.weight.zero_()
    assert torch.equal(packed.apply(x)[1], torch.zeros(3, 4))
    assert packed.blocked is None


@pytest.mark.parametrize("width", [16, 8192])       # below / above the oneDNN threshold
def test_biased_layers_pack_with_their_biases_and_fuse_gelu(width):
    torch.manual_seed(1)
    a, b = nn.Linear(width, 8), nn.Linear(width, 4)
    x = torch.randn(3, width)
    ref = torch.cat([a(x), b(x)], dim=-1).detach()
    packed = Packed(a, b)
    packed.pack()
    assert a.bias.data_ptr() == packed.bias.data_ptr()              # biases are views too
    torch.testing.assert_close(packed.matmul(x), ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(packed.matmul(x, gelu_tanh=True),
                               torch.nn.functional.gelu(ref, approximate="tanh"), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        b.bias.fill_(100.0)                                          # a loader writing in place
    assert (packed.matmul(x)[:, 8:] > 50).all()


def test_mixed_biases_are_rejected():
    with pytest.raises(ValueError, match="bias"):
        Packed(nn.Linear(4, 2), nn.Linear(4, 2, bias=False))


def _vision_reference(enc, images):
    """SigLIP's forward written directly on the nn.Linear layers (independent of Packed)."""
    f = torch.nn.functional
    x = enc.patch_embedding(images).flatten(2).transpose(1, 2) + enc.position_embedding.weight
    for layer in enc.layers:
        att = layer.self_attn
        y = layer.layer_norm1(x)
        b, t, w = y.shape
        d = w // att.heads
        q, k, v = (p(y).view(b, t, att.heads, d).transpose(1, 2) for p in (att.q_proj, att.k_proj, att.v_proj))
        a = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1) @ v
        x = x + att.out_proj(a.transpose(1, 2).reshape(b, t, w))
        x = x + layer.mlp.fc2(f.gelu(layer.mlp.fc1(layer.layer_norm2(x)), approximate="tanh"))
    return enc.projector(enc.post_layernorm(x))


def test_packed_vision_encoder_matches_a_plain_reference():
    from oxygen_ros.engine.registry import get_config
    from oxygen_ros.engine.layers.random_init import init_random
    from oxygen_ros.engine.models.pi05.vision import VisionEncoder
    cfg = get_config("pi05-quarter").vision            # wide enough for the oneDNN path
    enc = init_random(VisionEncoder(cfg, 64), seed=3).eval()
    images = torch.rand(2, 3, cfg.image_size, cfg.image_size) * 2 - 1
    with torch.inference_mode():
        want = _vision_reference(enc, images)
        torch.testing.assert_close(enc(images), want, rtol=1e-4, atol=1e-4)   # unpacked
        for group in packed_groups(enc):
            group.pack()
        assert enc.layers[0].self_attn._qkv.blocked is not None or not torch.backends.mkldnn.is_available()
        torch.testing.assert_close(enc(images), want, rtol=1e-4, atol=1e-4)
