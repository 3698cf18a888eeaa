"""Data-parallel splitting without Ray: balanced shares, equal micro-batch counts, gather, metrics."""

import torch

from verl.batch import Batch
from verl.distributed import dispatch
from verl.workers.micro_batches import MicroBatching, make_micro_batches


def _batch(lengths, prompt=3, resp=6):
    """Rows with `lengths[i]` response tokens (prompt fully real)."""
    b = len(lengths)
    resp_mask = torch.zeros(b, resp)
    for i, n in enumerate(lengths):
        resp_mask[i, :n] = 1
    attn = torch.cat([torch.ones(b, prompt, dtype=torch.long), resp_mask.long()], dim=1)
    ids = torch.arange(b * (prompt + resp)).view(b, -1) % 50
    return Batch(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(1) - 1).clamp(min=0),
                 responses=ids[:, prompt:], response_mask=resp_mask, old_log_probs=torch.randn(b, resp),
                 group_id=list(range(b)))


def test_balanced_partition_sizes_and_tokens():
    counts = [100, 1, 1, 1, 90, 2, 3, 80]
    parts = dispatch.balanced_partition(counts, 2)
    assert sorted(i for p in parts for i in p) == list(range(8))
    assert [len(p) for p in parts] == [4, 4]
    loads = [sum(counts[i] for i in p) for p in parts]
    assert abs(loads[0] - loads[1]) <= 100  # the two longest rows never land together
    assert not ({0, 4} <= set(parts[0]) or {0, 4} <= set(parts[1]))
    # Uneven sizes differ by at most one, empty groups only when rows run out.
    assert sorted(len(p) for p in dispatch.balanced_partition([5] * 7, 3)) == [2, 2, 3]
    assert sorted(len(p) for p in dispatch.balanced_partition([5], 3)) == [0, 0, 1]


def test_every_rank_gets_the_same_number_of_micro_batches():
    batch = _batch([6, 1, 1, 1, 1, 6, 2])
    for mbs, budget in ((2, None), (1, None), (4, 10), (4, 12), (1, 9)):
        index, parts = dispatch.shard_for_ranks(batch, 3, MicroBatching(mbs, budget))
        counts = {len(make_micro_batches(p, mbs, budget)) for p in parts}
        assert len(counts) == 1, (mbs, budget, counts)
        for ix, p in zip(index, parts):
            # real rows first, then dummy rows that count nowhere
            assert torch.equal(p.input_ids[: len(ix)], batch.input_ids[ix])
            assert p.response_mask[len(ix):].sum() == 0


def test_gather_rows_restores_order_and_drops_dummies():
    batch = _batch([6, 1, 3, 2, 5])
    index, parts = dispatch.shard_for_ranks(batch, 2, MicroBatching(2))
    results = [(p.old_log_probs * 2, p.old_log_probs[:, :2]) for p in parts]
    out = dispatch.gather_rows(index, results, len(batch))
    assert torch.equal(out[0], batch.old_log_probs * 2)
    assert torch.equal(out[1], batch.old_log_probs[:, :2])


def test_rank_shares_cover_the_mini_batch_once():
    batch = _batch([6, 1, 3, 2, 5, 4])
    shares = [dispatch.rank_share(batch, r, 2, MicroBatching(2)) for r in range(2)]
    real = torch.cat([s.input_ids[s.response_mask.sum(1) > 0] for s in shares])
    assert sorted(map(tuple, real.tolist())) == sorted(map(tuple, batch.input_ids.tolist()))


def test_update_metrics_sum_shares_but_not_replicated_values():
    per_rank = [{"actor/pg_loss": 0.25, "actor/grad_norm": 3.0, "actor/lr": 1e-3, "critic/explained_var": 0.5},
                {"actor/pg_loss": 0.5, "actor/grad_norm": 3.0, "actor/lr": 1e-3, "critic/explained_var": 0.5}]
    m = dispatch.reduce_update_metrics(per_rank)
    assert m == {"actor/pg_loss": 0.75, "actor/grad_norm": 3.0, "actor/lr": 1e-3, "critic/explained_var": 0.5}
