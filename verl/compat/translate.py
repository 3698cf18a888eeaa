"""Apply `verl.compat.real_verl.TABLE` to a real verl `main_ppo` command line.

    tr = translate(["data.train_files=gsm8k/train.parquet", "actor_rollout_ref.model.path=tiny:gpt2", ...])
    tr.overrides     # ["data.train_files=[\"gsm8k/train.parquet\"]", "model.name=\"tiny:gpt2\"", ...]
    tr.notes         # one line per ignored key and per value derived here (steps, reward, micro-batch)
    config = load_translated(tr)   # our Config; an error names the real key that set the bad value

Arguments are Hydra-style `key=value` (`+key=value` and `++key=value` too); values are read as
YAML, plus Hydra's bare floats (`1e-6`) and simple `${other.key}` interpolation. Keys of our own
config (model.*, rollout.*, training.*, ...; and keys of our data/algorithm/critic sections that
real verl does not have) pass through unchanged. Every real verl key the user did not give takes
real verl's default from the table, except where the table says otherwise, so a quickstart line
trains what it trains there. Precedence for each of our keys: our own key > a real key given >
a real verl default; two given keys that disagree are refused.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

from verl.compat.hydra_args import dump_value, parse_args, parse_value, shown
from verl.compat.real_engines import layout_note
from verl.compat.real_defaults import at_real_default, is_real_default, real_defaults
from verl.compat.real_keys import ARR, MANUAL, NO_DEFAULT, RealKey, as_int, largest_divisor_at_most, same_value, steps_from_epochs
from verl.compat.real_verl import REAL_SECTIONS, TABLE, lookup
from verl.config import Config
from verl.errors import ConfigError

# Our sections that real verl's config also has: a key there is read as real verl's first.
SHARED_SECTIONS = ("data", "algorithm", "critic")
_INTERP = re.compile(r"\$\{([^}]*)\}")
DEFAULT, FILE, GIVEN, NATIVE = 0, 1, 2, 3  # precedence of a value's source (FILE: --config-name's YAML)
ACTOR_MICRO = f"{ARR}.actor.ppo_micro_batch_size_per_gpu"


@dataclass
class Translation:
    overrides: list[str]  # our `key=value` overrides (JSON values), as `verl train` takes them
    values: dict[str, Any]  # our key -> value
    sources: dict[str, str]  # our key -> what set it: "real.key=value", our own "key=value", or a derived default
    notes: list[str] = field(default_factory=list)
    # why a memory refusal matters for this command line (real verl's context parallelism would have split
    # the sequences): main_ppo puts them before the preflight's refusal line
    memory_reasons: list[str] = field(default_factory=list)


def _native_leaf(key: str) -> bool:
    """Is `key` a leaf of our Config (e.g. data.answer_key)?"""
    cls: Any = Config
    for part in key.split("."):
        if not dataclasses.is_dataclass(cls):
            return False
        names = {f.name for f in dataclasses.fields(cls)}
        if part not in names:
            return False
        cls = typing.get_type_hints(cls)[part]
        args = [a for a in typing.get_args(cls) if a is not type(None)]
        if args and typing.get_origin(cls) is typing.Union:
            cls = args[0]
    return not dataclasses.is_dataclass(cls)


def _close_key(key: str) -> Optional[str]:
    """A table key that is close in spelling and meaning: the same parent path, and a last part
    that differs by a typo (difflib ratio >= 0.8, e.g. ppo_mini_batch_sise -> ppo_mini_batch_size)."""
    parent, _, leaf = key.rpartition(".")
    siblings = {k.rpartition(".")[2]: k for k in TABLE if k.rpartition(".")[0] == parent and not k.endswith(".*")}
    close = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.8)
    return siblings[close[0]] if close else None


def _unsupported(key: str) -> ConfigError:
    close = _close_key(key)
    hint = f"; did you mean '{close}'?" if close else ""
    # real_verl_defaults.yaml lists every key of real verl 0.9's ppo_trainer config outside the table
    if key in real_defaults() or any(k.startswith(key + ".") for k in real_defaults()):
        why = "it has no equivalent here"
    else:
        why = "it has no equivalent here, and real verl 0.9's ppo_trainer config has no such key either"
    return ConfigError(f"real verl's {key} is not supported: {why}{hint} ({MANUAL} lists the keys that map)")


def _dict_owner(key: str) -> Optional[str]:
    """The dict-valued table key above `key` (`custom_reward_function.reward_kwargs` for `...reward_kwargs.a`)."""
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        owner = ".".join(parts[:cut])
        if owner in TABLE and TABLE[owner].dict_value:
            return owner
    return None


def _fold(target: dict, owner: str, key: str, value: Any) -> None:
    """`owner.a.b=v` into target[owner] = {a: {b: v}}."""
    node = target.setdefault(owner, {})
    if not isinstance(node, dict):
        node = target[owner] = {}
    *path, leaf = key[len(owner) + 1:].split(".")
    for part in path:
        node = node.setdefault(part, {})
    node[leaf] = value


# ---------------------------------------------------------------------------
# Context the converters read
# ---------------------------------------------------------------------------


class Context:
    """Effective real verl values (given > read back from our own keys > real defaults), and the
    derived quantities converters need: devices and the run's total step count."""

    def __init__(self, values: dict, given: set, native: dict):
        self.values, self.given_keys, self.native = values, given, native
        self.ours: dict[str, tuple[Any, str, int]] = {}  # filled by phase 1, read by phase 2
        self._steps: Optional[int] = None
        self._prompts: Optional[int] = None
        self._train_rows = None
        self._tokenizer = None
        self.notes: list[str] = []  # lines a converter adds about what it decided (printed with the others)
        self.layout: dict[str, int] = {}  # Megatron parallel sizes given (one note: real_engines.layout_note)
        self.memory_reasons: list[str] = []  # Translation.memory_reasons

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def given(self, key: str) -> bool:
        return key in self.given_keys

    def our(self, key: str, default: Any = None) -> Any:
        if key in self.native:
            return self.native[key]
        return self.ours[key][0] if key in self.ours else default

    def world_size(self) -> int:
        """Devices of the run: trainer.nnodes x n_gpus_per_node (or our distributed keys), 1 by default."""
        if self.native.get("distributed.backend", "ray") != "ray":
            return 1
        nnodes = self.get("trainer.nnodes") or self.native.get("distributed.nnodes") or 1
        per_node = self.get("trainer.n_gpus_per_node") or self.native.get("distributed.devices_per_node") or 1
        return int(nnodes) * int(per_node)

    def train_rows(self):
        if self._train_rows is None:
            files = self.our("data.train_files")
            if not files:
                raise ConfigError("data.train_files: required (real verl's default ~/data/rlhf/gsm8k/train.parquet "
                                  "is not assumed); give the training parquet/jsonl file(s)")
            self._train_rows = self.read_rows(files)
        return self._train_rows

    def read_rows(self, files) -> list:
        """The rows of `files`: as the files hold them, or as data.dataset_class (real verl's data.custom_cls)
        reads them, with the model's tokenizer (its errors name the key the class came from)."""
        files = files if isinstance(files, list) else [files]
        if not self.our("data.dataset_class"):
            from verl.data.sources import read_many

            return read_many(files, self.our("data.prompt_key", "prompt"), self.our("data.answer_key", "answer"))
        from verl.data.custom_dataset import dataset_rows

        key = "data.custom_cls.path" if self.given("data.custom_cls.path") else "data.dataset_class"
        return dataset_rows(self.data_config(), files, self.tokenizer(), key, seed=self.our("seed"),
                            batch_size=self.our("training.batch_size"),
                            max_response_length=self.our("rollout.max_new_tokens"))

    def data_config(self):
        """Our data section from the keys translated so far."""
        from verl.config import DataConfig, build_section

        data_keys = {k.split(".", 1)[1]: self.our(k) for k in (*self.native, *self.ours) if k.startswith("data.")}
        return build_section(DataConfig, data_keys, "data")

    def tokenizer(self):
        if self._tokenizer is None:
            from verl.models.loading import load_tokenizer

            name = self.our("model.tokenizer") or self.our("model.name")
            self._tokenizer = load_tokenizer(name, "model.tokenizer" if self.our("model.tokenizer") else "model.name",
                                             bool(self.our("model.trust_remote_code", False)))
        return self._tokenizer

    def num_train_prompts(self) -> int:
        """Prompts a real verl epoch visits: all rows, or those that fit with filter_overlong_prompts."""
        if self._prompts is None:
            self._prompts = self._count_prompts()
        return self._prompts

    def _count_prompts(self) -> int:
        rows = self.train_rows()
        if self.our("data.truncation") != "filter":
            return len(rows)
        from verl.data.prompts import PromptLoader

        return len(PromptLoader(rows, self.tokenizer(), self.data_config(), batch_size=1, name="train"))

    def total_steps(self) -> int:
        if self._steps is None:
            if "training.total_steps" in self.native:
                self._steps = int(self.native["training.total_steps"])
            elif self.get("trainer.total_training_steps") is not None:
                self._steps = as_int(self.get("trainer.total_training_steps"), "trainer.total_training_steps", low=1)
            else:
                prompts = self.num_train_prompts()
                batch = int(self.our("training.batch_size"))
                epochs = int(self.get("trainer.total_epochs"))
                self._steps = steps_from_epochs(prompts, batch, epochs)
                if self._steps < 1:
                    raise ConfigError(f"data.train_batch_size: {batch} prompts per step, but data.train_files hold "
                                      f"{prompts} usable prompts: no full batch, so no step would run; lower it or "
                                      f"set trainer.total_training_steps")
        return self._steps


