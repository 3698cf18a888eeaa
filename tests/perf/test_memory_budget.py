"""The token budget per micro-batch derived from the free GPU memory (verl.workers.memory_budget)."""

import pytest
import torch

from verl.batch import Batch

from verl.workers import memory_budget as mb
from verl.workers.memory_budget import ModelShape, TokenBudget, bytes_per_token, pending_bytes, token_budget
from verl.workers.micro_batches import MicroBatching

# H = 64, L = 2, I = 256, V = 1000, bf16 activations (a = 2):
#   layer = a (8 H + 4 I) + 16 H = 2 (512 + 1024) + 1024 = 4096 bytes a token
SHAPE = ModelShape(hidden=64, layers=2, intermediate=256, vocab=1000)


def test_bytes_per_token_by_hand():
    assert bytes_per_token(SHAPE, 2, training=True, checkpointing=False, keep_logits=False) == 3 * 4096  # (L+1) layer
    # checkpointing: L * 4 H + 2 layer = 2 * 256 + 8192
    assert bytes_per_token(SHAPE, 2, training=True, checkpointing=True, keep_logits=False) == 8704
    assert bytes_per_token(SHAPE, 2, training=False, checkpointing=False, keep_logits=False) == 8192  # 2 layer
    # kept logits: + a V = 2000
    assert bytes_per_token(SHAPE, 2, training=True, checkpointing=False, keep_logits=True) == 12288 + 2000
    # float32 (a = 4): 4 (512 + 1024) + 1024 = 7168 a layer
    assert bytes_per_token(SHAPE, 4, training=False, checkpointing=False, keep_logits=False) == 2 * 7168


def test_token_budget_by_hand():
    # available 100 MiB = 104857600 bytes, 70% of it 73400320; pending 10^7; head (chunk 128):
    # 128 * 1000 * (2 + 12) = 1792000  ->  usable 73400320 - 10000000 - 1792000 = 61608320
    kw = dict(chunk_size=128, keep_logits=False)
    assert token_budget(100 * 2**20, 10**7, SHAPE, 2, training=True, checkpointing=False, **kw) == 5013  # // 12288
    assert token_budget(100 * 2**20, 10**7, SHAPE, 2, training=True, checkpointing=True, **kw) == 7078  # // 8704
    assert token_budget(100 * 2**20, 10**7, SHAPE, 2, training=False, checkpointing=False, **kw) == 7520  # // 8192
    # a value model has no LM head: 63400320 // 12288
    value_model = ModelShape(64, 2, 256, vocab=0)
    assert token_budget(100 * 2**20, 10**7, value_model, 2, training=True, checkpointing=False, **kw) == 5159
    # less memory than the fixed costs: one sequence a micro-batch (the budget's floor)
    assert token_budget(10 * 2**20, 10**7, SHAPE, 2, training=True, checkpointing=False, **kw) == 1


def test_model_shape_from_hf_configs():
    from transformers import GPT2Config, Qwen2Config

    qwen = Qwen2Config(hidden_size=64, intermediate_size=256, num_hidden_layers=2, vocab_size=1000)
    assert ModelShape.of(qwen, lm_head=True) == SHAPE
    gpt2 = GPT2Config(n_embd=32, n_layer=3, n_inner=None, vocab_size=500)  # MLP width 4 H when n_inner is unset
    assert ModelShape.of(gpt2, lm_head=False) == ModelShape(32, 3, 128, 0)


def test_pending_bytes_by_hand():
    model = torch.nn.Linear(3, 4)  # weight 12 + bias 4 float32 parameters
    opt = torch.optim.AdamW(model.parameters())
    params = list(model.parameters())
    # bf16 autocast copy of the weight matrix 12 * 2; gradients 16 * 4; AdamW moments 2 * 64
    assert pending_bytes(model, params, opt, torch.bfloat16, training=True) == 24 + 64 + 128
    assert pending_bytes(model, params, opt, torch.bfloat16, training=False) == 24
    assert pending_bytes(model, params, opt, torch.float32, training=True) == 64 + 128
    model(torch.ones(2, 3)).sum().backward()
    opt.step()  # the moments exist now, the gradients too
    assert pending_bytes(model, params, opt, torch.float32, training=True) == 0
    opt.zero_grad(set_to_none=True)
    assert pending_bytes(model, params, opt, torch.bfloat16, training=True) == 24 + 64


