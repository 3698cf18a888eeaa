"""Ray plumbing: connect, reserve devices, spawn one actor per rank, call them all with a
deadline, and turn a dead or stuck rank into an error that says which, where and why.

    connect(dcfg)                                  ray.init for distributed.address
    pool = ResourcePool("train", n, use_gpu)       a placement group of n device bundles
    group = WorkerGroup("actor", ActorWorker, pool, share=1/3, timeout_s=600)
    group.call("update", batch_ref)               -> [rank 0 result, rank 1 result, ...]
    group.call("compute_log_probs", per_rank=[part0, part1])

Every call waits with a deadline (`distributed.timeout_s`). When a rank dies (killed,
out of memory, segfault) its pending call fails at once and `WorkerDiedError` names the
group, rank, node and pid and quotes the last lines the process wrote; when a call runs
past the deadline `WorkerTimeoutError` names the ranks that did not answer, with their last
lines. Either way the whole group is killed first: the surviving ranks would otherwise sit
in a collective waiting for the dead one.

Roles that share devices ("colocated": actor, reference, critic on the same GPUs) are
separate actors placed on the same bundle, each asking for a fraction of it.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from typing import Any, Optional, Sequence

from verl.distributed.fsdp import RANK_ENV
from verl.distributed.kill_hook import kill_worker_if_asked

LOG_TAIL_LINES = 20
# When a rank raises, how long the other ranks' calls are watched for a death that caused it
PEER_DEATH_WAIT_S = 10.0


class DistributedError(RuntimeError):
    """A distributed run cannot go on; the message says what failed and where."""


class WorkerDiedError(DistributedError):
    pass


class WorkerTimeoutError(DistributedError):
    pass


class WorkerRaisedError(DistributedError):
    pass


def _ray():
    try:
        import ray
    except ImportError as exc:
        from verl.install_hint import pip_extra

        raise ImportError(f"distributed.backend: ray needs Ray; install it with {pip_extra('ray')}") from exc
    return ray


def connect(dcfg, num_cpus: Optional[int] = None) -> bool:
    """Join a Ray cluster (distributed.address: auto | ray://... | host:port) or start a local
    one (address: local or unset). Returns True when this call started Ray (and so owns it)."""
    ray = _ray()
    if ray.is_initialized():
        return False
    address = dcfg.address
    if address in (None, "", "local"):
        kwargs = dict(include_dashboard=False, num_cpus=dcfg.num_cpus or num_cpus)
        if dcfg.object_store_mb:
            kwargs["object_store_memory"] = int(dcfg.object_store_mb) * 1024 * 1024
        ray.init(**kwargs)
    else:
        ray.init(address=address)
    return True


def repo_pythonpath() -> str:
    """The folder holding the `verl` package, so rank processes import the same code."""
    import verl

    return os.path.dirname(os.path.dirname(os.path.abspath(verl.__file__)))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def tail_lines(path: str, n: int = LOG_TAIL_LINES) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    # Ray writes ":job_id:...", ":actor_name:..." markers into worker logs: not the worker's words.
    return [ln for ln in lines if ln.strip() and not ln.startswith((":job_id:", ":actor_name:", ":task_name:"))][-n:]


class ResourcePool:
    """A placement group of `bundles` bundles, one per device (GPU + 1 CPU, or 1 CPU on a
    CPU-only cluster), packed onto as few nodes as possible. Rank i goes to `bundle(i)`:
    bundles sorted by node, so the ranks of one node are consecutive (tensor-parallel
    rollout replicas need their devices on one node)."""

    def __init__(self, name: str, bundles: int, use_gpu: bool, timeout_s: float):
        ray = _ray()
        from ray.util.placement_group import placement_group, placement_group_table

        self.name, self.size, self.use_gpu = name, bundles, use_gpu
        spec = {"CPU": 1.0, "GPU": 1.0} if use_gpu else {"CPU": 1.0}
        self.bundle_spec = spec
        try:
            self.pg = placement_group([dict(spec) for _ in range(bundles)], strategy="PACK", name=f"verl-{name}")
        except Exception as exc:  # Ray's own error type for a taken name varies between its versions
            if "already exists" not in str(exc):
                raise
            raise DistributedError(
                f"the placement group 'verl-{name}' exists: an earlier trainer in this process (or another driver "
                "on this Ray cluster) still holds its workers; call that trainer's close() first") from None
        try:
            ray.get(self.pg.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.util.remove_placement_group(self.pg)
            raise DistributedError(
                f"could not reserve {bundles} x {spec} for the '{name}' workers within {timeout_s:.0f} s; the cluster "
                f"has {ray.cluster_resources()} in total, {ray.available_resources()} free. Check "
                "distributed.nnodes x distributed.devices_per_node against the cluster (ray status)") from None
        nodes = placement_group_table(self.pg)["bundles_to_node_id"]
        self.order = sorted(range(bundles), key=lambda i: (nodes[i], i))

    def bundle(self, rank: int) -> int:
        return self.order[rank]

    def remove(self) -> None:
        ray = _ray()
        try:
            ray.util.remove_placement_group(self.pg)
        except Exception:  # noqa: BLE001 - already gone with the cluster
            pass


class WorkerGroup:
    """Actors of `worker_cls`, rank i on bundle `slots[i]` of the pool (default: one per
    bundle), each asking for `share` of its bundle. Spawning returns at once; `start()`
    waits for the processes and joins them into a process group."""

    def __init__(self, name: str, worker_cls, pool: ResourcePool, share: float, timeout_s: float,
                 env: Optional[dict] = None, process_group: bool = True, slots: Optional[list[int]] = None):
        ray = _ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.name, self.pool, self.timeout_s, self.process_group = name, pool, timeout_s, process_group
        slots = list(range(pool.size)) if slots is None else list(slots)
        self.world_size = len(slots)
        self.broken: Optional[str] = None
        self._submit_lock = threading.Lock()
        env_vars = dict(RANK_ENV)
        env_vars["VERL_RANK_DEVICE"] = "cuda" if pool.use_gpu else "cpu"
        env_vars["PYTHONPATH"] = os.pathsep.join(p for p in (repo_pythonpath(), os.environ.get("PYTHONPATH")) if p)
        env_vars.update(env or {})
        remote_cls = ray.remote(worker_cls)
        self.handles = []
        for rank, slot in enumerate(slots):
            opts = dict(
                num_cpus=pool.bundle_spec["CPU"] * share,
                num_gpus=pool.bundle_spec.get("GPU", 0.0) * share,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pool.pg, placement_group_bundle_index=pool.bundle(slot)),
                runtime_env={"env_vars": env_vars},
                max_restarts=0,
                name=f"verl-{name}-rank{rank}-{os.getpid()}-{id(self):x}",
            )
            self.handles.append(remote_cls.options(**opts).remote(rank, self.world_size, name))
        self.info: list[dict] = [{"rank": r, "node_ip": "?", "pid": "?", "logs": []} for r in range(self.world_size)]

    def start(self, timeout_s: Optional[float] = None) -> "WorkerGroup":
        """Wait (up to `timeout_s`, default the group's) for every rank to come up, then join
        them into one process group whose collectives time out after the group's timeout."""
        self.info = self.call("node_info", timeout_s=timeout_s)
        if self.process_group:
            addr, port = self.call_rank(0, "master_endpoint", timeout_s=timeout_s)
            if len({i["node_ip"] for i in self.info}) == 1:
                addr = "127.0.0.1"  # all ranks on one node: rendezvous (and gloo) over loopback
            self.call("init_process_group", addr, port, self.timeout_s, timeout_s=timeout_s)
        return self

    # ------------------------------------------------------------------ calls
    def call(self, method: str, *args, per_rank: Optional[Sequence[Any]] = None,
             timeout_s: Optional[float] = None, **kwargs) -> list:
        """Call `method` on every rank (with `per_rank[i]` as first argument when given) and
        wait for all; results in rank order."""
        return self.wait(self.submit(method, *args, per_rank=per_rank, **kwargs), method, timeout_s)

    def submit(self, method: str, *args, per_rank: Optional[Sequence[Any]] = None, **kwargs) -> list:
        """Start `method` on every rank without waiting (pair with `wait`)."""
        if self.broken:
            raise DistributedError(f"worker group '{self.name}' is unusable after an earlier failure: {self.broken}")
        refs = []
        # One call reaches every rank before the next one starts: with two driver threads (the
        # asynchronous rollout's producer syncing weights while the trainer computes log-probs), each
        # rank then runs the calls in the same order, so their collectives pair up (a rank running A
        # then B while another runs B then A would wait on each other until the timeout).
        with self._submit_lock:
            for rank, h in enumerate(self.handles):
                a = ((per_rank[rank],) + args) if per_rank is not None else args
                refs.append(getattr(h, method).remote(*a, **kwargs))
        kill_worker_if_asked(self.name, method, self.info)  # the chaos tests' fault injection; off by default
        return refs

    def call_rank(self, rank: int, method: str, *args, timeout_s: Optional[float] = None, **kwargs):
        with self._submit_lock:
            ref = getattr(self.handles[rank], method).remote(*args, **kwargs)
        return self.wait([ref], method, timeout_s, ranks=[rank])[0]

    def wait(self, refs: list, method: str, timeout_s: Optional[float] = None,
             ranks: Optional[list[int]] = None) -> list:
        """Results of `refs` (one per rank in `ranks`), failing fast on a dead or raising rank
        and after `timeout_s` (default: the group's) on a stuck one."""
        ray = _ray()
        ranks = list(range(len(refs))) if ranks is None else ranks
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        pending = {ref: i for i, ref in enumerate(refs)}
        results: list = [None] * len(refs)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                stuck = sorted(ranks[i] for i in pending.values())
                self.fail(WorkerTimeoutError, f"{self.name}.{method}: rank(s) {stuck} did not answer within "
                           f"{timeout:.0f} s (distributed.timeout_s)", stuck)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=min(left, 1.0))
            for ref in ready:
                i = pending.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self.fail(WorkerDiedError, f"{self.name}.{method}: rank {ranks[i]} died (killed, out of "
                               f"memory or crashed; Ray: {type(exc).__name__})", [ranks[i]])
                except ray.exceptions.RayTaskError as exc:
                    dead = self._dead_peer(pending, ranks, min(PEER_DEATH_WAIT_S, max(0.0, left)))
                    if dead is not None:  # the raise is the consequence (a collective lost its peer)
                        r, why = dead
                        self.fail(WorkerDiedError, f"{self.name}.{method}: rank {r} died (killed, out of memory or "
                                   f"crashed; {why}); rank {ranks[i]} then raised: {_first_line(exc)}", [r])
                    self.fail(WorkerRaisedError, f"{self.name}.{method}: rank {ranks[i]} raised "
                               f"{_remote_error(exc)}", [ranks[i]], show_logs=False)
        return results

    def _dead_peer(self, pending: dict, ranks: list[int], wait_s: float) -> Optional[tuple[int, str]]:
        """(rank, why) of a rank among `pending` that died, waiting up to `wait_s` for Ray to notice it;
        None when all of them are alive (or answered) by then. When one rank raises because its peer in
        a collective went away ("Connection reset by peer"), the death is what the message must name."""
        ray = _ray()
        deadline = time.monotonic() + wait_s
        waiting = dict(pending)
        while waiting and time.monotonic() < deadline:
            ready, _ = ray.wait(list(waiting), num_returns=1, timeout=max(0.05, deadline - time.monotonic()))
            for ref in ready:
                j = waiting.pop(ref)
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    return ranks[j], f"Ray: {type(exc).__name__}"
                except Exception:  # noqa: BLE001 - another rank raising too: not a death
                    pass
        return None

    def fail(self, kind, message: str, ranks: list[int], show_logs: bool = True):
        """Kill the group and raise `kind`. The first line is the whole story for a console (what failed,
        where: node, pid and log of each rank named); the lines after it quote the ranks' last log lines."""
        where = []
        for r in ranks:
            info = self.info[r] if r < len(self.info) else {}
            logs = info.get("logs") or []
            where.append(f"{self.name} rank {r}: node {info.get('node_ip', '?')}, pid {info.get('pid', '?')}"
                         + (f", log {logs[0]}" if logs else ""))
        parts = [f"{message} [{'; '.join(where)}]" if where else message]
        for r in ranks:
            info = self.info[r] if r < len(self.info) else {}
            if show_logs:
                lines = self._log_tail(r)
                if lines:
                    parts.append(f"  last lines of its log ({', '.join(info.get('logs', []))}):")
                    parts += [f"    | {ln}" for ln in lines]
                else:
                    parts.append(f"  (its log {info.get('logs') or '?'} is not readable from this node)")
        parts.append(f"  the '{self.name}' worker group was shut down; resume from the last full checkpoint")
        self.broken = message
        self.kill()
        raise kind("\n".join(parts))

    def _log_tail(self, rank: int) -> list[str]:
        info = self.info[rank] if rank < len(self.info) else {}
        lines = []
        for path in info.get("logs", []):
            lines += tail_lines(path)
        if lines or not info.get("actor_id"):
            return lines[-LOG_TAIL_LINES:]
        try:  # another node: Ray's log API (needs the dashboard, on by default with `ray start`)
            from ray.util.state import get_log

            return [ln for ln in "".join(get_log(actor_id=info["actor_id"], tail=LOG_TAIL_LINES,
                                                 timeout=10)).splitlines() if ln.strip()]
        except Exception:  # noqa: BLE001 - no dashboard: say where the file is instead
            return []

    def kill(self) -> None:
        ray = _ray()
        for h in self.handles:
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _remote_error(exc) -> str:
    """The remote exception's last traceback frames and message, without colour codes."""
    text = [ln for ln in _ANSI.sub("", str(exc)).strip().splitlines() if ln.strip(" ^~")]
    return "\n" + "\n".join("    " + ln for ln in text[-25:])