# ---------------------------------------------------------------------------
# Translation
# ---------------------------------------------------------------------------


def _resolve(values: dict) -> None:
    """Resolve `${other.key}` in string values (real verl's own default_local_dir uses it)."""
    def lookup_ref(ref: str, key: str, depth: int) -> Any:
        if ref.startswith(("oc.select:", "oc.env:")):  # ${oc.select:other.key,default}, ${oc.env:VAR,default}
            kind, _, rest = ref.partition(":")
            name, _, fallback = rest.partition(",")
            name = name.strip()
            if kind == "oc.env":
                return os.environ.get(name, parse_value(fallback.strip()) if fallback else None)
            found = resolve(values[name], name, depth + 1) if name in values else None
            return found if found is not None else (parse_value(fallback.strip()) if fallback else None)
        if ref.startswith("oc.") or ":" in ref:
            raise ConfigError(f"{key}: resolver '${{{ref}}}' is not supported here; give the value itself")
        if ref.startswith("."):  # relative: '.x' is a sibling of the key, '..x' one level up
            dots = len(ref) - len(ref.lstrip("."))
            parent = key.split(".")[:-dots]
            ref = ".".join(parent + [ref[dots:]]) if ref[dots:] else ".".join(parent)
        if ref not in values:
            below = {k[len(ref) + 1:]: v for k, v in values.items() if k.startswith(ref + ".")}
            if below:  # a whole section: its keys as a dict
                return {k: resolve(v, f"{ref}.{k}", depth + 1) for k, v in below.items()}
            raise ConfigError(f"{key}: '${{{ref}}}' names no key that is set")
        return resolve(values[ref], ref, depth + 1)

    def resolve(value: Any, key: str, depth: int = 0) -> Any:
        if not isinstance(value, str) or "${" not in value:
            return value
        if depth > 10:
            raise ConfigError(f"{key}: interpolation refers to itself")
        whole = _INTERP.fullmatch(value)
        if whole:
            return lookup_ref(whole.group(1), key, depth)
        return _INTERP.sub(lambda m: str(lookup_ref(m.group(1), key, depth)), value)

    for key in list(values):
        values[key] = resolve(values[key], key)


