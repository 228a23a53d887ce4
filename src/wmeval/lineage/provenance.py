"""Code and environment identity: the digest recorded in every file wmeval writes, and the run record.

:func:`run_record` gathers what a report needs to be traced to bytes: git commit and dirty
flag, the md5 of every dep and out in ``dvc.lock``, params, package versions, encoder
weights sha256, seeds, hardware and determinism settings.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from wmeval.core.digest import code_version
from wmeval.core.errors import WmevalError
from wmeval.encoders.weights import WeightsError, spec_for, status, weights_dir
from wmeval.tables import read_metadata

# ----------------------------------------------------------------------------- run record

#: Distributions whose versions a run record lists (``importlib.metadata`` names).
PACKAGES = ("torch", "numpy", "scipy", "pandas", "pyarrow", "lpips", "dvc", "hydra-core", "omegaconf",
            "pytorch-fid", "wmeval")

#: Environment variables that change thread counts or numerical determinism.
DETERMINISM_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                   "CUBLAS_WORKSPACE_CONFIG", "PYTHONHASHSEED", "WMEVAL_KERNELS", "OPENBLAS_CORETYPE",
                   "NPY_DISABLE_CPU_FEATURES")

#: ``(section, key)`` of every seed in params.yaml.
SEEDS = (("protocol", "seed"), ("dynamics", "seed"), ("bootstrap", "seed"), ("scoring", "seed"))

#: Encoder kinds that load a weights file, and the :data:`wmeval.encoders.weights.WEIGHTS` entry they use.
WEIGHTED_KINDS = {"inception_fid": "inception_fid", "i3d": "i3d"}


def _git(root: Path) -> dict[str, Any]:
    """Commit and dirty flag of the git work tree at ``root``; ``None`` values with a reason outside git."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)

    try:
        head = git("rev-parse", "--verify", "HEAD")
    except (OSError, subprocess.SubprocessError) as e:
        return {"commit": None, "dirty": None, "reason": f"git is not available: {e}"}
    if head.returncode != 0:
        return {"commit": None, "dirty": None,
                "reason": f"{root} is not a git work tree with a commit: {head.stderr.strip() or head.stdout.strip()}"}
    st = git("status", "--porcelain", "--untracked-files=no")
    if st.returncode != 0:
        return {"commit": head.stdout.strip(), "dirty": None, "reason": f"git status failed: {st.stderr.strip()}"}
    changed = [line[3:] for line in st.stdout.splitlines() if line.strip()]
    return {"commit": head.stdout.strip(), "dirty": bool(changed), "changed_files": changed}


def read_lock(root: Path) -> dict[str, Any] | None:
    """The parsed ``dvc.lock`` at ``root``, or ``None`` when there is none.

    Raises:
        WmevalError: the file exists but is not valid YAML or has no ``stages`` mapping.
    """
    path = Path(root) / "dvc.lock"
    if not path.is_file():
        return None
    try:
        lock = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise WmevalError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(lock, dict) or not isinstance(lock.get("stages"), dict):
        raise WmevalError(f"{path}: no 'stages' mapping (is it a DVC 3 lock file?)")
    return lock


def lock_hashes(lock: dict[str, Any] | None) -> dict[str, Any] | None:
    """``{stage: {"cmd", "deps": {path: md5}, "outs": {path: md5}}}`` from a parsed ``dvc.lock``."""
    if lock is None:
        return None
    out: dict[str, Any] = {}
    for name, st in lock["stages"].items():
        st = st or {}
        out[name] = {"cmd": st.get("cmd"),
                     "deps": {d["path"]: d.get("md5") for d in st.get("deps", [])},
                     "outs": {o["path"]: o.get("md5") for o in st.get("outs", [])}}
    return out


def package_versions() -> dict[str, str | None]:
    """Installed version of each of :data:`PACKAGES` (``None`` when not installed)."""
    from wmeval.core.pins import installed_versions

    return installed_versions(PACKAGES)


