"""The CPU kernels and string hashing every entry point runs under, so that a seed gives the
committed numbers whether a stage is started by ``make``, ``dvc repro``, ``dvc exp run``,
``python -m stages.X`` or ``hybridsched`` (docs/reproducibility.md).

torch, MKL, oneDNN and numpy read their variables when they load, and Python fixes its hash
seed at start-up: :func:`pin` must run before numpy or torch is imported, and re-executes the
interpreter once when ``PYTHONHASHSEED`` was not set.
"""

from __future__ import annotations

import os
import sys

# The same CPU kernels on every x86-64 machine with AVX2: torch's vectorised ops, MKL's BLAS,
# oneDNN and numpy's own SIMD kernels (whose AVX-512 versions differ in the last bit)
PINNED = {
    "PYTHONHASHSEED": "0",
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
}
# libraries that have read the variables once imported
_READERS = ("numpy", "torch")


def missing(environ: os._Environ[str] | dict[str, str] = os.environ) -> dict[str, str]:
    """The pinned variables ``environ`` does not set (a value the user set is kept)."""
    return {k: v for k, v in PINNED.items() if k not in environ}


def pin() -> None:
    """Set every pinned variable the environment lacks; when one was lacking, start this
    command again in a fresh interpreter (same arguments) so that the hash seed and the
    libraries see them. A no-op under ``make``, which exports them all."""
    lacking = missing()
    if not lacking:
        return
    os.environ.update(lacking)
    loaded = [m for m in _READERS if m in sys.modules]
    if "PYTHONHASHSEED" not in lacking and not loaded:
        return  # nothing has read them yet: setting them is enough
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