def _put(ours: dict, our_key: str, value: Any, source: str, rank: int) -> None:
    if our_key in ours:
        old_value, old_source, old_rank = ours[our_key]
        # two given keys (or two keys of the config file) that disagree; the command line beats the file
        if min(rank, old_rank) >= FILE and (rank >= GIVEN) == (old_rank >= GIVEN) and not same_value(old_value, value):
            raise ConfigError(f"{source} and {old_source} both set {our_key} here ({shown(value)} vs "
                              f"{shown(old_value)}); keep one")
        if rank <= old_rank:
            return
    ours[our_key] = (value, source, rank)


def _apply(ctx: Context, items: list, phase: int, notes: list) -> None:
    for key, entry, value, rank in items:
        if entry.phase != phase:
            continue
        if entry.ignored:
            if rank == GIVEN:  # a config file's ignored keys are counted in one note instead
                notes.append(f"ignored {key}={shown(value)}: {entry.note}")
            continue
        source = {GIVEN: f"{key}={shown(value)}", FILE: f"{ctx.file_where}: {key}={shown(value)}"}.get(
            rank, f"real verl's default {key}={shown(value)}")
        try:
            converted = entry.convert(value, ctx, key)
        except ConfigError as exc:
            if rank == GIVEN or key not in str(exc):
                raise
            why = f"set in {ctx.file_where}" if rank == FILE else "is real verl's default: give it"
            raise ConfigError(f"{exc} [{key}={shown(value)} {why}]") from None
        for our_key, our_value in converted.items():
            if rank == DEFAULT and our_key.startswith("algorithm.") and "algorithm.name" in ctx.native:
                continue  # our algorithm.name preset fills what real verl's defaults would
            _put(ctx.ours, our_key, our_value, source, rank)


