"""A step progress bar with ETA (tqdm)."""

from __future__ import annotations

import sys
from typing import Optional, TextIO

from verl.tracking.metrics import fmt, to_float


class ProgressBar:
    """`ProgressBar(total, enabled)`; `update(n, postfix)` after each step; `close()` at the end.

    Drawn on stderr only when it is a terminal (or when `file` is given), so logs piped to a
    file are not filled with carriage-return redraws; the console backend prints one line per
    step either way.
    """

    def __init__(self, total: int, enabled: bool = True, initial: int = 0, desc: str = "train", file: Optional[TextIO] = None):
        self.bar = None
        if enabled and (file is not None or sys.stderr.isatty()):
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="step", file=file, dynamic_ncols=True)

    def update(self, n: int = 1, postfix: Optional[dict] = None) -> None:
        if self.bar is None:
            return
        if postfix:
            shown = {}
            for key, value in postfix.items():
                number = to_float(value)
                shown[key] = fmt(number) if number is not None else str(value)
            self.bar.set_postfix(shown, refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
