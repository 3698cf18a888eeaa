"""distributed.* keys: checked when the config loads, or before any Ray process starts."""

import pytest

from conftest import small_overrides
from verl.config import ConfigError
from verl import load_config


def test_distributed_keys_are_checked(tmp_path):
    cfg = load_config(None, small_overrides(tmp_path, **{"distributed.backend": "ray",
                                                         "distributed.devices_per_node": 2}))
    d = cfg.distributed
    assert (d.rollout, d.colocate_critic, d.colocate_reward, d.weight_bucket_mb) == ("auto", True, True, 512.0)
    with pytest.raises(ConfigError, match="distributed.backend"):
        load_config(None, small_overrides(tmp_path, **{"distributed.backend": "mpi"}))
    with pytest.raises(ConfigError, match="distributed.rollout"):
        load_config(None, small_overrides(tmp_path, **{"distributed.rollout": "everywhere"}))
    with pytest.raises(ConfigError, match="did you mean 'distributed.devices_per_node'"):
        load_config(None, small_overrides(tmp_path, **{"distributed.device_per_node": 2}))


def test_impossible_layouts_fail_before_ray_starts(tmp_path, tiny_gpt2):
    from verl.distributed import build_distributed_workers
    from verl.models.loading import load_tokenizer

    tok = load_tokenizer("tiny:gpt2")
    # 4 sequences per mini-batch cannot feed 8 ranks.
    cfg = load_config(None, small_overrides(tmp_path, **{"distributed.backend": "ray",
                                                         "distributed.devices_per_node": 8}))
    with pytest.raises(ConfigError, match="training.mini_batch_size: 4 sequences cannot feed 8"):
        build_distributed_workers(cfg, tok)
    # Replicas on the workers are vLLM engines.
    cfg = load_config(None, small_overrides(tmp_path, **{"distributed.backend": "ray",
                                                         "distributed.rollout": "workers"}))
    with pytest.raises(ConfigError, match="rollout.name: vllm"):
        build_distributed_workers(cfg, tok)
    # Single-process memory tricks that FSDP replaces are refused, not silently half-applied.
    cfg = load_config(None, small_overrides(tmp_path, **{"distributed.backend": "ray", "model.lora.rank": 4}))
    with pytest.raises(ConfigError, match="model.lora.rank > 0: not supported with distributed.backend: ray"):
        build_distributed_workers(cfg, tok)
    from verl.distributed.rollout import replica_layout

    assert replica_layout(8, 2) == [0, 2, 4, 6]
    with pytest.raises(ConfigError, match="tensor_model_parallel_size: 3 must divide the 8"):
        replica_layout(8, 3)
