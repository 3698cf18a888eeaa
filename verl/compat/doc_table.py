"""docs/real_verl.md's mapping table, rendered from `verl.compat.real_verl.TABLE`.

    python -m verl.compat.doc_table           # print the table
    python -m verl.compat.doc_table --write   # replace it in docs/real_verl.md (between the markers)

tests/real_verl/test_main_ppo.py checks that the file holds exactly `render_table()`.
"""

from __future__ import annotations

import json
import os
import sys

from verl.compat.real_keys import NO_DEFAULT
from verl.compat.real_verl import TABLE

BEGIN, END = "<!-- real-verl-table:begin -->", "<!-- real-verl-table:end -->"
DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs",
                   "real_verl.md")


def _value(v) -> str:
    if v is NO_DEFAULT:
        return ""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v).replace('"', "'")
    return str(v)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_table() -> str:
    lines = ["| real verl key | default used | here | note |", "|---|---|---|---|"]
    for key, e in TABLE.items():
        default = _value(e.default)
        if e.real_default is not NO_DEFAULT:
            default = (default + " " if default else "") + f"(real verl: {_value(e.real_default)})"
        head, _, rest = e.target.partition(" ")
        target = e.target if e.ignored or e.target.startswith("(") else f"`{head}`" + (f" {rest}" if rest else "")
        lines.append(f"| `{key}` | {_cell(default)} | {_cell(target)} | {_cell(e.note)} |")
    return "\n".join(lines)


def doc_table(path: str = DOC) -> str:
    """The table as docs/real_verl.md holds it (between the markers)."""
    text = open(path, encoding="utf-8").read()
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def replace_between(path: str, begin: str, end: str, body: str) -> None:
    """Rewrite the part of the file at `path` between the markers `begin` and `end` with `body`."""
    text = open(path, encoding="utf-8").read()
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"{head}{begin}\n{body}\n{end}{tail}")


def write(path: str = DOC) -> None:
    replace_between(path, BEGIN, END, render_table())


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        write()
    else:
        print(render_table())