def _pick_reward(ctx: Context, val_rows: list, notes: list) -> dict:
    """Real verl scores each row by its data_source (default_compute_score): `by_data_source`
    (verl.rewards.by_data_source, real verl's scorers re-implemented exactly), or the one scorer's
    own reward type when every row uses the same one and it is a type (math_dapo, geo3k)."""
    from verl.rewards.by_data_source import KNOWN, reward_type_for, scorer_for

    sources: dict[str, str] = {}  # data_source -> the first row naming it
    for row in list(ctx.train_rows()) + list(val_rows):
        if scorer_for(row.data_source) is None:
            raise ConfigError(f"data_source '{row.data_source}' ({row.origin}): real verl's default reward for it is "
                              f"not built in here (built in: {KNOWN}); give custom_reward_function.path=FILE.py "
                              f"(its compute_score) or reward_fn.type (docs/rewards.md)")
        sources.setdefault(row.data_source, row.origin)
    reward_type = reward_type_for(sources)
    scorers = ", ".join(dict.fromkeys(scorer_for(s) for s in sources))
    notes.append(f"reward: {reward_type} (real verl's {scorers} rule{'s' if ',' in scorers else ''}, exactly) for "
                 f"data_source {', '.join(sources)}, as real verl's default_compute_score"
                 + ("; reward/<data_source>/mean per source" if len(sources) > 1 else ""))
    return {"reward_fn.type": reward_type, "reward_fn.format_score": 0.0}


def _classify(pairs, given: dict, native: Optional[dict], matched: list, unknown: Optional[list],
              at_default: list, where: str = "") -> None:
    """Sort (key, value) pairs into real keys of the table (`given`), keys under a group row
    (`matched`) and our own keys (`native`); a real key outside the table is accepted at real verl's
    default (`at_default`), refused at another value, and otherwise refused, or (a config file's:
    `unknown` is a list) collected."""
    for key, value in pairs:
        section = key.split(".")[0]
        owner = _dict_owner(key) if section in REAL_SECTIONS else None
        if owner is not None:
            _fold(given, owner, key, value)
            continue
        found = lookup(key) if section in REAL_SECTIONS else None
        if found is not None:
            table_key, entry = found
            if table_key == key:
                given[key] = value
            else:
                matched.append((key, entry, value))
        elif native is not None and (section not in REAL_SECTIONS or (section in SHARED_SECTIONS
                                                                      and _native_leaf(key))):
            native[key] = value
        elif at_real_default(key, value, where):
            at_default.append((key, value))
        elif unknown is not None:
            unknown.append(key)
        else:
            raise _unsupported(key)


