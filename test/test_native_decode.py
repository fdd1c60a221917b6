"""The decode step's layers as one native call (engine/native/decode.cpp): bitwise the
eager loop's hidden states and K/V, for Llama- and Gemma-style decoders, and the loop
where the call does not apply."""
import copy

import pytest
import torch

from engine_fixtures import tiny
from oxygen_ros.engine import native
from oxygen_ros.engine.layers.decoder import Decoder

needs_native = pytest.mark.skipif(not native.available(), reason="no native build (no C++ compiler)")


def llama_style(model):
    """The tiny model's backbone as SmolLM2's kind of layers: Llama norms (scale by w), SiLU."""
    other = copy.deepcopy(model)
    for layer in other.backbone.layers:
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.offset = 0.0
            with torch.no_grad():
                norm.weight.add_(1.0)
        layer.mlp.act, layer.mlp.act_name = torch.nn.functional.silu, "silu"
    return other


def decode_both_ways(model, monkeypatch, rows: int = 3):
    """(hidden, pool.k, pool.v) from the native call and from the eager loop, same inputs."""
    results = []
    for use_native in (True, False):
        if not use_native:
            monkeypatch.setattr(Decoder, "_decode_native", lambda self, *a: None)
        pool = model.new_pool(rows + 1, 48)
        gen = torch.Generator().manual_seed(3)
        pool.k.copy_(torch.randn(pool.k.shape, generator=gen))
        pool.v.copy_(torch.randn(pool.v.shape, generator=gen))
        ids = torch.randint(0, 100, (rows,), generator=gen)
        lengths = torch.randint(5, 40, (rows,), generator=gen)
        with torch.inference_mode():
            hidden = model.decode_hidden(ids, pool, lengths, int(lengths.max()) + 1, slice(0, rows))
        results.append((hidden, pool.k.clone(), pool.v.clone()))
    monkeypatch.undo()
    return results


@needs_native
@pytest.mark.parametrize("style", ["gemma", "llama"])
def test_native_decode_equals_the_eager_loop_bitwise(style, monkeypatch):
    model, _ = tiny()
    if style == "llama":
        model = llama_style(model)
    calls = []
    native_call = torch.ops.oxygen_native.decode_layers
    monkeypatch.setattr(torch.ops.oxygen_native, "decode_layers", lambda *a: calls.append(1) or native_call(*a),
                        raising=False)
    (h_native, k_native, v_native), (h_eager, k_eager, v_eager) = decode_both_ways(model, monkeypatch)
    assert calls == [1]              # the native call ran (once, for every layer)
    assert torch.equal(h_native, h_eager)
    assert torch.equal(k_native, k_eager) and torch.equal(v_native, v_eager)


@needs_native
def test_the_loop_runs_where_the_native_call_does_not_apply(monkeypatch):
    model = copy.deepcopy(tiny()[0])          # (its activation is changed below)
    calls = []
    monkeypatch.setattr(torch.ops.oxygen_native, "decode_layers", lambda *a: calls.append(1), raising=False)
    pool = model.new_pool(40, 48)
    with torch.inference_mode():
        model.decode_hidden(torch.zeros(33, dtype=torch.long), pool, torch.full((33,), 4), 5, slice(0, 33))  # > 32 rows
        model.decode_hidden(torch.zeros(2, dtype=torch.long), pool, torch.full((2,), 4), 5,
                            torch.tensor([7, 3]))                                                  # gathered slots
        model.backbone.layers[0].mlp.act_name = "gelu"                                             # another activation
        model.decode_hidden(torch.zeros(2, dtype=torch.long), pool, torch.full((2,), 4), 5, slice(0, 2))
    assert calls == []