def test_budget_is_measured_once_and_kept_where_set(monkeypatch, capsys):
    measured = []
    monkeypatch.setattr(mb, "available_bytes", lambda device: measured.append(device) or 100 * 2**20)

    def budget(training):
        return TokenBudget("actor", torch.device("cuda"), SHAPE, torch.bfloat16, lambda: 10**7, training=training,
                           checkpointing=False, chunk_size=128, keep_logits=False)

    trains = budget(training=True)
    assert trains.apply(MicroBatching(4, packed=True)) == MicroBatching(4, 5013, packed=True)
    assert trains.apply(MicroBatching(4)) == MicroBatching(4, 5013)  # the same, not measured again
    assert trains.apply(MicroBatching(4, 99)) == MicroBatching(4, 99)  # set (or halved): kept
    assert budget(training=False).apply(MicroBatching(4)) == MicroBatching(4, 7520)  # a reference's: no-grad
    assert len(measured) == 2
    assert capsys.readouterr().out.splitlines()[0] == (
        "verl: actor micro-batches of up to 5013 tokens (0.1 GiB available, 0.0 GiB still to allocate; "
        "training.max_tokens_per_micro_batch sets it)")


def test_no_budget_on_the_cpu_with_the_key_set_or_on_fsdp_ranks():
    from transformers import Qwen2Config

    hf = Qwen2Config(hidden_size=64, intermediate_size=256, num_hidden_layers=2, vocab_size=1000)
    kw = dict(lm_head=True, compute_dtype=torch.bfloat16, checkpointing=False, chunk_size=128)

    def maybe(device, micro, adapt):
        return TokenBudget.maybe("actor", torch.device(device), micro, adapt, hf, lambda: 0, training=True, **kw)

    assert maybe("cpu", MicroBatching(4), True) is None
    assert maybe("cuda", MicroBatching(4, 512), True) is None
    assert maybe("cuda", MicroBatching(4), False) is None
    assert maybe("cuda", MicroBatching(4), True).shape == SHAPE


@pytest.mark.gpu
def test_defaults_fit_an_update_that_one_micro_batch_does_not(capsys):
    """Qwen2.5-1.5B architecture (random weights), bf16 autocast over float32 master weights,
    256 sequences of 64 + 512 tokens with micro_batch_size 256: the whole batch in one
    micro-batch needs ~0.5 TB of activations (3.6 MB a token by the estimate) and ran out of
    memory on the H200. With the key unset the derived budget cuts it into several
    micro-batches and the update runs without an out-of-memory retry."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from verl.config import config_from_dict
    from verl.workers.actor import Actor

    device = torch.device("cuda")
    if torch.cuda.get_device_properties(device).total_memory < 80 * 2**30:
        pytest.skip("sized for an 80+ GiB GPU (float32 master weights, gradients and AdamW take 24 GiB)")
    hf = Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                     num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)
    torch.manual_seed(0)
    with device:
        model = AutoModelForCausalLM.from_config(hf, dtype=torch.float32, attn_implementation="sdpa")
    cfg = config_from_dict({
        "device": "cuda", "model": {"dtype": "bfloat16"}, "algorithm": {"name": "grpo", "use_kl_loss": False},
        "rollout": {"n": 8, "max_new_tokens": 512},
        "training": {"batch_size": 32, "mini_batch_size": 256, "micro_batch_size": 256},
        "logging": {"backends": [], "progress_bar": False},
    })
    actor = Actor.from_config(cfg, device, model)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(10, hf.vocab_size, (256, 64 + 512), generator=gen)
    mask = torch.ones_like(ids)
    batch = Batch(input_ids=ids, attention_mask=mask, position_ids=mask.cumsum(1) - 1, responses=ids[:, 64:],
                  response_mask=torch.ones(256, 512), advantages=torch.randn(256, 1, generator=gen).expand(256, 512))
    metrics = actor.update(batch)
    assert metrics["actor/oom_retries"] == 0 and metrics["actor/nonfinite_updates"] == 0
    assert 1 <= actor.budget.tokens < 256 * 576 // 2  # at least two micro-batches
    assert f"verl: actor micro-batches of up to {actor.budget.tokens} tokens" in capsys.readouterr().out
