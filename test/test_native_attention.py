"""The native attention (engine/native/attention.cpp): the masked softmax's values, each
row and query independent of the others bitwise, and the decode step's path where it is
built."""
import math

import pytest
import torch

from engine_fixtures import tiny
from oxygen_ros.engine import native
from oxygen_ros.engine.layers.blocks import grouped_attention

needs_native = pytest.mark.skipif(not native.available(), reason="no native build (no C++ compiler)")


def pool_views(rows: int, kv_heads: int, read: int, d: int, seed: int):
    """K/V as the decode step reads them: strided views into a larger pool."""
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(rows + 3, kv_heads, read + 40, d, generator=gen)
    v = torch.randn(rows + 3, kv_heads, read + 40, d, generator=gen)
    return k[1:rows + 1, :, :read], v[1:rows + 1, :, :read], gen


def masked_reference(q, k, v, visible):
    """The eager decode attention: batched matmuls over an additive mask."""
    read = k.shape[2]
    mask = torch.zeros(q.shape[0], 1, 1, read)
    mask.masked_fill_((torch.arange(read)[None, :] >= visible[:, None])[:, None, None], float("-inf"))
    scores = torch.matmul(q / math.sqrt(q.shape[-1]), k.transpose(-1, -2)) + mask
    return torch.matmul(torch.softmax(scores, dim=-1), v)


@needs_native
@pytest.mark.parametrize("group,d", [(3, 64), (8, 256), (1, 128), (2, 40), (12, 64)])
def test_decode_attention_equals_the_masked_softmax(group, d):
    # (2, 40) and (12, 64) take the portable path, the others the vectorised one where it exists
    k, v, gen = pool_views(5, 2, 97, d, seed=group * d)
    q = torch.randn(5, 2, group, d, generator=gen)
    visible = torch.tensor([1, 97, 4, 50, 33])
    out = torch.ops.oxygen_native.attention(q, k, v, visible, 1 / math.sqrt(d))
    torch.testing.assert_close(out, masked_reference(q, k, v, visible), rtol=1e-5, atol=2e-6)


@needs_native
def test_a_row_gets_bitwise_the_same_alone_as_in_a_batch():
    k, v, gen = pool_views(6, 3, 64, 64, seed=1)
    q = torch.randn(6, 3, 3, 64, generator=gen)
    visible = torch.tensor([64, 7, 30, 1, 61, 12])
    batch = torch.ops.oxygen_native.attention(q, k, v, visible, 0.125)
    for r in range(6):
        alone = torch.ops.oxygen_native.attention(q[r:r + 1], k[r:r + 1], v[r:r + 1], visible[r:r + 1], 0.125)
        assert torch.equal(alone[0], batch[r])


@needs_native
@pytest.mark.parametrize("d", [64, 40])
def test_many_queries_over_all_keys_equal_sdpa_and_each_query_stands_alone(d):
    # the action expert's shape: 10 tokens x 3 query heads per KV head over prefix + chunk
    k, v, gen = pool_views(2, 3, 186, d, seed=d)
    q = torch.randn(2, 3, 30, d, generator=gen)
    out = torch.ops.oxygen_native.attention(q, k, v, torch.tensor([186, 186]), 1 / math.sqrt(d))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=2e-6)
    first = torch.ops.oxygen_native.attention(q[:, :, :4], k, v, torch.tensor([186, 186]), 1 / math.sqrt(d))
    assert torch.equal(first, out[:, :, :4])


@needs_native
def test_keys_past_a_rows_count_are_never_read():
    k, v, gen = pool_views(2, 1, 20, 64, seed=2)
    q = torch.randn(2, 1, 3, 64, generator=gen)
    visible = torch.tensor([5, 20])
    before = torch.ops.oxygen_native.attention(q, k, v, visible, 0.125)
    k[0, :, 5:] = float("nan")
    v[0, :, 5:] = float("nan")
    assert torch.equal(torch.ops.oxygen_native.attention(q, k, v, visible, 0.125), before)


