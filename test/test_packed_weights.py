"""The packed (and oneDNN-blocked) projection layout computes what the plain layers do,
and stays correct when weights change after packing."""
import copy

import torch
from torch import nn

from oxygen_ros.engine.layers import Packed


def _layers(seed=0):
    torch.manual_seed(seed)
    return nn.Linear(16, 8, bias=False), nn.Linear(16, 4, bias=False)


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
