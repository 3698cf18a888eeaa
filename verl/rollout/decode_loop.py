"""verl's own decode loop over a transformers causal LM (`rollout.decode_loop: verl`).

Why: `model.generate` spends ~10 ms of host time per decode step on its Python loop (logits
processors, stopping criteria, a device sync per step), which at batch 128 on an H200 is most of a
135M model's rollout. This loop keeps everything a decode step does on the device:

    prefill (eager)   one forward over the left-padded prompts (B, P) into a static KV cache of
                      L = rollout.max_model_len slots; sample token 0
    decode step t     forward of the last token (B, 1) -> logits (B, V) -> sample (see
                      verl.rollout.sampling) -> write token/log-prob at column t, mark rows that
                      produced EOS as done (later tokens become pad) -> advance positions
    early exit        every CHECK_EVERY steps one host sync asks whether all rows are done
    min_new_tokens    the model's generation_config.min_new_tokens bans EOS from sampling before
                      that many tokens, as generate's logits processor does; the reported log-probs
                      stay those of the raw logits (as generate's output_logits are)

On CUDA the decode step (forward + sampling + bookkeeping) is captured once per (batch size,
sampling settings) as a CUDA graph and replayed: one launch per token. Its inputs live in static
buffers; the weights it reads are the rollout's weight copy, which `copy_weights_into` overwrites
in place, so a captured graph stays valid across updates. Elsewhere (CPU) the same step runs
eagerly: the plain fallback, and what the CPU tests exercise.

Attention reads only the first W slots of the cache, W = the slots in use rounded up to a
multiple of BUCKET (capped at L): with L = max_prompt_length + max_new_tokens sized for the
longest prompt, attending over all L slots at every step (what generate's static cache does)
costs most of a decode step when prompts are short. Each W gets its own graph, so a rollout
captures at most L / BUCKET graphs per (batch size, sampling settings), once.

Attention masks are built here as 4D additive masks (transformers passes a 4D mask through as
is), so nothing in the step depends on the data on the host:
    decode:  (B, 1, 1, W)  key k visible iff key_valid[b, k] and k <= cur (the slot being written)
    prefill: (B, 1, P, W)  key k visible from query q iff key_valid[b, k] and k <= q (and k == q)
key_valid is the prompt's attention mask over slots 0..P-1 and 1 over the generated slots P..L-1.
Sliding-window cache layers would need another mask: such models are refused.
"""

from __future__ import annotations

import functools

import torch

from verl.rollout.sampling import pick_tokens, token_log_probs

CHECK_EVERY = 8  # decode steps between "all rows done?" host syncs
WARMUP_STEPS = 2  # eager decode steps (real ones) on a side stream before a graph is captured
BUCKET = 64  # attention window granularity (cache slots)
MAX_BATCH_STATES = 2  # KV caches (and their graphs) kept, one per batch size, least recently used dropped


@functools.cache
def _windowed_layer_class():
    from transformers.cache_utils import StaticLayer

    class WindowedStaticLayer(StaticLayer):
        """A StaticLayer whose update returns only the first `window` slots (views of the same
        storage): attention then runs over W keys instead of max_cache_len."""

        window: int = 0

        def update(self, key_states, value_states, *args, **kwargs):
            keys, values = super().update(key_states, value_states, *args, **kwargs)
            return keys[:, :, : self.window], values[:, :, : self.window]

    return WindowedStaticLayer


