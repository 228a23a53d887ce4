"""Coverage of nominal-95% bootstrap intervals for a mean-type metric with intra-episode correlation.

Synthetic data with known truth: ``--datasets`` data sets, each ``--episodes`` episodes of
``--frames`` frames, ``value = mu + sqrt(rho) a_episode + sqrt(1 - rho) e_frame`` (standard
normal a, e; mu = 0, so every frame has variance 1 and frames of one episode correlation
rho). For each data set, the trajectory-clustered interval (``wmeval.estimators.resample.cluster_bootstrap``
with episodes as clusters) and the frame-level iid bootstrap (every frame its own cluster);
coverage is the share of intervals that contain mu, with its binomial standard error.

Then the same for the Frechet distance: model features ``N(mu_g, Sigma_g)`` in ``--dim``
dimensions with the same episode correlation, against the exact reference ``N(0, I)``, so
that the true FD has a closed form. The interval is for the plug-in estimator, which is
biased upward at finite N; the basic (bias-reflecting) bootstrap interval
``[2 fd - q_hi, 2 fd - q_lo]`` is reported beside the percentile one.

Then the set-level intervals the scorecard's headlines and ranks use
(``wmeval.stats.distribution_bootstrap``, the bootstrap stage's code): KID and the bias-corrected
FD on episode-clustered Gaussian features with a closed-form truth, for a truth of 0 (the model's
rows have the reference's distribution) and for a real shift, each **paired** (the model's
episode e shares its episode-level latent with the reference's episode e, as predictions share a
history with the realized future) and **unpaired** (independent episodes). Coverage is the share
of intervals containing the truth; power (under a shift, and under a three times larger one) and
the false-positive rate (under truth 0) are the shares of intervals entirely above 0.
Both carry the boundary interval (``wmeval.estimators.resample.boundary_interval``; the bias-corrected FD is the
plug-in minus the episode jackknife's bias estimate, its interval holding 0 or not as its permutation test of FD = 0
decides, ``wmeval.estimators.resample.with_zero_test``); the cells are run at ``--set-episodes`` (32, the default
config's count), again at ``--set-more-episodes`` (64), at ``--set-mid-dim`` (d = 16) and at ``--set-wide-dim``
(64, the pixel encoder's d, where 32 episodes of 10 rows are too few for the FD's bias correction with independent
sides: its two-scale check withholds those intervals, counted as ``withheld``; coverage, power and width are over the
intervals given). Data sets are spread over ``--jobs`` processes (75-87 minutes on 2 cores shared with other
work, 32 of them the high-axis parts).
The shift lies along the features' lowest-variance axis (variance 0.5); the parts ``sets_high_axis``,
``sets_more_episodes_high_axis`` and ``sets_mid_high_axis`` run the 32- and 64-episode cells and the d = 16 ones
again with it along the highest (variance 2.0): coverage depends on how the difference lies against the noise.

    python benchmarks/coverage.py [--datasets 500] [--rho 0.8] [--frames 16] [--episodes 64]
    python benchmarks/coverage.py --only sets [--set-datasets 400] [--parts sets_wide ...]
    python benchmarks/coverage.py --only bias [--bias-datasets 60]   # what the FD's bias corrections leave
    python benchmarks/coverage.py --only confirm [--confirm-datasets 1000]

``--only confirm`` reruns each set-level cell outside 93-97% by more than chance (the scorecard's rule) on
``--confirm-datasets`` data sets its screen did not use, with the part's stored design, into ``confirmation``: with
some 70 cells tested at 5% each, a few flags are chance's, and a flag a rerun does not repeat is not counted by the
scorecard (``wmeval.report.scorecard.screen_flags``).

Every figure carries the run that computed it: ``run``, a key of the file's ``runs``, each the code (the sha256 of
this script and of every ``wmeval`` module it imports, :func:`wmeval.core.digest.code_files`), the command, the
packages, the numerical kernels in effect and the date. The scorecard names figures whose code has changed since
(``wmeval.report.scorecard.stale_figures``). The code is read at the start and again at the end, and a run whose
code changed meanwhile (its workers import the modules when they start) stops without writing.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import numpy as np

from wmeval.core.rng import make_rng
from wmeval.estimators.resample import cluster_bootstrap

#: What this script imports for its bookkeeping (the run stamp, the choice of cells to rerun), not its figures:
#: left out of the run's code (:func:`wmeval.core.digest.code_files`).
BOOKKEEPING = ("wmeval.core.digest", "wmeval.lineage", "wmeval.report")


def frechet_coverage(args) -> dict:
    from wmeval.metrics import FrechetReference, frechet_distance

    d, n, t, rho = args.dim, args.episodes, args.frames, args.rho
    mu_g = np.full(d, 0.3)
    sigma_g = np.diag(np.linspace(0.5, 2.0, d))
    chol = np.linalg.cholesky(sigma_g)
    truth = frechet_distance(np.zeros(d), np.eye(d), mu_g, sigma_g)
    ref = FrechetReference(np.zeros(d), np.eye(d))
    clusters = np.repeat(np.arange(n), t)

    def fd(x: np.ndarray, w: np.ndarray) -> float:
        # Weighted moments: each unit's multiplicity is its weight; no resampled copies.
        mu = w @ x / w.sum()
        xc = x - mu
        return ref.distance(mu, (xc * w[:, None]).T @ xc / (w.sum() - 1))

    hits = {"percentile": 0, "basic": 0}
    points = []
    for i in range(args.fd_datasets):
        rng = make_rng(args.seed, "coverage", "fd", i)
        z = np.sqrt(rho) * np.repeat(rng.normal(size=(n, d)), t, axis=0) + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))
        x = mu_g + z @ chol.T
        r = cluster_bootstrap(x, clusters, fd, n_resamples=args.fd_resamples, seed=args.seed * 7919 + i)
        points.append(r.point)
        hits["percentile"] += r.low <= truth <= r.high
        hits["basic"] += 2 * r.point - r.high <= truth <= 2 * r.point - r.low
    out = {"dim": d, "true_fd": truth, "mean_plugin_fd": float(np.mean(points)),
           "plugin_bias": float(np.mean(points) - truth), "datasets": args.fd_datasets,
           "n_resamples": args.fd_resamples}
    for k, h in hits.items():
        p = h / args.fd_datasets
        out[f"{k}_coverage"] = p
        out[f"{k}_coverage_se"] = float(np.sqrt(p * (1 - p) / args.fd_datasets))
    return out


def polynomial_kernel_mean(mu1: np.ndarray, s1: np.ndarray, mu2: np.ndarray, s2: np.ndarray) -> float:
    """``E (X.Y / d + 1)^3`` for independent ``X ~ N(mu1, s1)``, ``Y ~ N(mu2, s2)``, exactly.

    With ``Z = X.Y``: given Y, Z is normal with mean ``m = mu1.Y`` and variance ``v = Y' s1 Y``, so
    ``E Z = a``, ``E Z^2 = a^2 + b + t + c`` and ``E Z^3 = a^3 + 3 a b + 3 (a (c + t) + 2 mu1' s2 s1 mu2)``
    with ``a = mu1.mu2``, ``b = mu1' s2 mu1``, ``c = mu2' s1 mu2``, ``t = tr(s1 s2)``.
    """
    d = len(mu1)
    a, b, c, t = mu1 @ mu2, mu1 @ s2 @ mu1, mu2 @ s1 @ mu2, np.trace(s1 @ s2)
    ez, ez2 = a, a * a + b + t + c
    ez3 = a ** 3 + 3 * a * b + 3 * (a * (c + t) + 2 * mu1 @ s2 @ s1 @ mu2)
    return float(1 + 3 * ez / d + 3 * ez2 / d ** 2 + ez3 / d ** 3)


def true_kid(mu_x, s_x, mu_y, s_y) -> float:
    """KID's population value, the MMD^2 with the kernel ``(x.y / d + 1)^3`` between two Gaussians."""
    k = polynomial_kernel_mean
    return k(mu_x, s_x, mu_x, s_x) + k(mu_y, s_y, mu_y, s_y) - 2 * k(mu_x, s_x, mu_y, s_y)


def _set_dataset(job: tuple) -> dict:
    """One data set of a set-level cell: per metric, (covered, entirely above 0, point, width)."""
    from wmeval.stats import distribution_bootstrap

    args, truth_name, delta, design, i, truths = job
    d, n, t, rho = args.set_dim, args.set_episodes, args.set_frames, args.set_rho
    chol = np.linalg.cholesky(np.diag(np.linspace(0.5, 2.0, d)))
    ep = np.repeat(np.arange(n), t)
    rng = make_rng(args.seed, "coverage", "sets", truth_name, design, i)
    a = rng.normal(size=(n, d))
    b = a if design == "paired" else rng.normal(size=(n, d))
    x = (np.sqrt(rho) * a[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
    y = delta + (np.sqrt(rho) * b[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
    y_ids = ep if design == "paired" else ep + n
    out = {}
    for m, truth in truths.items():
        with warnings.catch_warnings():              # a withheld interval warns; it is counted below
            warnings.simplefilter("ignore", RuntimeWarning)
            r = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=y_ids, metric=m,
                                       n_resamples=args.set_resamples, seed=i)
        # Withheld: the bias-corrected FD's two-scale check gave no interval (no other metric's is NaN here).
        out[m] = (r.low <= truth <= r.high, r.low > 0, r.point, r.high - r.low,
                  bool(m == "fd_bias_corrected" and np.isnan(r.low)))
    return out


def _set_truths(args) -> list[tuple[str, np.ndarray, dict[str, float]]]:
    """A part's truths: ``(name, the model's mean shift, each metric's true value)``, a true 0, the shift along
    the part's axis (``set_shift_axis``: 0, the lowest-variance one, or -1, the highest) and 3 times it."""
    d = args.set_dim
    sigma = np.diag(np.linspace(0.5, 2.0, d))
    shift = np.zeros(d)
    shift[getattr(args, "set_shift_axis", 0)] = args.set_shift
    out = []
    for truth_name, delta in (("zero", np.zeros(d)), ("shift", shift), ("large shift", 3 * shift)):
        values = {"kid": true_kid(np.zeros(d), sigma, delta, sigma), "fd_bias_corrected": float(delta @ delta)}
        out.append((truth_name, delta, {m: v for m, v in values.items()
                                        if m in getattr(args, "set_metrics", SET_METRICS)}))
    return out


def _cell_summary(res: list[dict], m: str, truth_name: str, truth: float, design: str) -> dict:
    """One cell's figures from its data sets' results (:func:`_set_dataset`)."""
    hits, above, points, widths, withheld = (np.array([r[m][k] for r in res]) for k in range(5))
    # Coverage, power and width over the intervals given; a withheld one (the bias-corrected FD's two-scale check
    # failed) is counted apart, as the share of data sets without an interval.
    given = ~withheld
    n_given = int(given.sum())
    p = float(np.mean(hits[given])) if n_given else None        # None: no interval given
    return {"metric": m, "truth": truth_name, "true_value": truth, "design": design, "coverage": p,
            "coverage_se": float(np.sqrt(p * (1 - p) / n_given)) if n_given else None,
            ("false_positive_rate" if truth_name == "zero" else "power"):
                float(np.mean(above[given])) if n_given else None,
            "withheld": float(np.mean(withheld)),
            "mean_point": float(np.mean(points)),
            # the mean interval width over the width a normal interval of the estimator's actual spread across
            # data sets would have (2 x 1.96 sd): above 1, conservative
            "width_ratio": float(np.mean(widths[given]) / (2 * 1.959964 * np.std(points))) if n_given else None}


def set_coverage(args) -> dict:
    """Coverage and power of ``distribution_bootstrap``'s KID and bias-corrected FD intervals (data sets spread
    over ``--jobs`` processes; each depends on its own seed alone)."""
    d = args.set_dim
    sigma = np.diag(np.linspace(0.5, 2.0, d))
    axis = getattr(args, "set_shift_axis", 0)
    out = {"dim": d, "episodes": args.set_episodes, "frames_per_episode": args.set_frames, "rho": args.set_rho,
           "shift": args.set_shift, "datasets": args.set_datasets, "n_resamples": args.set_resamples,
           "confidence_level": 0.95, "cells": []}
    if axis:                  # the high-axis parts; the others' shift lies along the lowest-variance axis (0.5)
        out["shift_axis_variance"] = float(sigma[axis, axis])
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for truth_name, delta, values in _set_truths(args)[:getattr(args, "set_truths", 3)]:
            for design in ("paired", "unpaired"):
                res = list(pool.map(_set_dataset, [(args, truth_name, delta, design, i, values)
                                                   for i in range(args.set_datasets)], chunksize=4))
                for m, truth in values.items():
                    cell = _cell_summary(res, m, truth_name, truth, design)
                    out["cells"].append(cell)
                    print(json.dumps({"dim": d, "episodes": args.set_episodes, **cell}), flush=True)
    return out


def _bias_dataset(job: tuple) -> tuple[float, float, float]:
    """One truth-0 data set (independent sides): the plug-in FD, ``2 FD - mean FD*`` (the bootstrap's bias
    correction, ``n_resamples`` episode resamplings a side) and the jackknife-corrected FD of
    ``distribution_bootstrap``."""
    from wmeval.estimators.resample import resample_counts
    from wmeval.metrics import frechet_distance
    from wmeval.stats import distribution_bootstrap

    d, n, t, rho, n_resamples, seed, i = job
    chol = np.linalg.cholesky(np.diag(np.linspace(0.5, 2.0, d)))
    ep = np.repeat(np.arange(n), t)
    rng = make_rng(seed, "coverage", "fd_bias", d, i)
    x, y = ((np.sqrt(rho) * rng.normal(size=(n, d))[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
            for _ in range(2))

    def fd(cx: np.ndarray, cy: np.ndarray) -> float:
        def moments(z: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            mu = w @ z / w.sum()
            zc = z - mu
            return mu, (zc * w[:, None]).T @ zc / (w.sum() - 1)
        return frechet_distance(*moments(x, cx[ep].astype(float)), *moments(y, cy[ep].astype(float)))

    plug = fd(np.ones(n), np.ones(n))
    boot = np.mean([fd(a, b) for a, b in zip(resample_counts(n, n_resamples, rng), resample_counts(n, n_resamples, rng))])
    jack = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=ep + n, metric="fd_bias_corrected",
                                  n_resamples=2 * n + 3, seed=i).point
    return plug, 2 * plug - boot, jack


def fd_bias(args: argparse.Namespace) -> dict:
    """What each bias correction leaves of the plug-in FD's bias at a true 0 (two samples of one distribution,
    independent sides), at d = 4, 16 and 64: the mean over ``--bias-datasets`` data sets, with its standard error."""
    out = {"episodes": args.set_episodes, "frames_per_episode": args.set_frames, "rho": args.set_rho,
           "datasets": args.bias_datasets, "n_resamples": 100, "design": "unpaired", "dims": []}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for d in (4, 16, 64):
            res = np.array(list(pool.map(_bias_dataset, [(d, args.set_episodes, args.set_frames, args.set_rho, 100,
                                                          args.seed, i) for i in range(args.bias_datasets)])))
            row = {"dim": d}
            for j, name in enumerate(("plugin", "bootstrap_corrected", "jackknife_corrected")):
                row[name] = float(res[:, j].mean())
                row[f"{name}_se"] = float(res[:, j].std() / np.sqrt(len(res)))
            out["dims"].append(row)
            print(json.dumps(row), flush=True)
    return out


SET_METRICS = ("kid", "fd_bias_corrected")
SET_PARTS = ("sets", "sets_more_episodes", "sets_mid", "sets_wide", "sets_high_axis", "sets_more_episodes_high_axis",
             "sets_mid_high_axis")


def _part_args(args: argparse.Namespace, key: str) -> argparse.Namespace | None:
    """The options ``set_coverage`` runs part ``key`` with: ``sets`` at ``--set-episodes``, ``sets_more_episodes``
    at ``--set-more-episodes``, ``sets_mid`` at ``--set-mid-dim``, ``sets_wide`` at ``--set-wide-dim`` (with
    ``--set-wide-datasets``); ``sets_high_axis`` and ``sets_more_episodes_high_axis``, the first two with the shift
    along the highest-variance axis, and ``sets_mid_high_axis``, ``sets_mid`` with it there. None for a part whose
    option is 0."""
    more, mid, wide = args.set_more_episodes, args.set_mid_dim, args.set_wide_dim
    changes = {"sets": {}, "sets_more_episodes": more and {"set_episodes": more},
               "sets_mid": mid and {"set_dim": mid},
               "sets_wide": wide and {"set_dim": wide, "set_datasets": args.set_wide_datasets},
               "sets_high_axis": {"set_shift_axis": -1},
               "sets_more_episodes_high_axis": more and {"set_episodes": more, "set_shift_axis": -1},
               "sets_mid_high_axis": mid and {"set_dim": mid, "set_shift_axis": -1}}[key]
    return None if changes == 0 else argparse.Namespace(**{**vars(args), **changes})


def set_cells(args: argparse.Namespace) -> dict:
    """The set-level parts (:func:`_part_args`), those named by ``--parts`` (default: all)."""
    out = {}
    for key in SET_PARTS:
        if key in set(args.parts or SET_PARTS) and (part := _part_args(args, key)) is not None:
            out[key] = set_coverage(part)
    return out


def confirm(args: argparse.Namespace, old: dict) -> dict:
    """Rerun each set-level cell outside 93-97% by more than chance on its screen (the scorecard's rule,
    ``wmeval.report.scorecard.screen_flags``) on ``--confirm-datasets`` data sets its screen did not use: indices
    from the part's ``datasets`` on, with the part's own design as stored (dimension, episodes, rows, rho, shift and
    its axis, resamples). A flag a cell earned by chance alone then falls back within chance; the scorecard counts
    a screened cell as outside only where its rerun is outside on the same side too."""
    from wmeval.core.digest import changed_files
    from wmeval.report.scorecard import screen_flags

    flags = screen_flags(old)
    for flag in flags:
        part = old[flag["part"]]
        screen = next(c for c in part["cells"] if (c["metric"], c["truth"], c["design"])
                      == (flag["metric"], flag["truth"], flag["design"]))
        code = ((old.get("runs") or {}).get(screen.get("run")) or {}).get("code")
        if code and (changed := changed_files(code)):
            sys.exit(f"benchmarks/coverage.py --only confirm: {flag['name']} was screened with code that has changed "
                     f"since ({', '.join(changed)}); a rerun cannot confirm that screen: rerun the screens first "
                     "(--only sets)")
    cells = []
    with ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else nullcontext() as pool:
        run_all = partial(pool.map, chunksize=4) if pool is not None else map      # one job: in this process
        for flag in flags:
            part = old[flag["part"]]
            first = part["datasets"]
            run = argparse.Namespace(**{**vars(args), "set_dim": part["dim"], "set_episodes": part["episodes"],
                                        "set_frames": part["frames_per_episode"], "set_rho": part["rho"],
                                        "set_shift": part["shift"], "set_resamples": part["n_resamples"],
                                        "set_shift_axis": -1 if "shift_axis_variance" in part else 0,
                                        "set_metrics": [flag["metric"]]})
            truth_name, delta, values = next(t for t in _set_truths(run) if t[0] == flag["truth"])
            screen = next(c for c in part["cells"] if (c["metric"], c["truth"], c["design"])
                          == (flag["metric"], flag["truth"], flag["design"]))
            res = list(run_all(_set_dataset, [(run, truth_name, delta, flag["design"], i, values)
                                              for i in range(first, first + args.confirm_datasets)]))
            cell = {"part": flag["part"], "first_dataset": first, "datasets": args.confirm_datasets,
                    "screen": {"coverage": screen["coverage"], "width_ratio": screen["width_ratio"],
                               "datasets": first, "side": "too narrow" if flag["side"] < 0 else "too wide"},
                    **_cell_summary(res, flag["metric"], truth_name, values[flag["metric"]], flag["design"])}
            cells.append(cell)
            print(json.dumps(cell), flush=True)
    return {"datasets": args.confirm_datasets, "seed": args.seed, "cells": cells}


def merge_metrics(old: dict, new: dict, metrics: list[str]) -> dict:
    """``new``'s parts, each with the cells of the metrics not run (``--set-metrics`` left them out) kept from
    ``old``'s same part: the data sets are the same (their seeds depend on the cell and index alone), so a metric
    whose code did not change keeps its figures. Cells keep ``old``'s order."""
    out = {}
    for key, part in new.items():
        prev = old.get(key) or {}
        if set(metrics) >= set(SET_METRICS) or not prev:
            out[key] = part
            continue
        fresh = {(c["metric"], c["truth"], c["design"]): c for c in part["cells"]}
        cells = [fresh.pop((c["metric"], c["truth"], c["design"]), c) for c in prev["cells"]]
        out[key] = {**part, "cells": cells + list(fresh.values())}
    return out


def run_stamp(argv: list[str]) -> tuple[str, dict]:
    """``(key, stamp)`` for this run: the code its figures come from (this script and the ``wmeval`` modules it
    imports, each file's sha256), the command, the packages, the numerical kernels in effect, Python and the date
    (UTC); the key is the first 12 hex digits of the stamp's sha256."""
    from wmeval.core.digest import code_files
    from wmeval.lineage.provenance import kernels_in_effect, package_versions

    stamp = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "command": " ".join(["python", "benchmarks/coverage.py", *argv]),
             "code": code_files(Path(__file__), skip=BOOKKEEPING),
             "packages": {k: v for k, v in package_versions().items() if k in ("numpy", "scipy", "torch")},
             "kernels": kernels_in_effect(), "python": platform.python_version()}
    return hashlib.sha256(json.dumps(stamp, sort_keys=True).encode()).hexdigest()[:12], stamp


def check_code_unchanged(stamp: dict) -> None:
    """Stop (exit 1, nothing written) where a file of the run's code changed while it ran: its workers import the
    modules when they start, so its figures could come from either version."""
    from wmeval.core.digest import changed_files

    if (changed := changed_files(stamp["code"])):
        sys.exit(f"benchmarks/coverage.py: {', '.join(changed)} changed while the run went on; its figures may come "
                 "from either version, so nothing was written: rerun it")


def _runs_in(res: dict) -> set[str]:
    """The run keys a results file's figures carry (top level, each part, set-level cell and rerun)."""
    keys = {res.get("run")}
    for value in res.values():
        if isinstance(value, dict):
            keys.add(value.get("run"))
            keys |= {c.get("run") for c in value.get("cells", []) if isinstance(c, dict)}
    return keys - {None}


def with_runs(res: dict, old: dict, key: str, stamp: dict) -> dict:
    """``res`` with its ``runs``: ``old``'s and this run's (``key``), those no figure carries any more left out."""
    runs = {**(old.get("runs") or {}), key: stamp}
    used = _runs_in(res)
    return {**{k: v for k, v in res.items() if k != "runs"}, "runs": {k: v for k, v in runs.items() if k in used}}


def _write(path: str, res: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(res, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=500)
    ap.add_argument("--rho", type=float, default=0.8)
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--fd-datasets", type=int, default=500)
    ap.add_argument("--fd-resamples", type=int, default=500)
    ap.add_argument("--set-datasets", type=int, default=400)
    ap.add_argument("--set-resamples", type=int, default=500)
    ap.add_argument("--set-episodes", type=int, default=32)
    ap.add_argument("--set-more-episodes", type=int, default=64,
                    help="run the set-level cells again at this many episodes (0: not); small-sample effects shrink")
    ap.add_argument("--set-mid-dim", type=int, default=16,
                    help="run the set-level cells again at this feature dimension (0: not)")
    ap.add_argument("--set-wide-dim", type=int, default=64,
                    help="run the cells again at this feature dimension (the pixel encoder's; 0: not)")
    ap.add_argument("--set-wide-datasets", type=int, default=150)
    ap.add_argument("--set-frames", type=int, default=10)
    ap.add_argument("--set-dim", type=int, default=4)
    ap.add_argument("--set-rho", type=float, default=0.5)
    ap.add_argument("--set-shift", type=float, default=0.5)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for the set-level cells")
    ap.add_argument("--bias-datasets", type=int, default=60)
    ap.add_argument("--set-metrics", nargs="+", choices=SET_METRICS, default=list(SET_METRICS),
                    help="with --only sets: run these metrics' cells and keep the others' figures (default: both)")
    ap.add_argument("--parts", nargs="+", choices=SET_PARTS, default=None,
                    help="with --only sets: run these set-level parts and keep the others' figures (default: all)")
    ap.add_argument("--only", choices=["means", "sets", "bias", "confirm"], default=None,
                    help="run one part and keep the other's figures from the existing results file (confirm: rerun "
                         "the set-level cells outside 93-97%% beyond chance on fresh data sets)")
    ap.add_argument("--confirm-datasets", type=int, default=1000,
                    help="with --only confirm: data sets per rerun cell, none of them its screen's")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "coverage.json"))
    args = ap.parse_args()
    if set(args.set_metrics) != set(SET_METRICS) and args.only != "sets":
        ap.error("--set-metrics leaves a metric's cells out: use it with --only sets, which keeps their old figures")
    old = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
    key, stamp = run_stamp(sys.argv[1:])
    if args.only == "confirm":
        res = {**old, "confirmation": {**confirm(args, old), "run": key}}
    elif args.only == "bias":
        res = {**old, "fd_bias": {**fd_bias(args), "run": key}}
    elif args.only == "sets":
        res = {**old, **merge_metrics(old, _tagged(set_cells(args), key), args.set_metrics)}
    else:
        res = {**means_coverage(args), "run": key}
        res["frechet"] = {**frechet_coverage(args), "run": key}
        res.update({k: old.get(k) for k in SET_PARTS} if args.only == "means" else _tagged(set_cells(args), key))
        res["fd_bias"] = old.get("fd_bias") if args.only == "means" else {**fd_bias(args), "run": key}
        if args.only == "means" and old.get("confirmation"):
            res["confirmation"] = old["confirmation"]      # the set-level cells it reran are unchanged
        print(json.dumps(res, indent=2))
    check_code_unchanged(stamp)
    _write(args.out, with_runs(res, old, key, stamp))


def _tagged(parts: dict, key: str) -> dict:
    """Set-level parts with each cell carrying run ``key`` (a part's cells may come from different runs: ``--only
    sets --set-metrics`` keeps the other metric's)."""
    return {k: {**part, "cells": [{**c, "run": key} for c in part["cells"]]} for k, part in parts.items()}


def means_coverage(args: argparse.Namespace) -> dict:
    """The episode-clustered and the frame-level iid intervals of a mean (the module docstring's first part)."""
    n, t, rho = args.episodes, args.frames, args.rho
    clusters = np.repeat(np.arange(n), t)
    frames = np.arange(n * t)
    hit = {"cluster": 0, "iid_frames": 0}
    width = {"cluster": [], "iid_frames": []}
    for i in range(args.datasets):
        rng = make_rng(args.seed, "coverage", "data", i)
        values = (np.sqrt(rho) * rng.normal(size=(n, 1)) + np.sqrt(1 - rho) * rng.normal(size=(n, t))).ravel()
        for name, ids in (("cluster", clusters), ("iid_frames", frames)):
            r = cluster_bootstrap(values, ids, n_resamples=args.resamples, seed=args.seed * 100003 + i)
            hit[name] += r.low <= 0.0 <= r.high
            width[name].append(r.high - r.low)
    res = {"datasets": args.datasets, "episodes": n, "frames_per_episode": t, "rho": rho,
           "n_resamples": args.resamples, "confidence_level": 0.95, "method": "percentile"}
    for name in hit:
        p = hit[name] / args.datasets
        res[name] = {"coverage": p, "coverage_se": float(np.sqrt(p * (1 - p) / args.datasets)),
                     "median_width": float(np.median(width[name]))}
    return res


if __name__ == "__main__":
    main()
