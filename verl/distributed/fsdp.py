"""FSDP2 (torch.distributed.fsdp.fully_shard) for the models a rank trains or scores with.

Everything here runs inside one rank process, after `init_process_group`:

    init_process_group(rank, world, addr, port, timeout_s)   gloo on CPU, NCCL on GPU, with a timeout
    shard_model(model, device, param_dtype)    each decoder layer, then the root: fully_shard in place
    fsdp_forward(model, fn, *args)             run fn as if it were model.forward (root hooks fire)
    full_state_dict(model)                     gathered tensors on rank 0 (CPU), {} elsewhere
    load_full_state_dict(model, sd)            rank 0's full tensors broadcast into the shards
    save_sharded(path, ...) / load_sharded(path, ...)   torch.distributed.checkpoint, one file per rank
    full_weights(model)                        (name, full tensor) one parameter at a time (collective)

Why `fsdp_forward`: FSDP2 all-gathers a unit's parameters in the pre-hook of that module's
`forward`. verl computes log-probs without calling the causal LM's `forward` (it runs the
trunk, then applies the LM head to response positions only, see verl.workers.logprobs), so
the root unit (embeddings, final norm, LM head) would stay sharded. `fsdp_forward` registers
one extra method on the root as an FSDP forward method (the public
`register_fsdp_forward_method`) and runs any function through it: the root's parameters are
gathered before, its pre-backward hooks are attached to the outputs, and gradients are
reduce-scattered in backward, as for a real `forward`.

Gradients are SUMMED across ranks (gradient divide factor 1): every rank's loss is already
its share of the mini-batch loss, normalised by mini-batch-global token/sequence counts
(`Actor.rank_share`), so the sum over ranks is exactly the single-process gradient.
"""

from __future__ import annotations

import datetime
import functools
import os
from typing import Iterator, Optional

import torch
import torch.distributed as dist

# Environment every rank process gets (set by the worker group before torch touches CUDA):
# NVLink SHARP / multicast off; they need fabric-manager support that is often missing and
# fail at the first collective otherwise.
RANK_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",  # a timed-out NCCL collective aborts instead of hanging
    "TOKENIZERS_PARALLELISM": "false",
}

_RUN_METHOD = "_verl_fsdp_run"


