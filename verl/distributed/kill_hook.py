"""TEST-ONLY fault injection for the chaos tests (tests/reliability/test_chaos.py): kill one rank's process
while a call to its group is in flight, as an out-of-memory kill or a crash would.

    VERL_TEST_KILL_WORKER=<group>.<method>:<rank>:<n>   e.g. actor.update:1:2, rollout.generate:0:2

The n-th time (1-based) the driver submits `<method>` to worker group `<group>`, right after the
call went out to every rank, rank `<rank>`'s process gets SIGKILL. Unset (always, outside the
chaos tests) it does nothing. The process-wide sibling for the driver itself is
verl.checkpoint.durable_files.test_kill_point.
"""

from __future__ import annotations

import os
import signal
import sys

_HITS: dict = {}  # "<group>.<method>" -> times submitted in this process


def kill_worker_if_asked(group: str, method: str, info: list[dict]) -> None:
    """`info`: the group's per-rank dicts (pid, node_ip) from WorkerGroup.start()."""
    spec = os.environ.get("VERL_TEST_KILL_WORKER")
    if not spec:
        return
    target, rank, nth = spec.rsplit(":", 2)
    name = f"{group}.{method}"
    if target != name:
        return
    _HITS[name] = _HITS.get(name, 0) + 1
    if _HITS[name] != int(nth):
        return
    pid = info[int(rank)]["pid"]
    print(f"[chaos] SIGKILL to {group} rank {rank} (pid {pid}) during {name} call {nth}", file=sys.stderr, flush=True)
    os.kill(int(pid), signal.SIGKILL)
