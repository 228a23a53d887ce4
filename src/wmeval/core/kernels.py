"""The same numerical kernels on every x86-64 machine, so that a fresh clone's ``dvc repro`` reproduces ``dvc.lock``.

numpy and scipy choose their code at run time from the CPU: OpenBLAS (bundled in their wheels, built with
``DYNAMIC_ARCH``) picks a kernel per CPU model, and numpy's universal functions pick an AVX-512 or an AVX2 build.
Kernels for different instruction sets add in different orders, so the same pipeline on two CPUs gives results that
differ at rounding level, and a value quantized downstream turns that into larger changes: a state one ulp apart
renders a pixel one grey level apart. Measured (2026-12-07): the committed ``dvc.lock`` had been made on an AMD EPYC
whose OpenBLAS chose its ``SkylakeX`` kernels; this session's AMD EPYC, with the same packages, got ``Haswell``
ones, and a fresh clone's ``dvc repro`` changed every rollout table, 330 rows of ``reports/intervals.csv`` and the
scorecard's ranks of two pendulum models whose FDs are 1e-7 (``OPENBLAS_CORETYPE=SkylakeX`` on this machine
reproduced the committed rollouts exactly). With numpy's AVX-512 builds switched off the rollouts changed again.

So every script in ``stages/`` pins both, through its first import (:mod:`wmeval.core.stage_process`), before numpy
and scipy load: OpenBLAS's ``Haswell`` kernels (``OPENBLAS_CORETYPE``) and numpy's AVX2 builds
(``NPY_DISABLE_CPU_FEATURES``, its AVX-512 targets off), the code an AVX2 machine runs anyway. On an x86-64 CPU
without AVX2 and FMA, or elsewhere than Linux on x86-64, nothing is pinned. A variable you set is left to
its library; ``WMEVAL_KERNELS=native`` leaves both to the libraries' own choice (faster where AVX-512 pays, and
then the outputs depend on the CPU). torch's kernels are not pinned (the default pipeline's encoders do not use
torch); the run record (:mod:`wmeval.lineage.provenance`) lists the kernels in effect.
"""

from __future__ import annotations

import os
import platform
import sys

from wmeval.core.allocator import env_choice, set_here, yours

#: Environment variable: ``pinned`` (the default when unset) or ``native`` (the libraries' own choice).
KERNELS_ENV = "WMEVAL_KERNELS"
#: OpenBLAS's kernel choice (read when the library loads) and the kernel pinned.
OPENBLAS_ENV, OPENBLAS_CORE = "OPENBLAS_CORETYPE", "Haswell"
#: numpy's dispatch targets to switch off (read when numpy loads): its AVX-512 targets, as numpy 2.4 and later name
#: them (x86-64-v4 and above) and as numpy 1.22-2.3 did. numpy skips a target its build does not dispatch, with an
#: ImportWarning (which :func:`pin_kernels` filters, so that ``-W error`` does not turn it into a failed import).
NUMPY_ENV = "NPY_DISABLE_CPU_FEATURES"
NUMPY_AVX512 = {(2, 4): "X86_V4 AVX512_ICL AVX512_SPR",
                (1, 22): "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"}
#: numpy refuses to load with both this and ``NPY_DISABLE_CPU_FEATURES`` set: where you set it, numpy is not pinned.
NUMPY_ENABLE_ENV = "NPY_ENABLE_CPU_FEATURES"


def kernels_mode() -> str:
    """``pinned`` or ``native``, from ``$WMEVAL_KERNELS``; a :class:`~wmeval.core.errors.WmevalError` naming any other
    value."""
    return env_choice(KERNELS_ENV, {"pinned": "the same numerical kernels on every x86-64 machine with AVX2; the "
                                              "default",
                                    "native": "numpy's and OpenBLAS's own choice for this CPU"})


def cpu_flags() -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def pinnable() -> bool:
    """Whether this machine runs the pinned kernels: Linux on x86-64 with AVX2 and FMA."""
    return (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
            and {"avx2", "fma"} <= cpu_flags())


def numpy_avx512_targets() -> str | None:
    """The installed numpy's names for its AVX-512 dispatch targets (from its version, without loading it); ``None``
    for a numpy older than 1.22 or none installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(x) for x in version("numpy").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return None
    return next((names for since, names in NUMPY_AVX512.items() if (major, minor) >= since), None)


def pin_kernels() -> dict[str, bool]:
    """Pin OpenBLAS's kernel and numpy's dispatch for this process and the processes it starts (module docstring).
    Call it before numpy and scipy are loaded: a library loaded already keeps its choice. Idempotent; never raises
    (a bad ``$WMEVAL_KERNELS`` pins nothing here and stops the stage in :func:`wmeval.core.runner.main`).

    Returns ``{"openblas": ..., "numpy": ...}``: whether each is pinned by this call's process (not where you set
    the library's variable, nor numpy's where you set ``NPY_ENABLE_CPU_FEATURES``, nor with ``WMEVAL_KERNELS=native``,
    nor on a machine that cannot run them). A numpy built with AVX-512 in its baseline (not a PyPI wheel) refuses to
    load with those targets switched off: ``WMEVAL_KERNELS=native`` there.
    """
    from wmeval.core.errors import WmevalError

    try:
        mode = kernels_mode()
    except WmevalError:
        mode = "native"
    out = {"openblas": False, "numpy": False}
    if mode != "pinned" or not pinnable():
        return out
    targets = None if NUMPY_ENABLE_ENV in os.environ else numpy_avx512_targets()
    for key, var, value in (("openblas", OPENBLAS_ENV, OPENBLAS_CORE), ("numpy", NUMPY_ENV, targets)):
        if value is not None and not yours(var):
            set_here(var, value)
            out[key] = True
    if out["numpy"]:
        import warnings

        warnings.filterwarnings("ignore", message=".*NPY_DISABLE_CPU_FEATURES", category=ImportWarning)
    return out
