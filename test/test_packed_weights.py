"""The packed (and oneDNN-blocked) projection layout computes what the plain layers do,
and stays correct when weights change after packing."""
import copy

import pytest
import torch
from torch import nn

from oxygen_ros.engine.layers import Packed


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
