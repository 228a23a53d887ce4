"""The ``wmeval`` command line."""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import sys
from pathlib import Path

from wmeval.core.errors import WmevalError


def _cmd_compose(args: argparse.Namespace) -> int:
    import yaml

    from wmeval.core.config import PARAMS_FILE, compose_text, find_root, validate_params

    root = find_root()
    text = compose_text(args.overrides, root)
    validate_params(yaml.safe_load(text), "composed config")
    out = Path(args.output) if args.output else root / PARAMS_FILE
    if args.check:
        current = out.read_text(encoding="utf-8") if out.is_file() else ""
        if current == text:
            print(f"{out}: up to date with conf/")
            return 0
        diff = difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                    fromfile=f"{out} (committed)", tofile="conf/ (composed)")
        sys.stdout.writelines(diff)
        print(f"\n{out} is stale: run `wmeval compose{' ' + ' '.join(args.overrides) if args.overrides else ''}`",
              file=sys.stderr)
        return 1
    from wmeval.tables import atomic_write_text

    atomic_write_text(out, text)
    print(f"wrote {out}")
    return 0


def _cmd_episodes(args: argparse.Namespace) -> int:
    from wmeval.core.config import load_params
    from wmeval.rollouts import export_episodes

    params = load_params(args.params)
    if args.world not in params.worlds:
        raise WmevalError(f"{args.params}: world {args.world!r} is not selected (worlds: {sorted(params.worlds)})")
    export_episodes(params.worlds[args.world], params.protocol, Path(args.out))
    print(f"wrote the evaluation episodes of {args.world!r} to {args.out}")
    return 0


def _cmd_weights(args: argparse.Namespace) -> int:
    from wmeval.encoders.weights import WEIGHTS, expected, fetch, status, weights_dir

    directory = weights_dir(args.dir)
    if args.action == "list":
        print(f"weights directory: {directory}")
        print(f"{'name':<14} {'file':<40} {'status':<9} sha256 (expected / present)")
        for spec in WEIGHTS.values():
            path, actual, verdict = status(spec, directory)
            print(f"{spec.name:<14} {spec.filename:<40} {verdict:<9} {expected(spec)} / {actual or '-'}")
            print(f"{'':<14} {spec.used_by}")
        return 0
    if args.name not in WEIGHTS:
        raise WmevalError(f"unknown weights {args.name!r}; known: {sorted(WEIGHTS)}")
    print(f"wrote {fetch(WEIGHTS[args.name], directory)}")
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    import time

    from wmeval.features.cache import cache_entries, cache_root, prune

    root = cache_root(args.cache_dir)
    if not root.is_dir():
        print(f"feature cache: {root} does not exist (nothing cached yet)")
        return 0
    entries = prune(root, dry_run=args.dry_run) if args.action == "prune" else cache_entries(root)
    verb = {"list": "holds", "prune": "would remove" if args.dry_run else "removed"}[args.action]
    print(f"feature cache: {root} {verb} {len(entries)} encoder key(s), {sum(e['bytes'] for e in entries):,} bytes")
    print(f"{'key':<14} {'encoder':<14} {'kind':<14} {'shards':>6} {'bytes':>14}  {'last write (UTC)':<17} made by")
    for e in entries:
        ident = e["identity"] or {}
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(e["last_write"]))
        made = ("this code" if e["current"] else "other code or library releases" if ident.get("code")
                else "code before it was keyed" if ident else "unknown (no encoder.json)")
        print(f"{e['key'][:12]:<14} {str(ident.get('encoder', '?')):<14} {str(ident.get('kind', '?')):<14} "
              f"{e['shards']:>6} {e['bytes']:>14,}  {when:<17} {made}")
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    import json

    from wmeval.core.config import find_root
    from wmeval.lineage.audit import format_lineage, lineage

    root = Path(args.root).resolve() if args.root else find_root()
    lin = lineage(root, args.metric, args.condition)
    if args.json:
        print(json.dumps(lin, indent=2, sort_keys=True))
    else:
        sys.stdout.write(format_lineage(lin))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from wmeval.core.config import find_root
    from wmeval.sweep import sweep_report

    root = Path(args.root).resolve() if args.root else find_root()
    out = Path(args.out) if args.out else root / "reports" / "sweep"
    written = sweep_report(root, out, all_commits=args.all_commits)
    for f in written:
        print(f"wrote {f}")
    return 0


def _cmd_dataset(args: argparse.Namespace) -> int:
    from wmeval.worlds.convert import from_minari, from_videos

    out = Path(args.out)
    if out.exists() and not args.force:
        raise WmevalError(f"{out}: exists; pass --force to replace it")
    size = {"frame_height": args.frame_height, "frame_width": args.frame_width, "resize_filter": args.resize_filter}
    if args.source == "minari":
        n = from_minari(args.input, out, frame_key=args.frame_key, state_key=args.state_key, **size)
    else:
        n = from_videos(args.input, out, grayscale=args.grayscale, **size)
    print(f"{out}: {n} recordings (wmeval-dataset/1); evaluate them with "
          f"`wmeval compose 'worlds=[dataset]' 'models=[dataset]' worlds.dataset.params.path={out}`")
    return 0


