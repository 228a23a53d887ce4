"""The lineage of one metric, traced to bytes: ``wmeval audit WORLD/SOURCE/METRIC[/REGIME/CONDITION]``.

An audit reads ``reports/metrics.json`` (keyed world -> source -> metric -> ``regime/condition``)
and assembles, for every matching condition:

* the value, its interval and the interval protocol (``data/bootstrap/protocol.json`` and the
  metric's row of ``data/bootstrap/intervals.parquet``);
* the chain of stages that computed it (``dvc.lock``: the stage writing ``reports/metrics.json``
  and, recursively, the stages whose outputs it depends on), each with its command, params
  values and the md5 of every dep and out;
* the feature tables and rollout tables it was computed from, with their Parquet metadata
  (encoder, weights sha256, preprocessing; world, model config, seed, code digest), each with
  its own md5 and the ``dvc.lock`` directory entry that covers it.

Before anything is reported, the workspace is checked against ``dvc.lock``: every output of the
chain is hashed here (files: md5 of the bytes, as DVC 3 does; directories: the md5 of DVC's
``.dir`` listing, computed with DVC's own :class:`dvc_data.hashfile.tree.Tree`) and ``dvc status``
is asked about the chain's stages. Any difference (an output edited by hand, deleted, or stale
after a dep or param change) refuses the audit with :class:`StaleWorkspaceError`, naming the file
and the expected and actual md5. Nothing is invented: what cannot be determined is reported as
such.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from wmeval.core.digest import code_version, file_sha256, md5_file
from wmeval.core.errors import WmevalError
from wmeval.lineage.provenance import read_lock
from wmeval.metrics import REGISTRY
from wmeval.rendering.document import OPEN_AT_ZERO
from wmeval.tables import read_metadata

log = logging.getLogger(__name__)

METRICS_FILE = "reports/metrics.json"
FEATURES_DIR, ROLLOUTS_DIR = "data/features", "data/rollouts"
BOOTSTRAP_DIR = "data/bootstrap"
#: Units whose per-episode values come from the dynamics rollouts (``data/rollouts/<world>/dynamics``).
DYNAMICS_UNITS = ("dynamics", "control")


class StaleWorkspaceError(WmevalError):
    """The workspace's outputs do not match ``dvc.lock``: an audit would describe other bytes."""


# ----------------------------------------------------------------------------- hashing

def dir_file_md5s(path: Path) -> dict[str, str]:
    """``{relpath: md5}`` for every file under ``path`` (POSIX relative paths, sorted)."""
    return {f.relative_to(path).as_posix(): md5_file(f) for f in sorted(path.rglob("*")) if f.is_file()}


def dir_md5(files: dict[str, str]) -> str:
    """DVC's md5 of a directory output (``<md5>.dir``) from its files' md5s.

    Uses DVC's own tree object, so the listing is serialized exactly as ``dvc`` does.
    """
    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.tree import Tree

    tree = Tree()
    for rel, md5 in files.items():
        tree.add(tuple(rel.split("/")), None, HashInfo("md5", md5))
    tree.digest()
    return tree.hash_info.value


def out_md5(path: Path) -> tuple[str | None, dict[str, str] | None]:
    """The DVC md5 of an output (``None`` when missing) and, for a directory, its files' md5s."""
    if path.is_file():
        return md5_file(path), None
    if path.is_dir():
        files = dir_file_md5s(path)
        return dir_md5(files), files
    return None, None


def cached_listing(root: Path, md5: str) -> dict[str, str] | None:
    """The ``{relpath: md5}`` listing of a ``.dir`` md5 from the DVC cache, or ``None`` if not cached."""
    if not md5.endswith(".dir"):
        return None
    for base in (root / ".dvc" / "cache" / "files" / "md5", root / ".dvc" / "cache"):
        f = base / md5[:2] / md5[2:]
        if f.is_file():
            try:
                return {e["relpath"]: e["md5"] for e in json.loads(f.read_text(encoding="utf-8"))}
            except (json.JSONDecodeError, KeyError, TypeError):
                return None
    return None


