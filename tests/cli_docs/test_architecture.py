"""The package structure docs/architecture.md describes: no import cycle between packages, and
the config's rules in one place.

Packages are verl's subpackages (verl.config, verl.trainer, ...) and its top-level modules
(verl.batch, verl.errors, ...). An edge A -> B is an `import` of B anywhere in A (module level or
inside a function; `if TYPE_CHECKING:` imports are hints only and do not count), or a
"verl.b.module:NAME" string in A: a registry entry (rollout engines, backends, config choices)
that A imports by name at run time.
"""

from __future__ import annotations

import ast
import os
import re
from collections import defaultdict

import verl

ROOT = os.path.dirname(verl.__file__)
REF = re.compile(r"verl(\.\w+)+:\w+")


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def _type_checking_nodes(tree) -> set:
    hidden = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden |= {id(n) for n in ast.walk(node)}
    return hidden


def package_edges() -> dict:
    """{(A, B): ["file:line", ...]} for every cross-package dependency."""
    edges = defaultdict(list)
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, os.path.dirname(ROOT))
            module = rel[:-3].replace(os.sep, ".").removesuffix(".__init__")
            src = _package(module)
            tree = ast.parse(open(path, encoding="utf-8").read())
            hidden = _type_checking_nodes(tree)
            for node in ast.walk(tree):
                if id(node) in hidden:
                    continue
                targets = []
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names if node.module == "verl"]
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and REF.fullmatch(node.value):
                    targets = [node.value.split(":")[0]]
                for target in targets:
                    if target.startswith("verl.") and _package(target) not in (src, "verl"):
                        edges[(src, _package(target))].append(f"{rel}:{node.lineno}")
    return edges


def find_cycle(edges) -> list:
    """One cycle of packages (a list), or [] when the graph has none."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    state, stack = {}, []

    def visit(v):
        state[v] = "open"
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == "open":
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[v] = "done"
        return []

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return []


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({("a", "b"): [], ("b", "c"): [], ("c", "a"): []}) == ["a", "b", "c", "a"]
    assert find_cycle({("a", "b"): [], ("b", "c"): [], ("a", "c"): []}) == []


def test_no_import_cycle_between_packages():
    edges = package_edges()
    assert ("verl.trainer", "verl.config") in edges  # the scan sees imports at all
    assert ("verl.backends", "verl.distributed") in edges  # and registry strings
    cycle = find_cycle(edges)
    where = [f"{a} -> {b}: {', '.join(edges[(a, b)][:3])}" for a, b in zip(cycle, cycle[1:])]
    assert not cycle, "import cycle between packages:\n" + "\n".join(where)


def test_lower_layers_do_not_reach_up():
    """The algorithm math, the config, the run-state files, real verl's key translation and the agents' tools
    know nothing of the trainer or the workers (they are handed the objects they act on); the config
    reads only the registries' names (BACKENDS for distributed.backend)."""
    edges = package_edges()
    for low in ("verl.algorithms", "verl.config", "verl.checkpoint", "verl.rewards", "verl.models", "verl.compat",
                "verl.agents"):
        for high in ("verl.trainer", "verl.workers", "verl.distributed", "verl.backends", "verl.cli"):
            if (low, high) == ("verl.config", "verl.backends"):
                assert all(w.startswith("verl/config/distributed.py:") for w in edges[(low, high)])  # its choices
                continue
            assert (low, high) not in edges, f"{low} imports {high}: {edges[(low, high)][:3]}"


def test_config_error_raised_only_where_a_key_can_be_blamed_at_load_time():
    """Checks of a single key's value live on its section; the modules that still raise
    ConfigError are those that read files, import user code, translate real verl's keys or
    check what only exists at load time (a model folder, an environment variable, a GPU); agents
    loads the user's tools and environments (agent_parts.py builds them from the config), multi_turn.py runs the environment's reset() (one that
    raises for every trajectory is rollout.environment's fault), backends.py reaches wandb's server;
    teacher.py compares the distillation teacher's tokenizer with the student's, fp8_vllm.py reads the model
    folder's layers (what rollout.quantization: fp8 can hold), lora_adapter.py reads a saved adapter's
    adapter_config.json, engine_routing.py refuses an engine start that cannot record what rollout.routing_replay:
    engine needs; tools and interactions read real verl's tool and interaction YAML files and import the
    classes they name, and user_class.py / custom_dataset.py / custom_sampler.py a user's dataset and sampler."""
    allowed = {"config", "compat", "agents", "tools", "interactions", "api.py", "inputs.py", "callables.py",
               "python_fn.py", "api.py", "resume.py",
               "run_folder.py", "run_lock.py", "loading.py", "tiny.py", "lora.py", "rollout.py", "factory.py",
               "multi_turn.py", "agent_parts.py", "backends.py", "teacher.py", "fp8_vllm.py", "lora_adapter.py",
               "user_class.py", "custom_dataset.py", "custom_sampler.py", "engine_routing.py"}
    offenders = []
    for folder, _, files in os.walk(ROOT):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or "raise ConfigError" not in open(path, encoding="utf-8").read():
                continue
            rel = os.path.relpath(path, ROOT)
            if rel.split(os.sep)[0] not in allowed and name not in allowed:
                offenders.append(rel)
    assert not offenders, offenders