def _cmd_study(args: argparse.Namespace) -> int:
    from wmeval.core.config import find_root

    root = Path(args.root) if args.root else find_root(Path(args.path).resolve().parent)
    if args.action == "export":
        from wmeval.human.study import export_study

        folder = export_study(args.path, root=root, force=args.force)
        study = json.loads((folder / "study.json").read_text())
        n = {r: len(t) for r, t in study["raters"].items()}
        print(f"{folder}: study {study['design']['name']!r}, {len(n)} pages in {folder / 'pages'} "
              f"({sum(n.values())} trials: {', '.join(f'{r} {k}' for r, k in n.items())}); send each rater their page "
              f"and put the answers files they return in {folder / 'answers'}")
        return 0
    from wmeval.human.analysis import analyse_study

    summary, _ = analyse_study(args.path, n_resamples=args.n_resamples)
    print(json.dumps({k: summary[k] for k in ("study", "status", "import", "exclusions", "per_question")
                      if k in summary}, indent=1, default=str))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="wmeval", description="Evaluate action-conditioned world models.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compose", help="compose conf/ into params.yaml exactly as `dvc exp run` does")
    c.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. protocol.horizon=20 'worlds=[blobs]'")
    c.add_argument("--check", action="store_true",
                   help="do not write; exit 1 with a diff if params.yaml differs from the composition")
    c.add_argument("--output", help="file to write or check (default: params.yaml at the project root)")
    c.set_defaults(func=_cmd_compose)
    e = sub.add_parser("episodes", help="export a world's evaluation episodes and plans (inputs for imported predictions)")
    e.add_argument("world")
    e.add_argument("--out", required=True, help="directory to write")
    e.add_argument("--params", default="params.yaml")
    e.set_defaults(func=_cmd_episodes)
    w = sub.add_parser("weights", help="list or fetch encoder weights (verified by sha256)")
    w.add_argument("action", choices=["list", "fetch"])
    w.add_argument("name", nargs="?", help="with fetch: the weights to download")
    w.add_argument("--dir", help="weights directory (default: $WMEVAL_WEIGHTS_DIR or the user cache)")
    w.set_defaults(func=_cmd_weights)
    ca = sub.add_parser("cache", help="list the embedding cache's encoder keys, or prune those made by other encoder "
                                      "code or library releases (which no run of this code reads)")
    ca.add_argument("action", choices=["list", "prune"])
    ca.add_argument("--cache-dir", help="the cache (default: $WMEVAL_CACHE_DIR, else the user cache)")
    ca.add_argument("--dry-run", action="store_true", help="prune: list what would be removed, remove nothing")
    ca.set_defaults(func=_cmd_cache)
    a = sub.add_parser("audit", help="print the lineage of one metric, traced to md5s in dvc.lock "
                                     "(refuses when the workspace does not match dvc.lock)")
    a.add_argument("metric", help="WORLD/SOURCE/METRIC[/REGIME/CONDITION], e.g. blobs/reversed/fd_stratified")
    a.add_argument("--condition", help="REGIME/CONDITION (or either part) when METRIC names none")
    a.add_argument("--json", action="store_true", help="print the lineage as JSON")
    a.add_argument("--root", help="project root (default: the nearest directory with .dvc/ and conf/)")
    a.set_defaults(func=_cmd_audit)
    d = sub.add_parser("dataset", help="convert recorded episodes (a Minari dataset, or a folder of videos with "
                                       "action arrays) to wmeval's dataset format")
    d.add_argument("source", choices=["minari", "videos"])
    d.add_argument("input", help="minari: the dataset id (local, $MINARI_DATASETS_PATH); videos: the folder")
    d.add_argument("--out", required=True, help="the Parquet file to write")
    d.add_argument("--frame-height", type=int, help="resize frames to this height (default: as recorded)")
    d.add_argument("--frame-width", type=int, help="resize frames to this width (default: as recorded)")
    d.add_argument("--resize-filter", default="area", choices=["area", "bilinear", "bicubic", "nearest"])
    d.add_argument("--grayscale", action="store_true", help="videos: keep one luma channel")
    d.add_argument("--frame-key", default="pixels", help="minari: the dict observation entry holding frames")
    d.add_argument("--state-key", default="state", help="minari: the dict observation entry holding the state")
    d.add_argument("--force", action="store_true", help="replace an existing --out file")
    d.set_defaults(func=_cmd_dataset)
    sw = sub.add_parser("sweep", help="collect the DVC experiments (`dvc exp show`) into a tidy table and a "
                                      "sweep report")
    sw.add_argument("--out", help="output directory (default: reports/sweep)")
    sw.add_argument("--all-commits", action="store_true", help="experiments of every commit, not only HEAD's")
    sw.add_argument("--root", help="project root (default: the nearest directory with .dvc/ and conf/)")
    sw.set_defaults(func=_cmd_sweep)
    st = sub.add_parser("study", help="human judgments: export a blinded study's pages from the rollouts, or "
                                      "summarize the answers returned (README, \"Human judgments\")")
    st.add_argument("action", choices=["export", "summary"])
    st.add_argument("path", help="export: the study's design.yaml; summary: the study's folder")
    st.add_argument("--force", action="store_true", help="export: replace an exported study (a new study: answers "
                                                         "to the old pages no longer import)")
    st.add_argument("--n-resamples", type=int, default=1000, help="summary: B of the crossed bootstrap")
    st.add_argument("--root", help="project root (default: the nearest directory with .dvc/ and conf/)")
    st.set_defaults(func=_cmd_study)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except WmevalError as e:
        print(f"wmeval: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader closed the pipe (`wmeval weights list | head -3`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
