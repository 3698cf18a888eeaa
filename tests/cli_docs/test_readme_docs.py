"""The README and docs stay true: their code runs, each number quoted in two places has one source, links
resolve, install lines install this project, and the pages read as a manual (no lab-notebook references)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import headline  # noqa: E402  (benchmarks/headline.py)


def read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        return fh.read()


def pages() -> list[str]:
    """README.md and every page under docs/."""
    return ["README.md"] + sorted(f"docs/{n}" for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md"))


def test_readme_opens_with_the_two_commands_that_ci_runs():
    text = read("README.md")
    first = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    commands = [line for line in first.splitlines() if line and not line.startswith("#")]
    assert commands == ["bash scripts/install_cpu.sh && verl train examples/quickstart.yaml",
                        "bash scripts/install_cpu.sh --test && python3 -m pytest tests -q -p no:cacheprovider --timeout 900"]
    ci = read(".ci/run")
    assert "bash scripts/install_cpu.sh --test\npython3 -m pytest tests -q -p no:cacheprovider --timeout 900" in ci
    assert text.index("## Set up") < text.index("## Python API") < text.index("## Measured results")


@pytest.mark.parametrize("block", list(headline.RENDER))
def test_results_tables_are_the_ones_the_stored_files_give(block):
    """README.md and docs/performance.md quote benchmarks/results/headline.yaml's tables as the result files
    give them: `python3 benchmarks/headline.py --write` after changing a result or the spec."""
    for page, (prefix, blocks) in headline.PAGES.items():
        if block in blocks:
            assert headline.embedded(read(page), block) == headline.RENDER[block](prefix), (
                f"{page}: run python3 benchmarks/headline.py --write")


def test_headline_figures_are_read_from_the_files():
    """Hand-checked against the stored (b) like-for-like table: verl 8.242 s, TRL 10.83 s, real verl 24.364 s;
    tokens/s 18220 / 13853 / 6164, so 1.32x TRL and 2.96x real verl."""
    entry = next(e for e in headline._spec()["speed"] if e["work"].startswith("(b)"))
    f = headline.row_figures(entry)
    assert (f["card"], f["verl_s"], f["trl_s"], f["real_s"]) == ("H200", 8.242, 10.83, 24.364)
    assert (f["x_trl"], f["x_real"]) == (round(18220 / 13853, 2), round(18220 / 6164, 2)) == (1.32, 2.96)
    before, step, after = headline.accuracy_at("agent_calculator_h200/metrics.jsonl", None)
    assert (round(before, 4), step, after) == (0.3906, 112, 1.0)  # 25 of 64 held-out sums at step 0


def test_readme_quotes_the_real_verl_script_count_of_the_generated_table():
    doc = headline.embedded(read("docs/real_verl.md"), "real-verl-scripts")
    trains, total = re.match(r"(\d+) of (\d+) scripts train a step", doc).groups()
    for page in ("README.md", "docs/real_verl.md"):  # the README and the page's own opening line
        quoted = headline.embedded(read(page), "real-verl-count")
        assert re.match(r"(\d+) of (\d+) train a step", quoted).groups() == (trains, total), page


def test_readme_python_examples_run(tmp_path):
    """Both Python blocks of the README's API section, as printed, in a fresh folder."""
    text = read("README.md")
    section = text[text.index("## Python API"):text.index("## Command line")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    os.symlink(os.path.join(ROOT, "examples"), tmp_path / "examples")
    for i, code in enumerate(blocks):
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (i, proc.stderr[-3000:])
        if i == 0:
            assert re.search(r"step 10/10 \| reward [\d.]+ \(correct [\d.]+, brief [\d.]+\)", proc.stdout)
            assert "hit the length limit" not in proc.stdout
        else:
            assert proc.stdout.count("step ") >= 5 and "reward=" in proc.stdout


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@pytest.mark.parametrize("page", pages())
def test_relative_links_resolve(page):
    text = read(page)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path)) if path else os.path.join(ROOT, page)
        assert os.path.exists(full), f"{page}: broken link {target}"
        if anchor and full.endswith(".md"):
            with open(full, encoding="utf-8") as fh:
                slugs = {_slug(m) for m in re.findall(r"^#+ (.*)$", fh.read(), re.M)}
            assert anchor in slugs, f"{page}: no heading for #{anchor} in {path or page}"


NOTEBOOK = re.compile(r"\bsession \d+|\bsessions? \d|\bissue #?\d+|(?<![\w`/])#\d{2}\b|\bthe seed\b|seed's|MISSION\.md",
                      re.I)


@pytest.mark.parametrize("page", pages())
def test_pages_read_as_a_manual_not_a_lab_notebook(page):
    """No numbered sessions, tracker issue numbers or references to documents a user does not have."""
    hits = [line.strip()[:120] for line in read(page).splitlines() if NOTEBOOK.search(line)]
    assert not hits, f"{page}: {hits[:5]}"


def test_install_lines_install_this_project():
    """`pip install 'verl[...]'` installs real verl from the package index: no page or message says it."""
    found = []
    for base, _, files in os.walk(ROOT):
        if any(part in base for part in ("/.git", "/benchmarks/results", "__pycache__", "/.gpuwheels")):
            continue
        for name in files:
            if name.endswith((".md", ".py", ".sh", ".yaml", ".toml")) or name.startswith("Dockerfile"):
                path = os.path.join(base, name)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        if re.search(r"pip install ['\"]?verl(\[|['\"\s]|$)", line) and "real verl" not in line:
                            found.append(f"{os.path.relpath(path, ROOT)}:{n}")
    assert not found, found
    from verl.install_hint import pip_extra

    assert pip_extra("vllm") == f"pip install -e '{ROOT}[vllm]'"  # this checkout's own folder