def _features_weights(root: Path, encoder_name: str) -> tuple[str | None, str | None]:
    """The weights sha256 recorded in the first features file of ``encoder_name``, and that file."""
    for f in sorted((root / "data" / "features" / encoder_name).glob("*/*.parquet")):
        try:
            return read_metadata(f).get("weights_sha256"), str(f.relative_to(root))
        except WmevalError:
            continue
    return None, None


def encoder_weights(root: Path, params: dict[str, Any]) -> dict[str, Any]:
    """The encoder (and LPIPS backbone) weights of a run: sha256 where there are weights, else why not.

    The sha256 recorded in the features files (what the features stage verified and used) is
    preferred; without features files, the file in the weights directory is hashed.

    Args:
        root: project root (features files are read under ``data/features``).
        params: the params.yaml mapping.

    Returns:
        ``{"encoder": {...}, "lpips": {...}}``, each with ``sha256`` (or ``None``) and ``source`` or
        ``reason``.
    """
    enc = params.get("encoder") or {}
    kind, name = enc.get("kind"), enc.get("name")
    out: dict[str, Any] = {}
    if kind is None:
        out["encoder"] = {"name": name, "kind": None, "sha256": None, "reason": "params have no encoder section"}
    elif kind not in WEIGHTED_KINDS:
        out["encoder"] = {"name": name, "kind": kind, "sha256": None,
                          "reason": f"weight-free encoder (kind {kind!r}): nothing to hash"}
    else:
        sha, where = _features_weights(root, name)
        if sha is not None:
            out["encoder"] = {"name": name, "kind": kind, "sha256": sha, "source": f"metadata of {where}"}
        else:
            p = enc.get("params") or {}
            try:
                spec = spec_for(WEIGHTED_KINDS[kind], p.get("weights_file"), p.get("weights_sha256"))
                path, actual, verdict = status(spec, weights_dir(enc.get("weights_dir")))
            except WeightsError as e:
                out["encoder"] = {"name": name, "kind": kind, "sha256": None, "reason": str(e)}
            else:
                out["encoder"] = {"name": name, "kind": kind, "sha256": actual, "file": str(path),
                                  "verdict": verdict, "source": "weights directory (no features files to read)"}
                if actual is None:
                    out["encoder"]["reason"] = f"weights file {path} is missing"
    backbone = (params.get("scoring") or {}).get("lpips")
    if not backbone:
        out["lpips"] = {"backbone": None, "sha256": None, "reason": "scoring.lpips is not set: LPIPS not computed"}
    else:
        try:
            path, actual, verdict = status(spec_for(f"lpips_{backbone}"), weights_dir(enc.get("weights_dir")))
            out["lpips"] = {"backbone": backbone, "sha256": actual, "file": str(path), "verdict": verdict}
            if actual is None:
                out["lpips"]["reason"] = f"weights file {path} is missing"
        except WeightsError as e:
            out["lpips"] = {"backbone": backbone, "sha256": None, "reason": str(e)}
    return out


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "processor\t: ")) and ":" in line:
                value = line.split(":", 1)[1].strip()
                if value and not value.isdigit():
                    return value
    except OSError:
        pass
    return platform.processor() or None


def _memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


#: Where the NVIDIA driver lists each GPU it manages (Linux), one ``information`` file per device.
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
#: Why the torch fields are ``None``: importing torch (about 2 s) only to read its defaults in a process that
#: computes nothing with it would describe no number.
TORCH_NOT_LOADED = ("torch is not loaded in this process (the report stage computes nothing with it); the "
                    "encoder's precision is on the features' protocol card")


def _gpu_name() -> str | None:
    """The first GPU's name: from torch when this process has loaded it (the device it would compute on), else
    the machine's first GPU in the NVIDIA driver's device records (``CUDA_VISIBLE_DEVICES`` does not apply to
    them), without importing torch; ``None`` without either."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    try:
        for info in sorted(NVIDIA_GPUS.glob("*/information")):
            for line in info.read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "Model" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return None


def hardware() -> dict[str, Any]:
    """CPU model, logical cores (and those this process may use), memory, GPU name (``None`` without one)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "cores_usable": usable, "memory_bytes": _memory_bytes(),
            "gpu": _gpu_name(),
            "machine": platform.machine(), "system": platform.system(), "python": platform.python_version()}