def window_for(used_slots: int, max_len: int, bucket: int = BUCKET) -> int:
    """Slots attention must cover when `used_slots` are filled: rounded up to a bucket, <= max_len."""
    return min(max_len, -(-used_slots // bucket) * bucket)


class _BatchState:
    """Static buffers and the KV cache for one batch size; graphs keyed by (sampling settings, window)."""

    def __init__(self, model, batch: int, max_len: int, device, dtype):
        from transformers import StaticCache
        from transformers.cache_utils import Cache, StaticLayer

        probe = StaticCache(config=model.config, max_cache_len=max_len)  # the layer kinds the model needs
        odd = [type(layer).__name__ for layer in probe.layers if type(layer) is not StaticLayer]
        if odd:
            raise ValueError(f"rollout.decode_loop: verl supports full-attention caches only; "
                             f"{type(model).__name__} uses {sorted(set(odd))} (use rollout.decode_loop: transformers)")
        layer_class = _windowed_layer_class()
        self.cache = Cache(layers=[layer_class(max_cache_len=max_len) for _ in probe.layers])
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=device)  # last sampled token
        self.pos = torch.zeros(batch, 1, dtype=torch.long, device=device)  # its position id
        self.cur = torch.zeros((), dtype=torch.long, device=device)  # the cache slot it is written to
        self.step = torch.zeros((), dtype=torch.long, device=device)  # output column of the next token
        self.min_new = torch.zeros((), dtype=torch.long, device=device)  # EOS banned while step < min_new
        self.done = torch.zeros(batch, dtype=torch.bool, device=device)
        self.eos_index = torch.zeros(1, dtype=torch.long, device=device)
        self.key_valid = torch.zeros(batch, max_len, dtype=torch.bool, device=device)
        self.slots = torch.arange(max_len, device=device)
        self.tokens = torch.zeros(batch, max_len, dtype=torch.long, device=device)
        self.log_probs = torch.zeros(batch, max_len, dtype=torch.float32, device=device)
        self.mask_min = torch.finfo(dtype).min
        self.dtype = dtype
        self.graphs: dict = {}  # (sampling settings, window) -> CUDAGraph

    def set_window(self, window: int) -> None:
        for layer in self.cache.layers:
            layer.window = window


class StaticDecoder:
    def __init__(self, model: torch.nn.Module, max_len: int, pad_id: int, eos_id: int, use_cuda_graph=None,
                 bucket: int = BUCKET):
        """model: a transformers causal LM in its compute dtype (no autocast); max_len: KV slots
        (prompt width + new tokens must fit); use_cuda_graph: None = on for a CUDA model;
        bucket: attention window granularity in slots."""
        self.model = model
        self.max_len = int(max_len)
        self.bucket = int(bucket)
        self.pad_id, self.eos_id = int(pad_id), int(eos_id)
        device = next(model.parameters()).device
        self.use_cuda_graph = device.type == "cuda" if use_cuda_graph is None else bool(use_cuda_graph)
        self.pool = torch.cuda.graph_pool_handle() if self.use_cuda_graph else None
        self.states: dict[int, _BatchState] = {}
        self.graphs_captured = 0  # captures so far (read by the tests)

    def _state(self, batch: int, device) -> _BatchState:
        """The cache and graphs for this batch size. Each holds batch x max_len KV slots, so only
        MAX_BATCH_STATES are kept (chunks of rollout.batch_size and a last, smaller chunk fit;
        a run whose batch size keeps changing, e.g. dynamic sampling, re-captures instead of
        accumulating caches)."""
        state = self.states.pop(batch, None)
        if state is None:
            while len(self.states) >= MAX_BATCH_STATES:
                self.states.pop(next(iter(self.states)))  # dicts keep insertion order: the least recent
            dtype = self.model.get_input_embeddings().weight.dtype
            state = _BatchState(self.model, batch, self.max_len, device, dtype)
        self.states[batch] = state  # now the most recent
        return state

    # -- the step, shared by prefill and decode ------------------------------------------------

    def _record(self, st: _BatchState, logits: torch.Tensor, sampling_key) -> None:
        """Sample from logits (B, V), write token and log-prob at column `step`, update done."""
        temperature, top_k, top_p, greedy = sampling_key
        eos_logit = logits.index_select(1, st.eos_index)[:, 0]
        banned = eos_logit.masked_fill(st.step < st.min_new, float("-inf"))
        allowed = logits.index_copy(1, st.eos_index, banned[:, None])
        tokens = pick_tokens(allowed, temperature, top_k, top_p, greedy)
        log_probs = token_log_probs(logits, tokens, 1.0 if greedy else temperature)
        tokens = tokens.masked_fill(st.done, self.pad_id)
        column = st.step.view(1)
        st.tokens.index_copy_(1, column, tokens[:, None])
        st.log_probs.index_copy_(1, column, log_probs[:, None])
        st.done |= tokens == st.eos_index
        st.ids.copy_(tokens[:, None])
        st.step += 1

    def _decode_step(self, st: _BatchState, sampling_key, window: int) -> None:
        st.set_window(window)
        visible = st.key_valid[:, :window] & (st.slots[:window] <= st.cur)  # (B, W)
        mask = torch.zeros(visible.shape, dtype=st.dtype, device=visible.device).masked_fill_(~visible, st.mask_min)
        out = self.model(input_ids=st.ids, position_ids=st.pos, attention_mask=mask[:, None, None, :],
                         past_key_values=st.cache, use_cache=True, logits_to_keep=1)
        self._record(st, out.logits[:, -1], sampling_key)
        st.pos += 1
        st.cur += 1

    def _prefill(self, st: _BatchState, input_ids, attention_mask, sampling_key) -> None:
        b, p = input_ids.shape
        window = window_for(p, self.max_len, self.bucket)
        st.set_window(window)
        st.cache.reset()
        st.eos_index.fill_(self.eos_id)
        st.min_new.fill_(int(getattr(self.model.generation_config, "min_new_tokens", None) or 0))
        st.done.zero_()
        st.step.zero_()
        st.key_valid.fill_(True)
        st.key_valid[:, :p] = attention_mask.bool()
        q = torch.arange(p, device=input_ids.device)
        slots = st.slots[:window]
        visible = st.key_valid[:, None, :window] & (slots[None, None, :] <= q[None, :, None])  # (B, P, W)
        visible |= slots[None, None, :] == q[None, :, None]  # a pad query sees itself: no empty row
        mask = torch.zeros(visible.shape, dtype=st.dtype, device=input_ids.device).masked_fill_(~visible, st.mask_min)
        position_ids = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
        out = self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask[:, None],
                         past_key_values=st.cache, use_cache=True, logits_to_keep=1)
        self._record(st, out.logits[:, -1], sampling_key)
        st.pos.copy_(attention_mask.long().sum(dim=1, keepdim=True))
        st.cur.fill_(p)

    # -- the loop --------------------------------------------------------------------------------

    def _capture(self, st: _BatchState, key, steps_left: int) -> int:
        """Run up to WARMUP_STEPS real decode steps eagerly on a side stream (kernel selection,
        lazy inits), then capture the step for key = (sampling settings, window) if steps remain.
        Returns the steps taken (capturing runs nothing)."""
        sampling_key, window = key
        taken = 0
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            while taken < min(WARMUP_STEPS, steps_left):
                self._decode_step(st, sampling_key, window)
                taken += 1
        torch.cuda.current_stream().wait_stream(side)
        if steps_left > taken:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                self._decode_step(st, sampling_key, window)
            st.graphs[key] = graph
            self.graphs_captured += 1
        return taken

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, *,
                 temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, greedy: bool = False):
        """input_ids, attention_mask: (B, P) left-padded prompts on the model's device.
        Returns (tokens (B, S) long, log_probs (B, S) float32), S <= max_new_tokens steps taken;
        after a row's EOS its tokens are pad (log-prob 0 is not meaningful there)."""
        b, p = input_ids.shape
        if p + max_new_tokens > self.max_len:
            raise ValueError(f"rollout.max_model_len: {self.max_len} cache slots cannot hold a {p}-token prompt plus "
                             f"{max_new_tokens} new tokens")
        st = self._state(b, input_ids.device)
        sampling_key = (float(temperature), int(top_k or 0), float(top_p), bool(greedy))
        self._prefill(st, input_ids, attention_mask, sampling_key)
        t = 1  # tokens produced; decode step t writes slot p + t - 1 and attends over slots 0..p + t - 1
        while t < max_new_tokens:
            if t % CHECK_EVERY == 0 and bool(st.done.all()):
                break
            window = window_for(p + t, self.max_len, self.bucket)
            key = (sampling_key, window)
            if not self.use_cuda_graph:
                self._decode_step(st, sampling_key, window)
                t += 1
                continue
            if key not in st.graphs:
                # steps that fit this window: up to slot window - 1
                t += self._capture(st, key, min(max_new_tokens, window - p + 1) - t)
                continue
            st.graphs[key].replay()
            t += 1
        return st.tokens[:, :t].clone(), st.log_probs[:, :t].clone()