# ----------------------------------------------------------------------------- dvc.lock

def stage_chain(lock: dict[str, Any], out: str = METRICS_FILE) -> list[str]:
    """The stage that wrote ``out`` and every stage upstream of it, nearest first.

    Raises:
        WmevalError: no stage in ``dvc.lock`` has ``out`` as an output.
    """
    stages = lock["stages"]
    producer = {o["path"]: name for name, st in stages.items() for o in (st or {}).get("outs", [])}
    if out not in producer:
        raise WmevalError(f"dvc.lock: no stage has {out!r} among its outs (outs: {sorted(producer)}); "
                          "run `dvc repro` first")
    chain, todo = [], [producer[out]]
    while todo:
        name = todo.pop(0)
        if name in chain:
            continue
        chain.append(name)
        for d in stages[name].get("deps", []):
            if d["path"] in producer and producer[d["path"]] not in chain:
                todo.append(producer[d["path"]])
    order = list(stages)  # dvc.lock lists stages in pipeline order
    return sorted(chain, key=lambda n: -order.index(n))


def _dvc_status(root: Path, stages: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """``dvc status --json STAGES`` parsed, or ``(None, why)`` when it cannot be run."""
    cmd = [sys.executable, "-m", "dvc", "status", "--json", *stages]
    try:
        r = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"`dvc status` could not run: {e}"
    if r.returncode != 0:
        return None, f"`dvc status` failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}"
    try:
        return json.loads(r.stdout or "{}"), None
    except json.JSONDecodeError:
        return None, f"`dvc status --json` printed no JSON: {r.stdout[-300:]!r}"


def verify(root: Path, lock: dict[str, Any], chain: list[str], dvc_status: bool = True) -> list[str]:
    """Differences between the workspace and ``dvc.lock`` for the outputs of ``chain``.

    Every output is hashed here and compared with its ``dvc.lock`` md5; for a directory whose
    listing is in the DVC cache, the differing files are named with their own md5s. With
    ``dvc_status``, ``dvc status`` is asked too (it also sees changed deps and params: a stale
    output).

    Returns:
        One line per problem (empty when the workspace matches).
    """
    problems: list[str] = []
    for name in chain:
        for o in lock["stages"][name].get("outs", []):
            path, expected = o["path"], o.get("md5")
            actual, files = out_md5(root / path)
            if actual == expected:
                continue
            if actual is None:
                problems.append(f"{path} (out of stage {name!r}): missing; dvc.lock expects md5 {expected}")
                continue
            problems.append(f"{path} (out of stage {name!r}): md5 {actual}, dvc.lock expects {expected}")
            listing = cached_listing(root, expected or "")
            if files is not None and listing is not None:
                for rel in sorted(set(listing) | set(files)):
                    a, e = files.get(rel), listing.get(rel)
                    if a != e:
                        what = ("missing" if a is None else "not in dvc.lock's listing" if e is None
                                else f"md5 {a}, dvc.lock's listing expects {e}")
                        problems.append(f"  {path}/{rel}: {what}" + (f" (actual md5 {a})" if e is None else ""))
            elif files is not None:
                problems.append(f"  (the listing of {expected} is not in the DVC cache, so the changed files "
                                "cannot be named)")
    if dvc_status:
        status, why = _dvc_status(root, chain)
        if status is None:
            problems.append(f"cannot confirm with dvc: {why}")
        else:
            for stage, changes in sorted(status.items()):
                for change in changes:
                    problems.append(f"dvc status: stage {stage!r}: {json.dumps(change, sort_keys=True)}")
    return problems


# ----------------------------------------------------------------------------- the metric

def _close(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=5, cutoff=0.5)
    return f"close matches: {close}" if close else f"known: {sorted(options)[:40]}"


def find_metric(metrics: dict[str, Any], spec: str, condition: str | None = None,
                where: str = METRICS_FILE) -> tuple[str, str, str, dict[str, dict[str, Any]]]:
    """Resolve ``WORLD/SOURCE/METRIC[/REGIME[/CONDITION]]`` in a metrics.json mapping.

    Args:
        metrics: the parsed ``reports/metrics.json``.
        spec: the metric path; a trailing ``REGIME`` or ``REGIME/CONDITION`` selects conditions.
        condition: alternatively, ``REGIME/CONDITION``, ``REGIME`` or ``CONDITION``.
        where: the file name used in messages.

    Returns:
        ``(world, source, metric, {"regime/condition": values})``, every matching condition.

    Raises:
        WmevalError: a part does not exist (with close matches) or no condition matches.
    """
    parts = spec.strip("/").split("/", 3)
    if len(parts) < 3:
        raise WmevalError(f"metric {spec!r}: expected WORLD/SOURCE/METRIC[/REGIME/CONDITION], "
                          f"e.g. blobs/reversed/fd_stratified")
    world, source, metric = parts[:3]
    if len(parts) == 4:
        if condition is not None:
            raise WmevalError(f"metric {spec!r} already names a condition; drop --condition {condition!r}")
        condition = parts[3]
    node: Any = metrics
    path: list[str] = []
    for label, key in (("world", world), ("source", source), ("metric", metric)):
        if not isinstance(node, dict) or key not in node:
            opts = list(node) if isinstance(node, dict) else []
            raise WmevalError(f"{where}: {label} {key!r} not found under {'/'.join(path) or 'the top level'}; "
                              f"{_close(key, opts)}")
        node = node[key]
        path.append(key)
    conds: dict[str, dict[str, Any]] = node
    if condition is None:
        chosen = dict(conds)
    else:
        chosen = {k: v for k, v in conds.items()
                  if condition in (k, k.partition("/")[0], k.partition("/")[2])}
    if not chosen:
        raise WmevalError(f"{where}: {world}/{source}/{metric} has no condition {condition!r}; "
                          f"{_close(condition or '', list(conds))}")
    return world, source, metric, chosen


# ----------------------------------------------------------------------------- lineage

def _stage_record(lock: dict[str, Any], name: str) -> dict[str, Any]:
    st = lock["stages"][name]
    return {"stage": name, "cmd": st.get("cmd"), "params": dict(st.get("params") or {}),
            "deps": [{"path": d["path"], "md5": d.get("md5")} for d in st.get("deps", [])],
            "outs": [{"path": o["path"], "md5": o.get("md5")} for o in st.get("outs", [])]}


def _covering(lock: dict[str, Any], rel: str) -> tuple[str, str, str | None] | None:
    """``(stage, out path, out md5)`` of the ``dvc.lock`` out that holds ``rel`` (a file path)."""
    for name, st in lock["stages"].items():
        for o in st.get("outs", []):
            if rel == o["path"] or rel.startswith(o["path"].rstrip("/") + "/"):
                return name, o["path"], o.get("md5")
    return None


def _file_record(root: Path, lock: dict[str, Any], rel: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """One table on the lineage: its md5, the dvc.lock entry covering it and selected metadata."""
    path = root / rel
    rec: dict[str, Any] = {"path": rel}
    if not path.is_file():
        rec["missing"] = True
        return rec
    rec["md5"] = md5_file(path)
    cov = _covering(lock, rel)
    if cov is None:
        rec["covered_by"] = None
    else:
        stage, out, md5 = cov
        listing = cached_listing(root, md5 or "")
        inner = rel[len(out) + 1:]
        rec["covered_by"] = {"stage": stage, "out": out, "md5": md5,
                             "listed_md5": listing.get(inner) if listing is not None else None,
                             "listing_in_cache": listing is not None}
    try:
        meta = read_metadata(path)
    except WmevalError as e:
        rec["metadata_error"] = str(e)
        return rec
    rec["metadata"] = {k: meta.get(k) for k in keys}
    return rec


def _interval_rows(root: Path, world: str, source: str, metric: str) -> tuple[list[dict[str, Any]], str | None]:
    path = root / BOOTSTRAP_DIR / "intervals.parquet"
    if not path.is_file():
        return [], f"{path.relative_to(root)} is missing"
    import pandas as pd

    iv = pd.read_parquet(path)
    sel = iv[(iv.world == world) & (iv.source == source) & (iv.metric == metric)]
    return json.loads(sel.to_json(orient="records")), None


def _code_check(root: Path, tables: list[dict[str, Any]], notes: list[str]) -> dict[str, Any]:
    """Each table's recorded code digest against the current digest of its stage's code deps."""
    recorded = {json.dumps(t["metadata"]["code"], sort_keys=True)
                for t in tables if (t.get("metadata") or {}).get("code")}
    out = {"recorded_in_tables": [json.loads(c) for c in sorted(recorded)], "current": {}}
    for rec in out["recorded_in_tables"]:
        stage = rec.get("stage")
        if stage is None:
            notes.append("a table records no stage with its code digest (written by an older wmeval)")
            continue
        try:
            out["current"][stage] = current = code_version(stage, root)
        except WmevalError as e:
            notes.append(f"the code of stage {stage!r} cannot be digested: {e}")
            continue
        if current["source_sha256"] != rec.get("source_sha256"):
            notes.append(f"the {stage} stage's code differs from the code that wrote its tables "
                         "(the numbers are those of the recorded code; dvc repro re-runs it)")
    return out


def _checked_metrics(root: Path, check: bool) -> tuple[dict[str, Any], Path, list[str], dict[str, Any]]:
    """``(lock, metrics file, stage chain, metrics)`` after checking the workspace against the lock."""
    lock = read_lock(root)
    if lock is None:
        raise WmevalError(f"{root / 'dvc.lock'}: missing; run `dvc repro` before auditing")
    mfile = root / METRICS_FILE
    if not mfile.is_file():
        raise WmevalError(f"{mfile}: missing; run `dvc repro` before auditing")
    chain = stage_chain(lock)
    if check:
        problems = verify(root, lock, chain)
        if problems:
            raise StaleWorkspaceError(
                "the workspace does not match dvc.lock, so its numbers cannot be traced; refusing to audit. "
                "Run `dvc repro` (or `dvc checkout` to restore the recorded outputs):\n  " + "\n  ".join(problems))
    try:
        metrics = json.loads(mfile.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise WmevalError(f"{mfile}: not valid JSON: {e}") from None
    return lock, mfile, chain, metrics


#: Interval fields an audit lists per condition.
INTERVAL_FIELDS = ("method", "n_resamples", "confidence_level", "resampling_unit", "n_clusters", "unit", "baseline",
                   "rank", "rank_low", "rank_high", "undefined_replicates", "aggregate", "leftover_bias",
                   "leftover_bias_se", "bias_check", "p_value")


def _conditions(root: Path, world: str, source: str, metric: str, chosen: dict[str, Any],
                notes: list[str]) -> tuple[list[dict[str, Any]], set[str]]:
    """Each chosen condition's values with its interval's fields, and the resampling units seen."""
    rows, why = _interval_rows(root, world, source, metric)
    if why:
        notes.append(why + ": per-row interval fields are not known")
    conditions, units = [], set()
    for key, values in sorted(chosen.items()):
        regime, _, cond = key.partition("/")
        row = next((r for r in rows if r["regime"] == regime and r["condition"] == cond), None)
        entry: dict[str, Any] = {"key": key, "regime": regime, "condition": cond, "values": values}
        if row is not None:
            units.add(row["unit"])
            entry["interval"] = {k: row.get(k) for k in INTERVAL_FIELDS}
        elif not why:
            notes.append(f"{key}: no row in {BOOTSTRAP_DIR}/intervals.parquet")
        conditions.append(entry)
    return conditions, units


def _interval_protocol(root: Path, world: str, metric: str, notes: list[str]) -> dict[str, Any] | None:
    proto_path = root / BOOTSTRAP_DIR / "protocol.json"
    if not proto_path.is_file():
        notes.append(f"{BOOTSTRAP_DIR}/protocol.json is missing: the interval protocol is not known")
        return None
    protocol = json.loads(proto_path.read_text(encoding="utf-8"))
    return {"bootstrap": protocol.get("bootstrap"),
            "strata": {k: (protocol.get("scoring") or {}).get(k)
                       for k in ("strata", "action_bins", "strata_weights", "min_stratum_count")},
            "definition": (protocol.get("metrics") or {}).get(metric),
            "world": {k: ((protocol.get("worlds") or {}).get(world) or {}).get(k)
                      for k in ("baseline", "n_episodes", "horizon", "units")}}


FEATURE_KEYS = ("encoder", "kind", "dim", "weights_sha256", "preprocessing", "resolution", "clip",
                "comparable_to_published", "precision", "input", "code")
ROLLOUT_KEYS = ("world_config", "model_config", "seed", "protocol", "num_samples", "stochastic", "code", "format")


def _input_check(root: Path, world: str, table: dict[str, Any], notes: list[str]) -> None:
    """Whether a feature table's recorded input sha256 is that of the workspace's rollout table."""
    inp = (table.get("metadata") or {}).get("input") or {}
    src = f"{ROLLOUTS_DIR}/{world}/{Path(table['path']).name}"
    if not inp.get("sha256") or not (root / src).is_file():
        table["input_check"] = f"cannot check: no input sha256 recorded or {src} missing"
        return
    ok = file_sha256(root / src) == inp["sha256"]
    table["input_check"] = (f"computed from {src} (sha256 {inp['sha256']}): "
                            + ("matches the workspace file" if ok else "DOES NOT match the workspace file"))
    if not ok:
        notes.append(f"{table['path']} records input sha256 {inp['sha256']}, but {src} differs")


def _source_tables(root: Path, lock: dict[str, Any], world: str, source: str, metric: str, units: set[str],
                   notes: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The feature and rollout tables the metric was computed from, by its unit and layer."""
    info = REGISTRY.get(metric)
    encoder = next((((st.get("params") or {}).get("params.yaml") or {}).get("encoder", {}).get("name")
                    for name, st in lock["stages"].items() if name == "features"), None)
    sources = [source] if source == "ground_truth" else [source, "ground_truth"]
    feature_tables = []
    if info is not None and info.uses_encoder:
        if encoder is None:
            notes.append("dvc.lock's features stage records no encoder.name: the feature tables are not known")
        else:
            feature_tables = [_file_record(root, lock, f"{FEATURES_DIR}/{encoder}/{world}/{s}.parquet", FEATURE_KEYS)
                              for s in sources]
    if not units:
        notes.append("the metric's unit is not known: the rollout tables listed are the observation tables")
    sub = "dynamics/" if units & set(DYNAMICS_UNITS) else ""
    rollout_tables = [_file_record(root, lock, f"{ROLLOUTS_DIR}/{world}/{sub}{s}.parquet", ROLLOUT_KEYS)
                      for s in sources]
    for t in feature_tables:
        _input_check(root, world, t, notes)
    if info is None:
        notes.append(f"metric {metric!r} is not in wmeval's registry: which tables it reads is not known")
    return feature_tables, rollout_tables


def lineage(root: Path, spec: str, condition: str | None = None, check: bool = True) -> dict[str, Any]:
    """The lineage of a metric, after checking the workspace against ``dvc.lock``.

    Args:
        root: the project root.
        spec: ``WORLD/SOURCE/METRIC[/REGIME/CONDITION]`` (a key path of ``reports/metrics.json``).
        condition: ``REGIME/CONDITION`` (or one of its parts) when ``spec`` has none.
        check: verify the workspace first (``False`` only for inspecting a known-stale workspace).

    Returns:
        A JSON-able dict: ``metric``, ``conditions`` (values and interval protocol per condition),
        ``stages`` (nearest first), ``feature_tables``, ``rollout_tables``, ``code`` and ``notes``
        (what could not be determined).

    Raises:
        StaleWorkspaceError: an output of the chain does not match ``dvc.lock`` (or ``dvc status``
            reports the chain as changed).
        WmevalError: no ``dvc.lock`` or metrics file, or the metric does not exist.
    """
    root = Path(root).resolve()
    lock, mfile, chain, metrics = _checked_metrics(root, check)
    world, source, metric, chosen = find_metric(metrics, spec, condition)
    notes: list[str] = []
    interval_protocol = _interval_protocol(root, world, metric, notes)
    conditions, units = _conditions(root, world, source, metric, chosen, notes)
    feature_tables, rollout_tables = _source_tables(root, lock, world, source, metric, units, notes)
    code = _code_check(root, feature_tables + rollout_tables, notes)
    info = REGISTRY.get(metric)
    return {"metric": {"world": world, "source": source, "metric": metric,
                       "definition": None if info is None else info.definition,
                       "higher_is_better": None if info is None else info.higher_is_better,
                       "target": None if info is None else info.target},
            "metrics_file": {"path": METRICS_FILE, "md5": md5_file(mfile),
                             "lock_md5": next((o.get("md5") for o in lock["stages"][chain[0]].get("outs", [])
                                               if o["path"] == METRICS_FILE), None)},
            "verified": bool(check),
            "conditions": conditions, "interval_protocol": interval_protocol,
            "stages": [_stage_record(lock, name) for name in chain],
            "feature_tables": feature_tables, "rollout_tables": rollout_tables, "code": code, "notes": notes}


# ----------------------------------------------------------------------------- text

def _fmt(x: Any) -> str:
    """A value for the audit's text: a number to 6 significant digits, ``n/a`` for a missing one (None or NaN,
    such as the rank and interval a failed bias check withholds)."""
    if isinstance(x, float):
        return "n/a" if x != x else f"{x:.6g}"
    return "n/a" if x is None else str(x)


def _table_lines(t: dict[str, Any]) -> list[str]:
    out = [f"    {t['path']}"]
    if t.get("missing"):
        return out + ["      missing from the workspace"]
    cov = t.get("covered_by")
    out.append(f"      md5 {t['md5']}")
    if cov is None:
        out.append("      not covered by any dvc.lock out")
    else:
        listed = cov["listed_md5"]
        where = (f"listed with md5 {listed}" if listed else
                 "listing not in the DVC cache: per-file md5 not confirmable" if not cov["listing_in_cache"]
                 else "NOT in the listing")
        out.append(f"      covered by dvc.lock: stage {cov['stage']}, out {cov['out']} ({cov['md5']}; {where})")
    if t.get("input_check"):
        out.append(f"      input: {t['input_check']}")
    if "metadata_error" in t:
        out.append(f"      metadata: {t['metadata_error']}")
    for k, v in (t.get("metadata") or {}).items():
        out.append(f"      {k}: {json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else _fmt(v)}")
    return out


def format_lineage(lin: dict[str, Any]) -> str:
    """The lineage as indented text for a terminal."""
    m = lin["metric"]
    arrow = {True: "higher is better", False: "lower is better",
             None: "no direction" if m.get("target") is None else f"ideal value {m['target']:g}"}[m["higher_is_better"]]
    lines = [f"{m['world']}/{m['source']}/{m['metric']} ({arrow})"]
    if m["definition"]:
        lines.append(f"  definition: {m['definition']}")
    mf = lin["metrics_file"]
    lines.append(f"  from {mf['path']} md5 {mf['md5']} (dvc.lock: {mf['lock_md5']})"
                 + ("" if lin["verified"] else "  [workspace NOT verified against dvc.lock]"))
    lines.append("")
    lines.append("values")
    for c in lin["conditions"]:
        v = c["values"]
        low = v.get("low")
        opened = low is not None and 0 < low < OPEN_AT_ZERO   # the permutation test took 0 out: open at 0
        s = f"  {c['key']}: {_fmt(v.get('point'))} {'(0' if opened else '[' + _fmt(low)}, {_fmt(v.get('high'))}]"
        if "diff_to_baseline" in v:
            s += (f"; diff to baseline {_fmt(v['diff_to_baseline'])} [{_fmt(v.get('diff_low'))}, "
                  f"{_fmt(v.get('diff_high'))}], P(better) {_fmt(v.get('p_better'))}"
                  + (f", P(tie) {_fmt(v['p_tie'])}" if v.get("p_tie") else ""))
        lines.append(s)
        iv = c.get("interval")
        if iv:
            lines.append(f"    interval: {iv['method']}, B = {iv['n_resamples']}, level {iv['confidence_level']}, "
                         f"resampling unit {iv['resampling_unit']} (n = {iv['n_clusters']}), baseline "
                         f"{_fmt(iv['baseline'])}, rank {_fmt(iv['rank'])} [{_fmt(iv['rank_low'])}, "
                         f"{_fmt(iv['rank_high'])}]")
            if iv.get("bias_check"):
                lines.append(f"    bias check: {iv['bias_check']} (the jackknife's correction leaves an estimated "
                             f"{_fmt(iv.get('leftover_bias'))} +- {_fmt(iv.get('leftover_bias_se'))})")
            if iv.get("p_value") is not None:            # JSON null: no test ran
                rejects = iv["p_value"] <= round(1 - iv["confidence_level"], 12)
                what = ("no interval to put 0 in or take it out of" if low is None or v.get("high") is None
                        else "0 taken out of the interval" if opened
                        else "0 not in the interval; the test rejects 0" if rejects and low > 0
                        else "rejects 0, but the interval lies at or below 0 and is kept" if rejects
                        else "0 in the interval")
                lines.append(f"    permutation test of 0: p = {_fmt(iv['p_value'])} ({what})")
    ip = lin["interval_protocol"]
    if ip:
        b = ip["bootstrap"] or {}
        lines += ["", "interval protocol (data/bootstrap/protocol.json)"]
        for k in sorted(b):
            lines.append(f"  {k}: {_fmt(b[k])}")
        lines.append(f"  strata (scoring): {json.dumps(ip['strata'], sort_keys=True)}")
    lines += ["", "stages (dvc.lock), nearest first"]
    for st in lin["stages"]:
        lines.append(f"  {st['stage']}: {st['cmd']}")
        for file, values in st["params"].items():
            for k, v in values.items():
                lines.append(f"    param {file}:{k} = {json.dumps(v, sort_keys=True)}")
        for d in st["deps"]:
            lines.append(f"    dep {d['path']} md5 {d['md5']}")
        for o in st["outs"]:
            lines.append(f"    out {o['path']} md5 {o['md5']}")
    for label, key in (("feature tables", "feature_tables"), ("rollout tables", "rollout_tables")):
        lines += ["", label]
        if not lin[key]:
            lines.append("  none: this metric does not read them")
        for t in lin[key]:
            lines += _table_lines(t)
    c = lin["code"]
    lines += ["", "code", f"  recorded in the tables: {json.dumps(c['recorded_in_tables'], sort_keys=True)}",
              f"  installed now: {json.dumps(c['current'], sort_keys=True)}"]
    if lin["notes"]:
        lines += ["", "could not be determined / notes"] + [f"  - {n}" for n in lin["notes"]]
    return "\n".join(lines) + "\n"