def determinism() -> dict[str, Any]:
    """The thread/determinism env vars, and torch's deterministic-algorithms flag and thread count when this
    process has loaded torch (``None`` with ``torch_reason`` otherwise)."""
    out: dict[str, Any] = {"torch_deterministic_algorithms": None, "torch_num_threads": None}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_deterministic_algorithms"] = bool(torch.are_deterministic_algorithms_enabled())
        out["torch_num_threads"] = int(torch.get_num_threads())
    else:
        out["torch_reason"] = TORCH_NOT_LOADED
    out["env"] = {k: os.environ.get(k) for k in DETERMINISM_ENV}
    out["kernels"] = kernels_in_effect()
    return out


def kernels_in_effect() -> dict[str, Any]:
    """The numerical kernels this process runs (:mod:`wmeval.core.kernels` pins them in the stages): each loaded
    BLAS's kernel family (``threadpoolctl``; numpy's and scipy's OpenBLAS, ``Haswell`` when pinned) and numpy's
    dispatch targets in use (its SIMD builds, ``X86_V3``, AVX2, when pinned on numpy 2.4)."""
    out: dict[str, Any] = {"blas": None, "numpy_simd": None}
    try:
        from threadpoolctl import threadpool_info

        out["blas"] = sorted({f"{i.get('internal_api')} {i.get('architecture')}" for i in threadpool_info()
                              if i.get("user_api") == "blas"})
    except Exception as e:                          # noqa: BLE001  a record, never a failure
        out["blas_reason"] = f"threadpoolctl: {e}"
    try:
        try:
            from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__       # numpy 2
        except ImportError:
            from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__        # numpy 1.x
        out["numpy_simd"] = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    except ImportError as e:
        out["numpy_simd_reason"] = str(e)
    return out


def _report_code(root: Path) -> dict[str, str] | dict[str, None]:
    """The report stage's code digest (each table records its own stage's); ``reason`` outside a DVC project."""
    try:
        return code_version("report", root)
    except WmevalError as e:
        return {"source_sha256": None, "reason": str(e)}


def run_record(root: Path, params: dict | None = None) -> dict:
    """Everything needed to trace a run's numbers to bytes, as a JSON-able dict.

    Args:
        root: the project root (holds ``dvc.lock``, ``params.yaml``, ``data/``).
        params: the params mapping; ``None`` reads ``root/params.yaml``.

    Returns:
        ``{"git", "dvc_lock", "params", "packages", "code", "weights", "seeds", "hardware",
        "determinism"}``. ``git`` has ``commit`` and ``dirty`` (``None`` with a ``reason`` outside
        git); ``dvc_lock`` maps each stage to the md5 of its deps and outs (``None`` without
        ``dvc.lock``); missing packages and weights are ``None``.

    Raises:
        WmevalError: ``params.yaml`` or ``dvc.lock`` exists but cannot be parsed.
    """
    root = Path(root)
    if params is None:
        pf = root / "params.yaml"
        if pf.is_file():
            try:
                params = yaml.safe_load(pf.read_text(encoding="utf-8")) or {}
            except yaml.YAMLError as e:
                raise WmevalError(f"{pf}: not valid YAML: {e}") from None
        else:
            params = {}
    seeds = {f"{sec}.{key}": (params.get(sec) or {}).get(key) if isinstance(params.get(sec), dict) else None
             for sec, key in SEEDS}
    record = {
        "git": _git(root),
        "dvc_lock": lock_hashes(read_lock(root)),
        "params": params,
        "packages": package_versions(),
        "code": _report_code(root),
        "weights": encoder_weights(root, params),
        "seeds": seeds,
        "hardware": hardware(),
        "determinism": determinism(),
    }
    json.dumps(record)  # fail here, not in the caller's writer, if something is not JSON-able
    return record
