"""Progress output for long operations: tqdm when installed and stderr is a terminal,
otherwise a line every few seconds, never anything when quiet."""

import sys
import time


class Progress:
    def __init__(self, total, desc, quiet=False, unit="B"):
        self.total = total
        self.desc = desc
        self.quiet = quiet
        self.done = 0
        self._bar = None
        self._last = time.monotonic()
        if quiet:
            return
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm
                self._bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=True,
                                 leave=False, file=sys.stderr)
            except ImportError:
                pass

    def update(self, n):
        self.done += n
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= 2.0:
            self._last = now
            pct = 100.0 * self.done / self.total if self.total else 100.0
            print(f"{self.desc}: {pct:5.1f}% ({self.done}/{self.total})", file=sys.stderr)

    def close(self):
        if self._bar is not None:
            self._bar.close()
