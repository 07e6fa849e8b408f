"""Installs a built pgwire_cdc wheel as ``maturin develop`` does (editable): ``pip`` has
installed the wheel (its metadata and the ``pgwire-cdc`` script); this puts the wheel's
extension module into the source tree and points the venv at the source tree instead of
the copies in site-packages, so that edits to the Python sources take effect at once.

Usage (``make build``): ``python tools/editable.py WHEEL SOURCE_DIR``
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import zipfile
from pathlib import Path

PACKAGES = ("pgwire_cdc", "pyspark_pgwire_cdc")
EXTENSION = "pgwire_cdc/_native.abi3.so"


def main(wheel: str, source: str) -> None:
    root = Path(source).resolve()
    # Written beside, then renamed over the old one: a process that has the old extension
    # loaded keeps its (unlinked) file instead of seeing it rewritten under it.
    target = root / EXTENSION
    fresh = target.with_name(target.name + ".new")
    with zipfile.ZipFile(wheel) as archive:
        fresh.write_bytes(archive.read(EXTENSION))
    os.replace(fresh, target)
    site = Path(sysconfig.get_paths()["purelib"])
    for package in PACKAGES:
        shutil.rmtree(site / package, ignore_errors=True)
    (site / "pgwire_cdc.pth").write_text(f"{root}\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
