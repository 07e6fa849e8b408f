"""The mirror in a process of its own, for the kill tests of test_spark.py.

Usage: mirror_worker.py DSN PATH UNTIL_LSN [CRASH_AT NTH]

Mirrors publication ``pub`` through slot ``s1`` into PATH up to UNTIL_LSN. With CRASH_AT
(a step name of `Mirror`: ``table-written`` or ``committed``) the process kills itself with
SIGKILL at the NTH time it reaches that step: no clean-up runs, as in a real crash.
"""

from __future__ import annotations

import os
import signal
import sys

from pgwire_cdc import mirror


def main() -> None:
    dsn, path, until = sys.argv[1], sys.argv[2], int(sys.argv[3])
    crash_at = sys.argv[4] if len(sys.argv) > 4 else ""
    nth = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    seen = 0

    def on_step(step: str) -> None:
        nonlocal seen
        if step == crash_at:
            seen += 1
            if seen == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    mirror.run(
        dsn,
        path,
        publication="pub",
        slot="s1",
        until_lsn=until,
        max_batch_rows=50,
        on_step=on_step,
    )


if __name__ == "__main__":
    main()
