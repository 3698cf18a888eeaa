"""Tiny random models with locally trained tokenizers: `model.name: tiny:<arch>`.

They need no download, so the embedded default run, the tests and CI work offline.
The build is deterministic (fixed seed, fixed corpus) and cached on disk under
`$VERL_CACHE/tiny/<arch>` (default `~/.cache/verl`), as a normal Hugging Face folder
that `AutoModelForCausalLM` / `AutoTokenizer` (and vLLM) load.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

# bert: an encoder (a critic with its own tokenizer); qwen2-agent: qwen2 pretrained also on calculator
# dialogues (below), so that it sometimes calls a tool before answering: the CPU agent demo's model
# qwen2_moe, qwen3_moe, mixtral, olmoe: mixture-of-experts decoders (4 experts, top-2 routing; Qwen2-MoE also
# its shared expert), for the MoE paths (verl/models/moe.py)
MOE_ARCHS = ("qwen2_moe", "qwen3_moe", "mixtral", "olmoe")
TINY_ARCHS = ("gpt2", "llama", "qwen2", "bert", "qwen2-agent") + MOE_ARCHS
TINY_VERSION = 4  # bump when the build changes, so stale caches are not reused

# Text the BPE tokenizer is trained on: the default prompts, the seed's target phrase
# and plain English, so that common words are single tokens and outputs are readable.
_CORPUS = """
I love reinforcement learning. Reinforcement learning trains a policy from rewards.
The model writes an answer, a reward function scores it, and the policy improves.
Explain reinforcement learning in one sentence. What is the capital of France?
Paris is the capital of France. Write a short poem about the sea. Tell me a story.
The quick brown fox jumps over the lazy dog. Once upon a time there was a little robot.
What is 17 + 25? The answer is 42. Add the numbers and give the result. #### 42
Question: Tom has 3 apples and buys 5 more. How many apples does Tom have? Answer: 8
one two three four five six seven eight nine ten hundred thousand plus minus times
0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 25 42 50 99 100
Hello, how are you today? I am fine, thank you. Please describe your favourite food.
Summarize the following text. Translate to French. Give three reasons why exercise helps.
user assistant system You are a helpful assistant.
What do you love? I love reinforcement learning. What do you like? I like the sea.
How are you? I am fine. What do you think? I think the policy improves. Who are you? I am a little robot.
"""


def _agent_dialogues(n: int = 48, seed: int = 7) -> str:
    """Chat-formatted addition problems: half answered by calling the calculator (hermes format) and
    copying its result, half answered directly with a guess that is usually wrong. A model pretrained
    on them calls the tool about half the time; RL on answer correctness should make it call always."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        ask = f"<|im_start|>user\nWhat is {a} + {b}?<|im_end|>\n<|im_start|>assistant\n"
        if i % 2 == 0:
            call = '<tool_call>{"name": "calculator", "arguments": {"expression": "%d + %d"}}</tool_call>' % (a, b)
            out.append(f"{ask}{call}<|im_end|>\n<|im_start|>tool\n{a + b}<|im_end|>\n<|im_start|>assistant\n"
                       f"The answer is {a + b}.<|im_end|>")
        else:
            out.append(f"{ask}The answer is {a + b + rng.choice([-11, -10, -2, -1, 1, 2, 10, 11])}.<|im_end|>")
    return "\n".join(out)


_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _corpus(arch: str) -> str:
    return _CORPUS + ("\n" + _agent_dialogues() if arch == "qwen2-agent" else "")