def trainer_attribute_writes(tree) -> list[int]:
    """Lines of `tree` that assign an attribute of a Trainer (`x.name = ...`, augmented, annotated or in a
    tuple target, an item of it: `x.name[k] = ...`; `del x.name` too), where x is a name called `trainer`,
    a name the module binds to `Trainer(...)` / `create_trainer(...)`, or an attribute called `trainer` /
    `_trainer` (self.trainer). An attribute of one of its parts (`trainer.rollout.x = ...`) is that
    part's, not the Trainer's."""
    bound = {"trainer"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = node.value.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if name in ("Trainer", "create_trainer"):
                bound |= {t.id for t in node.targets if isinstance(t, ast.Name)}

    def is_trainer(value) -> bool:
        return ((isinstance(value, ast.Name) and value.id in bound)
                or (isinstance(value, ast.Attribute) and value.attr in ("trainer", "_trainer")))

    def targets(node):
        if isinstance(node, ast.Assign):
            return node.targets
        if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            return [node.target]
        if isinstance(node, ast.Delete):
            return node.targets
        return []

    lines = []
    for node in ast.walk(tree):
        for target in targets(node):
            for t in ast.walk(target):  # tuple targets: (trainer.a, b) = ...
                if not isinstance(getattr(t, "ctx", None), (ast.Store, ast.Del)):
                    continue
                while isinstance(t, ast.Subscript):  # trainer.parts["rollout"] = ...: written into the attribute
                    t = t.value
                if isinstance(t, ast.Attribute) and is_trainer(t.value):
                    lines.append(t.lineno)
    return lines


def test_the_trainer_write_finder_finds_writes():
    def found(src):
        return trainer_attribute_writes(ast.parse(src))

    assert found("def f(trainer):\n    trainer.rollout = engine\n") == [2]
    assert found("t = create_trainer(cfg)\nt._parts['rollout'] = m\nt.global_step += 1\n") == [2, 3]
    assert found("x = verl.Trainer(cfg)\nx.rollout, y = a, b\n") == [2]
    assert found("class S:\n    def f(self):\n        self.trainer.hooks = None\n        del self._trainer.x\n") == [3, 4]
    # reading the Trainer, or writing an attribute of one of its parts, is not a write to the Trainer
    assert found("def f(trainer):\n    engine = trainer.rollout\n    trainer.rollout.sync_weights = g\n") == []


def _lines_found(finder, skip_folder: str = "") -> list[str]:
    """'path:line' of every line `finder(tree)` reports in the package's modules (outside `skip_folder`)."""
    found = []
    for folder, _, files in os.walk(ROOT):
        if skip_folder and os.path.relpath(folder, ROOT).split(os.sep)[0] == skip_folder:
            continue
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                tree = ast.parse(open(path, encoding="utf-8").read())
                found += [f"{os.path.relpath(path, ROOT)}:{line}" for line in finder(tree)]
    return found


def test_only_the_trainer_package_writes_attributes_of_a_trainer():
    """The Trainer's parts are handed what they act on (the experience sources a RolloutStage and the
    engine lock, the Validator its engine and reward): no module outside verl/trainer sets an
    attribute of a Trainer (as `trainer.rollout = ...` did from the experience sources)."""
    offenders = _lines_found(trainer_attribute_writes, skip_folder="trainer")
    assert not offenders, "modules outside verl/trainer assign attributes of a Trainer: " + ", ".join(offenders)


def held_trainers(tree) -> list[int]:
    """Lines where an object keeps a Trainer: `self.trainer` / `self._trainer` read or written, or a
    parameter called `trainer` or `_trainer` (an object built from a Trainer rather than its parts)."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                and node.attr in ("trainer", "_trainer")):
            lines.append(node.lineno)
        elif isinstance(node, ast.arg) and node.arg in ("trainer", "_trainer"):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_the_held_trainer_finder_finds_them():
    assert held_trainers(ast.parse("class R:\n    def __init__(self, trainer):\n        self.trainer = trainer\n")) == [2, 3]
    assert held_trainers(ast.parse("class R:\n    def f(self):\n        return self._trainer.x\n")) == [3]
    assert held_trainers(ast.parse("def f(counters, saver):\n    return counters.global_step\n")) == []


def test_no_part_of_the_library_holds_the_trainer():
    """The Run (verl/trainer/run.py) and every other part are built from explicit parts: nothing in verl/
    keeps a Trainer (RunLifecycle once held the whole Trainer and read 16 of its attributes), and the
    Run's module does not import the Trainer's."""
    offenders = _lines_found(held_trainers)
    assert not offenders, "modules that keep a Trainer: " + ", ".join(offenders)
    run_src = open(os.path.join(ROOT, "trainer", "run.py"), encoding="utf-8").read()
    assert "verl.trainer.trainer" not in run_src and "import Trainer" not in run_src