def init_process_group(rank: int, world_size: int, master_addr: str, master_port: int, timeout_s: float,
                       device: torch.device) -> str:
    """Join the group (TCP rendezvous at master_addr:master_port); every collective of this
    group, FSDP's included, fails after `timeout_s` instead of blocking forever."""
    # GPU: NCCL for CUDA tensors, gloo for the few CPU-side collectives (object broadcasts,
    # checkpoint coordination).
    backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    kwargs = {}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(backend, init_method=f"tcp://{master_addr}:{master_port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return backend


def decoder_layer_classes(model: torch.nn.Module) -> set[str]:
    """Class names Hugging Face marks as units not to split (`_no_split_modules`): the
    decoder layers (GPT2Block, Qwen2DecoderLayer, ...). Each becomes one FSDP unit."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or [])
    return names


def shard_model(model: torch.nn.Module, device: torch.device, param_dtype: Optional[torch.dtype] = None,
                reshard_after_forward: bool = True) -> torch.nn.Module:
    """fully_shard every decoder layer, then the whole model (root: embeddings, norms, heads).

    param_dtype: all-gather and compute in this dtype (bf16/fp16) while the sharded master
    weights stay in their own dtype (fp32 for trained models); gradients are reduced in fp32.
    None: no mixed precision (parameters are used as stored).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    mp = MixedPrecisionPolicy()
    if param_dtype is not None and any(p.dtype != param_dtype for p in model.parameters()):
        mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    kwargs = dict(mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    layer_names = decoder_layer_classes(model)
    layers = [m for m in model.modules() if type(m).__name__ in layer_names and m is not model]
    if not layers:
        raise ValueError(f"{type(model).__name__}: no decoder layers found to shard (looked for "
                         f"_no_split_modules classes {sorted(layer_names) or 'none declared'})")
    for layer in layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # sum over ranks (see module docstring)
            # Plain SUM collectives: gloo has no PREMUL_SUM, and NCCL's SUM is zero-copy.
            module.set_force_sum_reduction_for_comms(True)
    setattr(model, _RUN_METHOD, functools.partial(_run, model))
    register_fsdp_forward_method(model, _RUN_METHOD)
    return model


def _run(module, fn):  # bound to the model; FSDP wraps it with the root's forward hooks
    return fn()


def fsdp_forward(model: torch.nn.Module, fn, *args, **kwargs):
    """fn(*args, **kwargs) with the root FSDP unit gathered, as inside `model.forward`.

    The arguments travel in a closure, not through FSDP's input casting (which would turn
    every float tensor of a Batch, advantages included, into the compute dtype). Outputs
    that are views are cloned: FSDP attaches its pre-backward hook to each output tensor,
    and a hook on a view is lost by later in-place ops.
    """
    run = getattr(model, _RUN_METHOD, None)
    if run is None:
        return fn(*args, **kwargs)

    def call():
        out = fn(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(o.clone() if isinstance(o, torch.Tensor) and o._base is not None else o for o in out)
        return out.clone() if isinstance(out, torch.Tensor) and out._base is not None else out

    return run(call)


def broadcast_from_rank0(model: torch.nn.Module, device: torch.device) -> None:
    """Make every rank's (unsharded) parameters and buffers equal to rank 0's, so randomly
    initialised parts (a value head, LoRA A matrices) agree before sharding. The model moves
    to `device` first (NCCL broadcasts device tensors; fully_shard then keeps 1/N of it)."""
    model.to(device)
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t.data, src=0)


# ---------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------


def _options(**kw):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kw)


def full_state_dict(model: torch.nn.Module) -> dict:
    """{name: full CPU tensor} on rank 0, {} on the others (collective)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_options(full_state_dict=True, cpu_offload=True))


def load_full_state_dict(model: torch.nn.Module, state: dict) -> None:
    """Rank 0's full tensors into every rank's shards (collective; other ranks pass {})."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, state, options=_options(full_state_dict=True, broadcast_from_rank0=True))


def full_optimizer_state_dict(model: torch.nn.Module, optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=_options(full_state_dict=True, cpu_offload=True))


def load_full_optimizer_state_dict(model: torch.nn.Module, optimizer, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state,
                             options=_options(full_state_dict=True, broadcast_from_rank0=True))


def save_sharded(path: str, model: torch.nn.Module, optimizer=None) -> None:
    """Every rank writes its own shards of the model (and optimizer) into `path`
    (torch.distributed.checkpoint: `__<rank>_0.distcp` files + `.metadata`). On several
    nodes `path` must be on a filesystem all of them see."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, get_model_state_dict

    if optimizer is None:
        state = {"model": get_model_state_dict(model)}
    else:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
    dcp.save(state, checkpoint_id=path)


def load_sharded(path: str, model: torch.nn.Module, optimizer=None) -> None:
    """Read the shards written by `save_sharded` (resharding if the world size changed)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict, set_state_dict

    if optimizer is None:
        state = {"model": get_model_state_dict(model)}
        dcp.load(state, checkpoint_id=path)
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(model, state["model"])
        return
    model_sd, optim_sd = get_state_dict(model, optimizer)  # initialises empty optimizer state
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def full_weights(model: torch.nn.Module, dtype: Optional[torch.dtype] = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(Hugging Face name, full tensor) for each weight, gathered one at a time from the
    shards (a collective per tensor: every rank must iterate to the end). Tied weights once,
    LoRA merged (verl.rollout.hf_weights.hf_named_weights names)."""
    from torch.distributed.tensor import DTensor

    from verl.rollout.hf_weights import hf_named_weights

    for name, tensor in hf_named_weights(model):
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        yield name, tensor if dtype is None else tensor.to(dtype)


def weight_buckets(model: torch.nn.Module, bucket_bytes: int, dtype: Optional[torch.dtype] = None,
                   ) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """`full_weights` grouped into buckets of about `bucket_bytes` (CPU tensors): what goes
    to a rollout replica per message, so neither side holds more than a bucket in flight."""
    bucket, size = [], 0
    for name, tensor in full_weights(model, dtype):
        t = tensor.detach().to("cpu", copy=True)
        bucket.append((name, t))
        size += t.numel() * t.element_size()
        if size >= bucket_bytes:
            yield bucket
            bucket, size = [], 0
    if bucket:
        yield bucket


def node_local_device() -> torch.device:
    """The rank's device: cuda:0 on a GPU bundle (Ray sets CUDA_VISIBLE_DEVICES to the
    rank's own GPU), else the CPU (VERL_RANK_DEVICE, set by the worker group)."""
    if os.environ.get("VERL_RANK_DEVICE", "cpu") == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("this rank was placed on a GPU bundle but torch sees no CUDA device "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
        return torch.device("cuda", 0)
    return torch.device("cpu")
