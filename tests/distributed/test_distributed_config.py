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
    # the optimal token baseline runs on Ray (its sum_v pi^2 comes back from the actor ranks: test_distributed_ray.py)
    otb = load_config(None, small_overrides(tmp_path, **{"distributed.backend": "ray", "algorithm.name": "otb"}))
    assert otb.algorithm.adv_estimator == "optimal_token_baseline"
    with pytest.raises(ConfigError, match="distributed.backend"):
        load_config(None, small_overrides(tmp_path, **{"distributed.backend": "mpi"}))
    with pytest.raises(ConfigError, match="distributed.rollout"):
        load_config(None, small_overrides(tmp_path, **{"distributed.rollout": "everywhere"}))
    with pytest.raises(ConfigError, match="did you mean 'distributed.devices_per_node'"):
        load_config(None, small_overrides(tmp_path, **{"distributed.device_per_node": 2}))


def test_impossible_layouts_fail_before_ray_starts(tmp_path, tiny_gpt2):
    # Refused when the config loads (verl/config/root.py), before any Ray process exists.
    # 4 sequences per mini-batch cannot feed 8 ranks.
    with pytest.raises(ConfigError, match="training.mini_batch_size: 4 sequences cannot feed 8"):
        load_config(None, small_overrides(tmp_path, **{"distributed.backend": "ray",
                                                       "distributed.devices_per_node": 8}))
    # Replicas on the workers are vLLM engines.
    with pytest.raises(ConfigError, match="rollout.name: vllm"):
        load_config(None, small_overrides(tmp_path, **{"distributed.backend": "ray",
                                                       "distributed.rollout": "workers"}))
    # Single-process memory tricks that FSDP replaces are refused, not silently half-applied.
    with pytest.raises(ConfigError, match="model.lora.rank > 0: not supported with distributed.backend: ray"):
        load_config(None, small_overrides(tmp_path, **{"distributed.backend": "ray", "model.lora.rank": 4}))
    from verl.distributed.rollout import replica_layout

    assert replica_layout(8, 2) == [0, 2, 4, 6]
    with pytest.raises(ConfigError, match="tensor_model_parallel_size: 3 must divide the 8"):
        replica_layout(8, 3)