@needs_native
@pytest.mark.parametrize("visible", [[0, 3], [3, 21]])
def test_a_count_outside_the_keys_is_refused(visible):
    k, v, gen = pool_views(2, 1, 20, 64, seed=3)
    q = torch.randn(2, 1, 3, 64, generator=gen)
    with pytest.raises(RuntimeError, match="sees"):
        torch.ops.oxygen_native.attention(q, k, v, torch.tensor(visible), 0.125)


@needs_native
def test_grouped_attention_decodes_natively_and_agrees_with_its_mask():
    b, hkv, g, d, read = 4, 2, 3, 64, 33
    k, v, gen = pool_views(b, hkv, read, d, seed=4)
    q = torch.randn(b, hkv * g, 1, d, generator=gen)
    visible = torch.tensor([33, 2, 17, 9])
    mask = torch.zeros(b, 1, 1, read)
    mask.masked_fill_((torch.arange(read)[None, :] >= visible[:, None])[:, None, None], float("-inf"))
    native_out = grouped_attention(q, k, v, mask, visible)
    eager_out = grouped_attention(q, k, v, mask)
    assert not torch.equal(native_out, eager_out)       # a different kernel ran
    torch.testing.assert_close(native_out, eager_out, rtol=1e-5, atol=2e-6)


@needs_native
def test_autograd_keeps_the_masked_softmax():
    k, v, gen = pool_views(2, 1, 12, 64, seed=6)
    q = torch.randn(2, 3, 1, 64, generator=gen).requires_grad_()
    visible = torch.tensor([12, 5])
    mask = torch.zeros(2, 1, 1, 12).masked_fill_((torch.arange(12)[None, :] >= visible[:, None])[:, None, None],
                                                  float("-inf"))
    grouped_attention(q, k, v, mask, visible).sum().backward()      # the matmuls, which have a backward
    assert q.grad is not None and torch.isfinite(q.grad).all()


@needs_native
def test_the_eager_decode_loop_runs_the_native_kernel(monkeypatch):
    from oxygen_ros.engine.layers.decoder import Decoder

    model, _ = tiny()
    monkeypatch.setattr(Decoder, "_decode_native", lambda self, *a: None)    # the loop, not decode.cpp
    calls = []
    kernel = torch.ops.oxygen_native.attention
    monkeypatch.setattr(torch.ops.oxygen_native, "attention",
                        lambda *a: calls.append(a[3].tolist()) or kernel(*a), raising=False)
    pool = model.new_pool(3, 32)
    gen = torch.Generator().manual_seed(5)
    pool.k.copy_(torch.randn(pool.k.shape, generator=gen))
    pool.v.copy_(torch.randn(pool.v.shape, generator=gen))
    with torch.inference_mode():
        model.decode(torch.tensor([5, 9]), pool, torch.tensor([4, 11]), 12)
    assert calls and calls[0] == [5, 12]            # each row sees its keys up to its new token


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_mask_folded_once_gives_bitwise_what_sdpa_gives_with_the_boolean_mask(dtype):
    from oxygen_ros.engine.layers.blocks import grouped_mask

    gen = torch.Generator().manual_seed(8)
    q = torch.randn(2, 6, 7, 32, generator=gen).to(dtype)
    k, v = torch.randn(2, 2, 12, 32, generator=gen).to(dtype), torch.randn(2, 2, 12, 32, generator=gen).to(dtype)
    mask = torch.ones(7, 12, dtype=torch.bool).tril(diagonal=5)[None, None].expand(2, 1, 7, 12)
    folded = grouped_mask(mask, 3, dtype)
    assert folded.shape == (2, 1, 21, 12) and folded.dtype == dtype
    # the reference: each query head's rows under the boolean mask as sdpa takes it
    want = torch.nn.functional.scaled_dot_product_attention(
        q.reshape(2, 2, 21, 32), k, v, attn_mask=mask.repeat(1, 1, 3, 1), scale=32 ** -0.5).reshape(2, 6, 7, 32)
    assert torch.equal(grouped_attention(q, k, v, folded), want)
    assert torch.equal(grouped_attention(q, k, v, mask), want)