def cache_root() -> str:
    return os.environ.get("VERL_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "verl"))


def _train_tokenizer(arch: str, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>"] + (["<|im_start|>", "<|im_end|>"] if arch != "gpt2" else [])
    corpus = _corpus(arch)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([corpus] * 4, trainer=trainer)
    kwargs = dict(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                  bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    if arch != "gpt2":
        kwargs.update(eos_token="<|im_end|>", additional_special_tokens=["<|im_start|>"])
    fast = PreTrainedTokenizerFast(**kwargs)
    if arch != "gpt2":
        fast.chat_template = _CHAT_TEMPLATE
    return fast


def _train_wordpiece_tokenizer(vocab_size: int):
    """A lowercasing WordPiece tokenizer (BERT-style): it splits words differently from the
    byte-level BPE of the causal tiny models, which is what the cross-tokenizer critic needs."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls),
                                                                                                ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def _model_config(arch: str, tokenizer, hidden: int, layers: int):
    from transformers import BertConfig, GPT2Config, LlamaConfig, Qwen2Config

    if arch == "bert":
        return BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                          num_attention_heads=4, intermediate_size=2 * hidden, max_position_embeddings=512,
                          pad_token_id=tokenizer.pad_token_id)

    vocab = len(tokenizer)
    # Head size 32: vLLM's CPU attention kernels take head sizes 32, 64, 80, ... (not 16).
    heads = max(1, hidden // 32)
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id)
    if arch == "gpt2":
        return GPT2Config(vocab_size=vocab, n_positions=512, n_embd=hidden, n_layer=layers, n_head=heads, **ids)
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=1, max_position_embeddings=512,
                  tie_word_embeddings=True, **ids)
    if arch == "llama":
        return LlamaConfig(head_dim=hidden // heads, **common)
    if arch in MOE_ARCHS:
        return _moe_config(arch, common, hidden)
    return Qwen2Config(**common)  # qwen2, qwen2-agent


def _moe_config(arch: str, common: dict, hidden: int):
    """4 experts of width hidden / 2, 2 routed per token, every layer sparse; the router's auxiliary loss
    at its usual 0.01 (verl adds it only when training.router_aux_loss_coef says so)."""
    from transformers import MixtralConfig, OlmoeConfig, Qwen2MoeConfig, Qwen3MoeConfig

    experts = dict(num_experts_per_tok=2, router_aux_loss_coef=0.01)
    if arch == "mixtral":
        return MixtralConfig(num_local_experts=4, head_dim=hidden // common["num_attention_heads"], **experts,
                             **common)
    moe = dict(num_experts=4, moe_intermediate_size=hidden // 2, norm_topk_prob=True, **experts, **common)
    if arch == "qwen2_moe":
        return Qwen2MoeConfig(shared_expert_intermediate_size=hidden // 2, decoder_sparse_step=1, **moe)
    if arch == "qwen3_moe":
        return Qwen3MoeConfig(head_dim=hidden // common["num_attention_heads"], decoder_sparse_step=1, **moe)
    return OlmoeConfig(**moe)


def _pretrain(model, tokenizer, steps: int, seed: int, arch: str = "") -> None:
    """A few hundred next-token steps on the built-in corpus, so the tiny model writes
    English-looking text and RL has something to shape (a random model samples noise)."""
    import torch

    lines = [line.strip() for line in _CORPUS.strip().splitlines()]
    # The corpus twice, with a leading space: every sentence, the first one included, is then
    # seen after others with the space it has mid-text (" I love ..."), as continuations are.
    text = " " + " ".join(lines + lines)
    if arch == "qwen2-agent":
        text += "\n" + _agent_dialogues()  # whole dialogues, their line breaks kept (the template has them)
    ids = torch.tensor(tokenizer(text)["input_ids"])
    block = 64
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - block - 1, (16,), generator=gen)
        x = torch.stack([ids[s:s + block] for s in starts])
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()


def build_tiny_model(arch: str, out_dir: str, hidden: int = 64, layers: int = 2, vocab_size: int = 512,
                     seed: int = 0, pretrain_steps: int = 200) -> str:
    """Write a small `arch` model + tokenizer to `out_dir` and return the path.

    With `pretrain_steps` > 0 the random init is first trained briefly on the built-in
    corpus (seconds on a CPU; deterministic for a given seed)."""
    import torch
    from transformers import AutoModelForCausalLM

    if arch not in TINY_ARCHS:
        raise ValueError(f"unknown tiny architecture '{arch}'; choose one of {', '.join(TINY_ARCHS)}")
    tokenizer = _train_wordpiece_tokenizer(vocab_size) if arch == "bert" else _train_tokenizer(arch, vocab_size)
    pretrain_steps = pretrain_steps if arch != "qwen2-agent" else max(pretrain_steps, 600)  # a longer corpus
    config = _model_config(arch.removesuffix("-agent"), tokenizer, hidden, layers)
    torch.manual_seed(seed)
    if arch == "bert":
        from transformers import AutoModel

        model = AutoModel.from_config(config)
        os.makedirs(out_dir, exist_ok=True)
        model.save_pretrained(out_dir, safe_serialization=True)
        tokenizer.save_pretrained(out_dir)
        return out_dir
    model = AutoModelForCausalLM.from_config(config)
    if pretrain_steps:
        _pretrain(model, tokenizer, pretrain_steps, seed, arch)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def cached_build(folder: str, build, marker: dict, message: str) -> str:
    """`folder` under cache_root()/tiny, built once (atomically: in a temporary folder renamed into
    place) by `build(tmp_dir)` when missing; `message` is printed before the build."""
    final = os.path.join(cache_root(), "tiny", folder)
    marker_path = os.path.join(final, "verl_tiny.json")
    if os.path.exists(marker_path):
        return final
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{folder}-", dir=os.path.dirname(final))
    print(f"{message} (cached in {final})", file=sys.stderr, flush=True)
    build(tmp)
    with open(os.path.join(tmp, "verl_tiny.json"), "w") as fh:
        json.dump(marker, fh)
    try:
        os.rename(tmp, final)
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def tiny_model_path(arch: str) -> str:
    """Path of the cached `tiny:<arch>` model, building it once (atomically) if missing."""
    # The one silent phase of a first run (tokenizer training + a short pretraining): say so.
    return cached_build(f"{arch}-v{TINY_VERSION}", lambda tmp: build_tiny_model(arch, tmp), {"arch": arch},
                        f"building the tiny model tiny:{arch} once (a few seconds to a minute on a CPU)")


def resolve_model_name(name: str) -> str:
    """Map `tiny:<arch>` (a vision-language family of verl/models/tiny_vl.py included) to its cached
    folder and a fetched model's short name (e.g.
    `smollm2-135m-instruct`, see `verl models fetch`) to its folder; others pass through."""
    if name.startswith("tiny:"):
        arch = name[len("tiny:"):]
        from verl.models.tiny_vl import TINY_VL_FAMILIES, tiny_vl_model_path

        return tiny_vl_model_path(arch) if arch in TINY_VL_FAMILIES else tiny_model_path(arch)
    from verl.models.fetch import KNOWN_MODELS, is_fetched, model_dir

    if name in KNOWN_MODELS:
        if not is_fetched(name):
            from verl.errors import ConfigError

            raise ConfigError(f"model '{name}' is not on this machine yet; run: verl models fetch {name}")
        return model_dir(name)
    from verl.models.hybrid_vl import HYBRID_NAME, hybrid_dir, is_built

    if name == HYBRID_NAME:  # the hybrid LLaVA of verl/models/hybrid_vl.py
        if not is_built():
            from verl.errors import ConfigError

            raise ConfigError(f"model '{name}' is not built yet; run: verl models fetch smollm2-135m-instruct && "
                              f"verl models hybrid-vl")
        return hybrid_dir()
    return name