def translate(argv: list[str]) -> Translation:
    from verl.compat.config_file import PACKAGED, read_config, split_options

    config_path, config_name, argv = split_options(argv)
    file_values, file_where = read_config(config_path, config_name)
    pairs = parse_args(argv)
    given: dict[str, Any] = {}
    native: dict[str, Any] = {}
    matched: list[tuple[str, RealKey, Any]] = []  # given keys covered by a group or _target_
    at_default: list = []  # given keys outside the table at real verl's default
    _classify(pairs, given, native, matched, None, at_default)
    in_file: dict[str, Any] = {}  # the config file's keys of the table, under the command line's
    file_matched: list = []
    unknown: list[str] = []
    # a file's null is "not set" (real verl's generated config writes null for every unset key), and so is a
    # value equal to real verl's default where the table deliberately uses another (one device, the actor's
    # model for the critic, ...): a config file holding real verl's defaults trains as the command line would
    file_defaults: list = []
    _classify([(k, v) for k, v in file_values.items() if k not in given and v is not None
               and not is_real_default(k, v)], in_file, None, file_matched, unknown, file_defaults,
              f" (in {file_where})")
    file_matched = [m for m in file_matched if not m[1].ignored and m[0] not in {k for k, _, _ in matched}]

    values = {k: e.default for k, e in TABLE.items() if e.default is not NO_DEFAULT}
    for real_key, entry in TABLE.items():  # our own key read back into the real key that sets it unchanged
        if entry.identity and entry.identity in native and real_key not in given:
            values[real_key] = native[entry.identity]
    values.update(file_values)  # every key of the file, so that its own ${...} references resolve
    values.update(in_file)
    values.update(given)
    _resolve(values)
    for key in file_values:  # only the file's keys of the table stay (its null ones do not: "not set")
        if key not in in_file and key not in given:
            if key in TABLE and TABLE[key].default is not NO_DEFAULT:
                values[key] = TABLE[key].default
            else:
                values.pop(key, None)
    # given: typed, in the config file, or under a group row of the table (megatron.override_transformer_config.*)
    ctx = Context(values, set(given) | set(in_file) | {k for k, _, _ in matched + file_matched}, native)
    ctx.file_where, ctx.command_line = file_where, set(given)  # keys typed, over those of the config file
    for our_key, value in native.items():
        _put(ctx.ours, our_key, value, f"{our_key}={shown(value)}", NATIVE)

    items = [(k, e, values[k], GIVEN if k in given else FILE if k in in_file else DEFAULT)
             for k, e in TABLE.items() if not k.endswith(".*") and k in values]
    items += [(k, e, v, GIVEN) for k, e, v in matched] + [(k, e, v, FILE) for k, e, v in file_matched]
    notes: list[str] = [f"ignored {k}={shown(v)}: real verl's default, which changes nothing" for k, v in at_default]
    if file_where and file_where not in PACKAGED:  # real verl's packaged configs: the model_engine note says it
        notes.append(f"read {file_where}: {len(in_file) + len(file_matched)} keys of the table, {len(file_defaults)} "
                     f"more at (or derived like) real verl's defaults" + (
                         f"; ignored {len(unknown)} keys that real verl 0.9's config does not have: "
                         f"{', '.join(unknown)}" if unknown else ""))
    _apply(ctx, items, 1, notes)
    if ctx.our("model.name") is None:
        raise ConfigError(f"{ARR}.model.path: required (the actor's model: hub name, local folder or tiny:<arch>)")
    ctx.train_rows()  # required, and read before any model loads: a bad row fails in a second
    _apply(ctx, items, 2, notes)
    notes += ctx.notes + layout_note(ctx)
    steps = ctx.total_steps()
    if ctx.get("trainer.total_training_steps") is None and "training.total_steps" not in native:
        notes.append(f"training.total_steps={steps}: trainer.total_epochs={ctx.get('trainer.total_epochs')} x "
                     f"({ctx.num_train_prompts()} prompts // {ctx.our('training.batch_size')} per step)")

    if "training.micro_batch_size" not in ctx.ours:  # real verl requires one; micro-batching keeps results
        per_rank = max(1, int(ctx.our("training.mini_batch_size")) // ctx.world_size())
        micro = largest_divisor_at_most(per_rank, 4)
        _put(ctx.ours, "training.micro_batch_size", micro, "the micro-batch default", DEFAULT)
        notes.append(f"training.micro_batch_size={micro}: {ACTOR_MICRO} not given")

    val_rows = []
    if ctx.our("data.val_files"):
        val_rows = ctx.read_rows(ctx.our("data.val_files"))
        _put(ctx.ours, "data.val_max_samples", len(val_rows), "real verl validates every row", DEFAULT)
    if not any(k.startswith("reward_fn.") for k in ctx.ours):  # no reward of ours, no custom or model reward
        for our_key, value in _pick_reward(ctx, val_rows, notes).items():
            _put(ctx.ours, our_key, value, "the reward for the data_source", DEFAULT)

    ordered = dict(sorted(ctx.ours.items()))
    return Translation(overrides=[f"{k}={dump_value(v)}" for k, (v, _, _) in ordered.items()],
                       values={k: v for k, (v, _, _) in ordered.items()},
                       sources={k: s for k, (_, s, _) in ordered.items()}, notes=notes,
                       memory_reasons=ctx.memory_reasons)


def load_translated(tr: Translation):
    """Our finalized Config; a ConfigError about one of our keys also names the real key that set it."""
    from verl.config import load_config

    try:
        return load_config(None, tr.overrides)
    except ConfigError as exc:
        message = str(exc)
        # a key the message is about (followed by ':', '=', ' (' or a quote), not one it merely lists
        named = [f"{k} <- {s}" for k, s in tr.sources.items()
                 if re.search(rf"(?<![\w.]){re.escape(k)}(?=:|=| \(|'|$)", message) and not s.startswith(k + "=")]
        if named:
            message += f" [{'; '.join(named)}]"
        raise ConfigError(message) from None
