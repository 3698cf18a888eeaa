"""The weight sync streams a module's weights into vLLM in bounded buckets.

On the H200 (2026-12-02) a Qwen2.5-32B LoRA run ran out of memory at its first sync: the sync
built the list of every merged weight (W + B A, new tensors) before loading any, a second bf16
copy of the 61 GiB base. `hf_weights.weight_buckets` now cuts a lazy stream into buckets, and
vLLM's direct reload draws each bucket only after the one before is loaded. No CPU engine takes
the direct path (the CPU backend packs its weights and reloads layerwise), so the reload runs
here against a recording stand-in for the engine; the GPU tests run the real one.
"""

from __future__ import annotations

import torch

from verl.rollout import in_process, vllm_rollout
from verl.rollout.hf_weights import weight_buckets


def _stream(sizes: list[int], drawn: list):
    """(name, float32 tensor of `size` elements) for each size, appending each name to `drawn` as it
    is produced (how far a consumer has read the stream)."""
    for i, n in enumerate(sizes):
        drawn.append(f"w{i}")
        yield f"w{i}", torch.zeros(n)


def test_weight_buckets_are_bounded_in_order_and_drawn_lazily():
    drawn, seen = [], []
    # float32: 2 elements = 8 bytes. limit 20 bytes: w0 + w1 = 16 fit, w2 would make 24 -> a new bucket;
    # w3 alone is 40 bytes > 20: a bucket of its own; w4 + w5 = 16.
    for bucket in weight_buckets(_stream([2, 2, 2, 10, 2, 2], drawn), limit=20):
        seen.append(([name for name, _ in bucket], len(drawn)))
    assert [names for names, _ in seen] == [["w0", "w1"], ["w2"], ["w3"], ["w4", "w5"]]
    # when a bucket is handed out, the stream has been read to one tensor past it (the one that did
    # not fit) and no further: 3 of 6 at the first bucket, then 4, 5, and all 6 at the last
    assert [n for _, n in seen] == [3, 4, 5, 6]
    assert list(weight_buckets(iter([]), limit=20)) == []


def test_weight_buckets_cut_by_bytes_in_order():  # (SGLang's sync takes them as one list)
    t = [(f"w{i}", torch.zeros(n, dtype=torch.float32)) for i, n in enumerate([2, 2, 5, 1, 1])]  # 8, 8, 20, 4, 4 bytes
    buckets = list(weight_buckets(t, limit=16))
    # 8+8 fit in 16; 20 alone exceeds the limit and travels alone; 4+4 together.
    assert [[name for name, _ in b] for b in buckets] == [["w0", "w1"], ["w2"], ["w3", "w4"]]
    assert list(weight_buckets([], limit=16)) == []


class FakeLLM:
    """Records collective_rpc and reset_prefix_cache calls, with how far the stream was read."""

    def __init__(self, drawn: list):
        self.drawn, self.calls = drawn, []

    def collective_rpc(self, fn, args=(), kwargs=None):
        if args:  # load_in_place(worker, bucket)
            self.calls.append(("load_in_place", [name for name, _ in args[0]], len(self.drawn)))
        else:  # "reload_weights" with weights_iterator
            self.calls.append((fn, [name for name, _ in kwargs["weights_iterator"]], len(self.drawn)))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache", [], len(self.drawn)))


def _engine(monkeypatch, reload: str, drawn: list):
    monkeypatch.setattr(vllm_rollout, "SYNC_BUCKET_BYTES", 20)
    r = vllm_rollout.VLLMRollout.__new__(vllm_rollout.VLLMRollout)  # no engine start: the calls are recorded
    r.llm, r.weight_reload, r.on_cpu, r.prefix_caching, r.asleep = FakeLLM(drawn), reload, False, True, False
    return r


def test_direct_reload_loads_a_stream_bucket_by_bucket(monkeypatch):
    drawn = []
    r = _engine(monkeypatch, "direct", drawn)
    n_bytes = r.load_weights(_stream([2, 2, 2, 10, 2, 2], drawn))
    assert n_bytes == 4 * (2 + 2 + 2 + 10 + 2 + 2)  # 80 bytes, every tensor once
    assert r.llm.calls == [("load_in_place", ["w0", "w1"], 3), ("load_in_place", ["w2"], 4),
                           ("load_in_place", ["w3"], 5), ("load_in_place", ["w4", "w5"], 6),
                           ("reset_prefix_cache", [], 6)]  # the prefix cache once, after the last bucket


def test_layerwise_reload_takes_every_weight_in_one_call(monkeypatch):
    # vLLM's reload_weights rebuilds every layer from what it is given: all of them, at once
    drawn = []
    r = _engine(monkeypatch, "layerwise", drawn)
    assert r.load_weights(_stream([2, 2, 10], drawn)) == 4 * 14
    assert r.llm.calls == [("reload_weights", ["w0", "w1", "w2"], 3), ("reset_prefix_cache", [], 3)]


def test_sync_weights_streams_to_vllm_and_lists_for_the_others(monkeypatch):
    got = {}

    class Engine(in_process.InProcessEngine):
        def __init__(self, streams: bool):
            self.loads_weight_stream, self._pending_metrics, self._source = streams, {}, None

        def generate(self, *args, **kwargs):  # (abstract in RolloutEngine; not called here)
            raise NotImplementedError

        def load_weights(self, weights):
            got[self.loads_weight_stream] = weights
            return sum(t.numel() * t.element_size() for _, t in weights)

    monkeypatch.setattr(in_process, "hf_named_weights", lambda model, skip=None: _stream([2, 3], []))
    for streams in (True, False):
        metrics = Engine(streams).sync_weights(torch.nn.Linear(1, 1))
        assert metrics["rollout/weight_sync_bytes"] == 4 * 5
    assert isinstance(got[False], list) and not isinstance(got[True], list)  # a generator, read once
    assert vllm_rollout.VLLMRollout.loads_weight_stream is True
