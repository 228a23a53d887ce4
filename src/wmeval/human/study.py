"""A blinded paired-comparison study built from a run's rollouts: its design, its trials, and one offline HTML
page per rater.

A study is declared in a YAML file (``studies/<name>/design.yaml``; every key is documented in
:class:`StudyDesign`) and exported with ``wmeval study export studies/<name>/design.yaml``. The export writes,
beside the design:

- ``study.json``: the design, the randomization scheme and seed, the digests of the rollout files the frames
  came from and of the decoded frames the pages show (:func:`shown_digests`; the human stage validates a
  metric only while this run's frames are those, :func:`frames_changed`), and the *key*: for every rater,
  every trial's episode, plan, question and which candidate stands on which side. The key never leaves the
  experimenter; the pages do not contain it.
- ``pages/<rater>.html``: one self-contained page per rater (frames inline as PNG ``data:`` URIs, no script or
  style from anywhere else). It shows the consent text and the instructions from the design, then the trials;
  it records each answer and its response time, keeps them in the browser's local storage (a reload resumes),
  and saves them as ``answers-<rater>.json``, the file the rater sends back into ``studies/<name>/answers/``.

Every trial shows a context (the realized frame the models started from) and two continuations, played with
one clock: the same frame rate, the same size and the same loop for both. A *realism* trial asks which
continuation looks more like a real one; a *consistency* trial also shows the actions, step by step in time
with the playback, and asks which continuation follows them. Attention checks pit the realized future against a
corrupted copy of itself (colours inverted, or heavy noise); repeated trials show a trial again with the sides
swapped, for intra-rater consistency.

Randomization: rater ``i``'s trials come from ``wmeval.core.make_rng(seed, "study", name, i)`` (PCG64), in this
order: the trials drawn, their sides, the repeats, the attention checks, and the order of all of them. The
same design and rollouts give the same study, byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from wmeval.core.errors import ConfigError, WmevalError
from wmeval.core.rng import make_rng

FORMAT = "wmeval-study/1"
ANSWERS_FORMAT = "wmeval-study-answers/1"
REALIZED = "realized"
CORRUPTED = "corrupted"
QUESTIONS = {
    "realism": "Which continuation looks more like a real continuation of the scene?",
    "consistency": "Which continuation follows the actions shown?",
}
#: The instruction shown with every trial of a question unless the design gives its own.
INSTRUCTIONS = {
    "realism": "Both videos continue the scene shown above. Ignore which one you would prefer to see: choose the "
               "one that looks more like a real recording of what happens next.",
    "consistency": "The actions listed were applied, one per frame, starting from the scene shown above (the "
                   "highlighted action is the one being applied in the frame on screen). Choose the continuation "
                   "whose motion follows those actions.",
}
CORRUPTIONS = ("invert", "noise")


@dataclass(frozen=True)
class Playback:
    """How every candidate is played: ``fps`` frames per second, frames scaled ``scale`` times (nearest
    neighbour), looped with a ``pause_ms`` hold on the last frame; the answer buttons unlock after
    ``min_loops`` full plays."""

    fps: float = 4.0
    scale: int = 4
    loop: bool = True
    pause_ms: int = 600
    min_loops: int = 1


@dataclass(frozen=True)
class StudyDesign:
    """A study's declared design (the keys of ``design.yaml``).

    Attributes:
        name: the study's name (shown in the scorecard: "validated on <name>").
        world: the world whose rollouts are shown (one with frames).
        candidates: what is compared: model names of that world, and ``realized`` (the realized future).
        questions: ``realism`` and/or ``consistency``.
        episodes: how many episodes to draw (seeded) from the run's, or a list of episode ids.
        plans: the open-loop plans (conditions) to show; default all that every candidate has.
        raters: how many raters (ids ``r01``...), or a list of ids.
        trials_per_rater: compared trials per rater, drawn without replacement from episodes x plans x
            questions x pairs of candidates (a fresh permutation when one rater needs more than all of them).
        repeats: trials per rater shown a second time, sides swapped (intra-rater consistency).
        attention_checks: per rater, realized future against a corrupted copy (``corruption``).
        corruption: ``invert`` (colours inverted) or ``noise`` (half the image replaced by uniform noise).
        population: the rater population, as declared by the experimenter (reported verbatim).
        consent: the consent text shown first; the rater must agree to go on.
        instructions: per question, the text shown with every trial of it (defaults: ``INSTRUCTIONS``).
        exclusions: the declared rules, ``max_failed_checks`` and ``min_response_ms``.
        playback: :class:`Playback`.
        rollouts: the rollouts folder (default ``data/rollouts``).
        seed: the randomization seed.
    """

    name: str
    world: str
    candidates: list[str]
    population: str
    consent: str
    questions: list[str] = field(default_factory=lambda: ["realism", "consistency"])
    episodes: int | list[int] = 8
    plans: list[str] | None = None
    raters: int | list[str] = 4
    trials_per_rater: int = 24
    repeats: int = 4
    attention_checks: int = 2
    corruption: str = "invert"
    instructions: dict[str, str] = field(default_factory=dict)
    exclusions: dict[str, Any] = field(default_factory=lambda: {"max_failed_checks": 0, "min_response_ms": 500})
    playback: Playback = field(default_factory=Playback)
    rollouts: str = "data/rollouts"
    seed: int = 0

    @classmethod
    def from_dict(cls, raw: dict, where: str) -> StudyDesign:
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a mapping of design keys, got {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
        missing = sorted(f.name for f in fields(cls) if f.name in ("name", "world", "candidates", "population",
                                                                 "consent") and f.name not in raw)
        if missing:
            raise ConfigError(f"{where}: missing required key(s) {missing}")
        raw = dict(raw)
        pb = raw.pop("playback", None) or {}
        bad_pb = sorted(set(pb) - {f.name for f in fields(Playback)})
        if bad_pb:
            raise ConfigError(f"{where}: playback: unknown key(s) {bad_pb}")
        design = cls(**raw, playback=Playback(**pb))
        design.validate(where)
        return design

    def validate(self, where: str) -> None:
        def fail(key: str, msg: str) -> None:
            raise ConfigError(f"{where}: {key} = {getattr(self, key)!r}: {msg}")

        def is_int(x: Any) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)

        def is_id(x: Any) -> bool:
            return isinstance(x, str) and x != "" and x.replace("-", "").replace("_", "").isalnum()

        for key in ("name", "world", "population", "consent", "corruption", "rollouts"):
            if not isinstance(getattr(self, key), str):
                fail(key, "expected a string")
        if not is_id(self.name):
            fail("name", "use letters, digits, '-' and '_' only")
        for key in ("candidates", "questions"):
            if not isinstance(getattr(self, key), list) or not all(isinstance(c, str) for c in getattr(self, key)):
                fail(key, "expected a list of names")
        if self.plans is not None and (not isinstance(self.plans, list)
                                       or not all(isinstance(p, str) for p in self.plans)):
            fail("plans", "expected a list of plan names, or null for all")
        for key in ("trials_per_rater", "repeats", "attention_checks", "seed"):
            if not is_int(getattr(self, key)):
                fail(key, "expected an integer")
        if not is_int(self.episodes) and not (isinstance(self.episodes, list) and self.episodes
                                              and all(is_int(e) for e in self.episodes)):
            fail("episodes", "expected a count or a list of episode ids")
        if isinstance(self.episodes, list) and (len(set(self.episodes)) != len(self.episodes)
                                                or len(self.episodes) < 2):
            fail("episodes", "episode ids must be distinct, at least 2 of them")
        if not is_int(self.raters) and not (isinstance(self.raters, list) and all(is_id(r) for r in self.raters)):
            fail("raters", "expected a count, or a list of ids of letters, digits, '-' and '_' (they name files)")
        for rule, value in self.exclusions.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ConfigError(f"{where}: exclusions.{rule} = {value!r}: expected a number or null")
        if not isinstance(self.instructions, dict) or not all(isinstance(v, str) for v in self.instructions.values()):
            fail("instructions", "expected a mapping of question to text")
        if len(self.candidates) < 2 or len(set(self.candidates)) != len(self.candidates):
            fail("candidates", "need at least two distinct candidates")
        if CORRUPTED in self.candidates:
            fail("candidates", f"{CORRUPTED!r} is reserved for attention checks")
        bad = sorted(set(self.questions) - set(QUESTIONS))
        if bad or not self.questions:
            fail("questions", f"choose from {sorted(QUESTIONS)}")
        if self.corruption not in CORRUPTIONS:
            fail("corruption", f"choose from {list(CORRUPTIONS)}")
        if is_int(self.episodes) and self.episodes < 2:
            fail("episodes", "need at least 2 episodes (intervals resample them)")
        if is_int(self.raters) and self.raters < 1:
            fail("raters", "need at least one rater")
        if not is_int(self.raters) and len(set(self.raters)) != len(self.raters):
            fail("raters", "rater ids must be distinct")
        if self.trials_per_rater < 1:
            fail("trials_per_rater", "must be at least 1")
        if not 0 <= self.repeats <= self.trials_per_rater:
            fail("repeats", f"must be between 0 and trials_per_rater ({self.trials_per_rater})")
        if self.attention_checks < 0:
            fail("attention_checks", "must be non-negative")
        if self.seed < 0:
            fail("seed", "must be non-negative")
        pb = self.playback
        if not (isinstance(pb.fps, (int, float)) and pb.fps > 0 and is_int(pb.scale) and pb.scale >= 1
                and is_int(pb.min_loops) and pb.min_loops >= 1 and is_int(pb.pause_ms) and pb.pause_ms >= 0
                and isinstance(pb.loop, bool)):
            raise ConfigError(f"{where}: playback = {pb}: fps > 0, scale >= 1, min_loops >= 1 (a rater sees "
                              "both continuations play before answering), pause_ms >= 0, loop true or false")
        rules = set(self.exclusions) - {"max_failed_checks", "min_response_ms"}
        if rules:
            fail("exclusions", f"unknown rule(s) {sorted(rules)}")
        extra = sorted(set(self.instructions) - set(QUESTIONS))
        if extra:
            fail("instructions", f"no question {extra}")

    def rater_ids(self) -> list[str]:
        if isinstance(self.raters, int):
            return [f"r{i + 1:02d}" for i in range(self.raters)]
        return [str(r) for r in self.raters]

    def instruction(self, question: str) -> str:
        return self.instructions.get(question, INSTRUCTIONS[question])


def load_design(path: str | Path) -> StudyDesign:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise WmevalError(f"{path}: cannot read the study design ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from None
    return StudyDesign.from_dict(raw, str(path))


# ----------------------------------------------------------------------------------------------- frames


@dataclass
class Clips:
    """The frames a study shows: per (episode, plan), the context frame and each candidate's continuation."""

    context: dict[tuple[int, str], np.ndarray]              # (episode, plan) -> (H, W, C) uint8, the frame at t = 0
    futures: dict[tuple[str, int, str], np.ndarray]         # (candidate, episode, plan) -> (T, H, W, C) uint8
    actions: dict[tuple[int, str], np.ndarray]              # (episode, plan) -> (T, action_dim)
    episodes: list[int]
    plans: list[str]
    digests: dict[str, str]                                 # file (relative) -> sha256
    action_labels: dict[float, str]
    conditions: dict[str, str]                              # plan -> its condition (the statistics' grouping)
    check_pool: list[tuple[int, str]]                       # (episode, plan) of the truth outside the study's


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _frames(path: Path, regime: str, where: str) -> tuple[dict, dict, dict, dict]:
    """``{(episode, plan): (T, H, W, C)}`` of sample 0 in ``regime`` (steps t >= 1), the frames at t = 0, the
    actions, and each plan's condition, from one rollout file."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from wmeval.tables.io import tensor_numpy

    schema = pq.read_schema(path)
    if "frame" not in schema.names:
        raise WmevalError(f"{path}: has no frames (column 'frame'); a study shows frames")
    table = pq.read_table(path, columns=["episode", "plan", "condition", "sample", "regime", "t", "frame", "action"])
    table = table.filter(pc.and_(pc.equal(table["sample"], 0), pc.equal(table["regime"].cast("string"), regime)))
    if table.num_rows == 0:
        raise WmevalError(f"{path}: no {regime} rows of sample 0 ({where})")
    ep = table["episode"].to_numpy()
    plan = np.asarray(table["plan"].cast("string").to_pylist(), dtype=object)
    conditions = dict(zip(plan.tolist(), table["condition"].cast("string").to_pylist()))
    t = table["t"].to_numpy()
    frames = tensor_numpy(table, "frame")
    if frames.dtype != np.uint8:
        frames = np.rint(np.clip(frames, 0, 1) * 255).astype(np.uint8)
    actions = tensor_numpy(table, "action")
    clips, ctx, acts = {}, {}, {}
    order = np.lexsort((t, plan, ep))
    ep, plan, t, frames, actions = ep[order], plan[order], t[order], frames[order], actions[order]
    keys = list(zip(ep.tolist(), plan.tolist()))
    for k, grp in itertools.groupby(range(len(keys)), key=lambda i: keys[i]):
        idx = np.fromiter(grp, dtype=np.int64)
        steps = t[idx]
        at0 = steps == 0
        if at0.any():
            ctx[k] = frames[idx[at0][0]]
        clips[k] = frames[idx[~at0]]
        acts[k] = actions[idx[~at0]]
    return clips, ctx, acts, conditions


def _read_sources(folder: Path, candidates: Iterable[str]) -> tuple[dict, dict, dict, dict, dict, dict]:
    """The frames of the truth (realized) and of each candidate (open loop) in ``folder``: ``(context, futures,
    actions, conditions, available, digests)``; a missing file is refused, naming it."""
    gt = folder / "ground_truth.parquet"
    if not gt.is_file():
        raise WmevalError(f"{gt}: missing; run the pipeline (`dvc repro rollouts`) with world {folder.name!r} "
                          "(a study is exported from, and checked against, its rollouts)")
    truth, context, actions, conditions = _frames(gt, "realized", "the realized futures")
    futures: dict[tuple[str, int, str], np.ndarray] = {}
    digests = {gt.name: _sha256(gt)}
    available: dict[str, set] = {REALIZED: set(truth)}
    for (e, p), f in truth.items():
        futures[(REALIZED, e, p)] = f
    for cand in candidates:
        if cand == REALIZED:
            continue
        path = folder / f"{cand}.parquet"
        if not path.is_file():
            have = sorted(p.stem for p in folder.glob("*.parquet") if p.stem != "ground_truth")
            raise WmevalError(f"{path}: no rollouts of candidate {cand!r} in world {folder.name!r} "
                              f"(models there: {have}; or '{REALIZED}')")
        clips, _, _, _ = _frames(path, "open_loop", f"candidate {cand!r}")
        digests[path.name] = _sha256(path)
        available[cand] = set(clips)
        for (e, p), f in clips.items():
            futures[(cand, e, p)] = f
    return context, futures, actions, conditions, available, digests


def _action_labels(gt: Path) -> dict[float, str]:
    """The world's action names (rollout metadata ``world.actions``) by value: what consistency trials print."""
    from wmeval.tables.io import read_metadata

    meta_actions = (read_metadata(gt).get("world") or {}).get("actions") or {}
    return {float(v): str(name) for name, v in meta_actions.items() if isinstance(v, (int, float))}


def shown_digests(context: dict, futures: dict, actions: dict, candidates: Iterable[str],
                  keys: Iterable[tuple[int, str]], check_keys: Iterable[tuple[int, str]],
                  action_labels: dict[float, str]) -> dict[str, Any]:
    """sha256 of what a study's pages show: ``{"candidates": {name: digest}, "context": ..., "actions": ...}``,
    per candidate its sample-0 continuation of every (episode, plan) in ``keys`` (the realized future also of the
    attention checks' ``check_keys``, whose corrupted copy it makes), then the context frames, and the actions
    with the names the consistency trials print for them. ``None`` for a part whose frames are missing.

    The digests cover the decoded frames, not the files, so that a rollout file rewritten with the same frames
    (new code-version metadata, say) still matches the judgments made of it."""
    keys, check_keys = sorted(set(keys)), sorted(set(check_keys))
    every = sorted(set(keys) | set(check_keys))

    def digest(arrays: dict, wanted: list, prefix: tuple = ()) -> str | None:
        h = hashlib.sha256()
        for k in wanted:
            a = arrays.get(prefix + tuple(k))
            if a is None:
                return None
            a = np.ascontiguousarray(a)
            h.update(f"{k[0]}|{k[1]}|{a.dtype.str}|{a.shape}\n".encode())
            h.update(a.tobytes())
        return h.hexdigest()

    sources = set(candidates) | ({REALIZED} if check_keys else set())
    acts = digest(actions, keys)
    labels = json.dumps(sorted(action_labels.items())).encode()
    return {"candidates": {c: digest(futures, every if c == REALIZED else keys, (c,)) for c in sorted(sources)},
            "context": digest(context, every),
            "actions": None if acts is None else hashlib.sha256(acts.encode() + labels).hexdigest()}


def frames_changed(study: dict, folder: Path) -> list[str]:
    """The parts of what ``study`` (a loaded ``study.json``) showed whose frames in the rollouts ``folder`` (this
    run's, of the study's world) are no longer the same: candidates, ``context`` or ``actions``, each with why.
    Empty when every shown frame is still there, unchanged."""
    import pyarrow as pa

    shown = study.get("shown")
    if not isinstance(shown, dict) or not isinstance(shown.get("candidates"), dict):
        return ["study.json records no digests of the frames shown (exported by an earlier wmeval)"]
    design = study["design"]
    try:
        context, futures, actions, _, _, _ = _read_sources(folder, design["candidates"])
        labels = _action_labels(folder / "ground_truth.parquet")
    except (WmevalError, OSError, pa.ArrowException) as e:
        return [f"{folder}: {e}" if str(folder) not in str(e) else str(e)]
    keys = [(e, p) for e in study["episodes"] for p in study["plans"]]
    checks = [(t["episode"], t["plan"]) for ts in study["raters"].values() for t in ts if t["attention_check"]]
    now = shown_digests(context, futures, actions, design["candidates"], keys, checks, labels)
    parts = [(f"candidate {c}", now["candidates"].get(c), d) for c, d in sorted(shown["candidates"].items())]
    parts += [(part, now[part], shown.get(part)) for part in ("context", "actions")]
    return [f"{name}: {'frames missing' if new is None else 'frames differ'} in {folder}"
            for name, new, old in parts if new != old]


def load_clips(design: StudyDesign, root: Path) -> Clips:
    """Read the design's candidates' frames from the rollouts folder; refuse what the design asks for but the
    rollouts lack (naming the file and the candidate, episode or plan)."""
    folder = root / design.rollouts / design.world
    gt = folder / "ground_truth.parquet"
    context, futures, actions, conditions, available, names = _read_sources(folder, design.candidates)
    digests = {str((folder / n).relative_to(root)): d for n, d in names.items()}
    common = set.intersection(*(available[c] for c in design.candidates))
    all_plans = sorted({p for _, p in common})
    plans = list(design.plans) if design.plans is not None else all_plans
    for p in plans:
        if p not in all_plans:
            raise ConfigError(f"design: plans: {p!r} is not an open-loop plan every candidate has "
                              f"(common plans: {all_plans})")
    all_eps = sorted({e for e, p in common if p in plans and all((e, q) in common for q in plans)})
    if isinstance(design.episodes, int):
        if design.episodes > len(all_eps):
            raise ConfigError(f"design: episodes = {design.episodes}: the rollouts have {len(all_eps)} episodes "
                              "with every plan for every candidate")
        rng = make_rng(design.seed, "study", design.name, "episodes")
        episodes = sorted(int(e) for e in rng.choice(all_eps, size=design.episodes, replace=False))
    else:
        episodes = sorted(int(e) for e in design.episodes)
        missing = sorted(set(episodes) - set(all_eps))
        if missing:
            raise ConfigError(f"design: episodes {missing} are not in the rollouts with every plan for every "
                              f"candidate (episodes there: {all_eps[0]}..{all_eps[-1]})")
    for e in episodes:
        gap = [p for p in plans if (e, p) not in context]
        if gap:
            raise WmevalError(f"{gt}: episode {e}, plan {gap[0]!r} has no realized frame at t = 0 (the context)")
        lens = {c: len(futures[(c, e, p)]) for c in design.candidates for p in plans}
        if len(set(lens.values())) != 1:
            raise WmevalError(f"{folder}: episode {e}: the candidates' continuations differ in length {lens}; "
                              "matched playback needs equal lengths")
    labels = _action_labels(gt)
    # Attention checks show episodes outside the study's where the rollouts have them, so that a check's
    # realized clip is never one the rater also sees in a compared trial.
    pool = sorted((e, p) for (e, p) in available[REALIZED]
                  if e not in set(episodes) and p in plans and (e, p) in context)
    return Clips(context=context, futures=futures, actions=actions, episodes=episodes, plans=plans,
                 digests=digests, action_labels=labels, conditions={p: conditions[p] for p in plans},
                 check_pool=pool)


def corrupt(frames: np.ndarray, how: str, rng: np.random.Generator) -> np.ndarray:
    """An obviously corrupted copy of ``frames`` for an attention check."""
    if how == "invert":
        return (255 - frames).astype(np.uint8)
    noise = rng.integers(0, 256, size=frames.shape, dtype=np.uint8)
    mask = rng.random(frames.shape[:-1] + (1,)) < 0.5
    return np.where(mask, noise, frames).astype(np.uint8)


def png_data_uri(frame: np.ndarray) -> str:
    """A frame ``(H, W, C)`` uint8 as a PNG ``data:`` URI (Pillow; deterministic bytes)."""
    from PIL import Image

    f = frame[..., 0] if frame.shape[-1] == 1 else frame
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(f)).save(buf, format="PNG", optimize=False, compress_level=9)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


# ----------------------------------------------------------------------------------------------- trials


def draw_trials(design: StudyDesign, episodes: list[int], plans: list[str],
                check_pool: list[tuple[int, str]] | None = None) -> dict[str, list[dict]]:
    """Per rater, the trials in the order shown: dicts with ``trial`` (id), ``episode``, ``plan``,
    ``question``, ``left``, ``right`` (candidate names), ``attention_check``, ``expected`` and ``repeat_of``.

    Attention checks come from ``check_pool`` ((episode, plan) outside the study's episodes) when it is not
    empty, else from the (episode, plan) the rater's compared trials do not show, else from any."""
    pairs = list(itertools.combinations(design.candidates, 2))
    pool = [(e, p, q, a, b) for e in episodes for p in plans for q in design.questions for a, b in pairs]
    out = {}
    for i, rater in enumerate(design.rater_ids()):
        rng = make_rng(design.seed, "study", design.name, i)
        drawn: list[tuple] = []
        while len(drawn) < design.trials_per_rater:
            perm = rng.permutation(len(pool))
            drawn += [pool[j] for j in perm[: design.trials_per_rater - len(drawn)]]
        swap = rng.integers(0, 2, size=len(drawn)).astype(bool)
        trials = []
        for (e, p, q, a, b), s in zip(drawn, swap):
            left, right = (b, a) if s else (a, b)
            trials.append({"episode": int(e), "plan": p, "question": q, "left": left, "right": right,
                           "attention_check": False, "expected": None, "repeat_of": None})
        for j in sorted(rng.choice(len(trials), size=design.repeats, replace=False).tolist()):
            t = dict(trials[j])
            t["left"], t["right"] = t["right"], t["left"]
            t["repeat_of"] = j
            trials.append(t)
        used = {(t["episode"], t["plan"]) for t in trials}
        checkable = list(check_pool or []) or [(e, p) for e in episodes for p in plans if (e, p) not in used] \
            or [(e, p) for e in episodes for p in plans]
        for _ in range(design.attention_checks):
            e, p = checkable[int(rng.integers(len(checkable)))]
            e = int(e)
            left, right = (REALIZED, CORRUPTED) if rng.integers(2) == 0 else (CORRUPTED, REALIZED)
            trials.append({"episode": e, "plan": p, "question": "realism", "left": left, "right": right,
                           "attention_check": True, "expected": REALIZED, "repeat_of": None})
        order = rng.permutation(len(trials))
        ids = {int(j): f"{rater}-t{k + 1:03d}" for k, j in enumerate(order)}
        shown = []
        for j in order.tolist():
            t = dict(trials[j])
            t["trial"] = ids[j]
            if t["repeat_of"] is not None:
                t["repeat_of"] = ids[t["repeat_of"]]
            shown.append(t)
        out[rater] = shown
    return out


# ----------------------------------------------------------------------------------------------- export


def _action_text(actions: np.ndarray, labels: dict[float, str]) -> list[str]:
    out = []
    for a in np.asarray(actions, dtype=np.float64).reshape(len(actions), -1):
        if a.size == 1 and float(a[0]) in labels:
            out.append(labels[float(a[0])])
        else:
            out.append(", ".join(f"{v:+.2f}" for v in a))
    return out


def _page(design: StudyDesign, rater: str, trials: list[dict], clips: Clips, study_digest: str) -> str:
    # Image ids mean nothing: a counter, fresh in every trial (ids derived from content would give away the
    # same clip in two trials: a check's realized future, or a repeat).
    images: dict[str, str] = {}

    def ref(frame: np.ndarray) -> str:
        key = f"i{len(images)}"
        images[key] = png_data_uri(frame)
        return key

    corrupt_rng = make_rng(design.seed, "study", design.name, "corruption", rater)
    page_trials = []
    for t in trials:
        e, p = t["episode"], t["plan"]

        def clip(cand: str) -> list[str]:
            if cand == CORRUPTED:
                return [ref(f) for f in corrupt(clips.futures[(REALIZED, e, p)], design.corruption, corrupt_rng)]
            return [ref(f) for f in clips.futures[(cand, e, p)]]

        entry = {"id": t["trial"], "question": t["question"], "prompt": QUESTIONS[t["question"]],
                 "instruction": design.instruction(t["question"]), "context": ref(clips.context[(e, p)]),
                 "left": clip(t["left"]), "right": clip(t["right"])}
        if t["question"] == "consistency":
            entry["actions"] = _action_text(clips.actions[(e, p)], clips.action_labels)
        page_trials.append(entry)
    data = {"format": FORMAT, "study": design.name, "study_digest": study_digest, "rater": rater,
            "consent": design.consent, "playback": asdict(design.playback), "images": images,
            "frame_size": list(next(iter(clips.context.values())).shape[:2]),
            "trials": page_trials, "answers_format": ANSWERS_FORMAT}
    template = resources.files("wmeval.human").joinpath("page.html").read_text()
    # JSON inside <script type="application/json">: escape "</" so no string can close the element.
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).replace("</", "<\\/")
    return (template.replace("{{TITLE}}", html.escape(f"{design.name}: rater {rater}"))
            .replace("{{DATA}}", blob))


def export_study(design_path: str | Path, root: str | Path = ".", force: bool = False) -> Path:
    """Export the study declared in ``design_path``: ``study.json`` and ``pages/<rater>.html`` beside it.
    Returns the study folder. Refuses to overwrite a study already exported unless ``force``. The files are
    written to a staging folder and moved into place at the end (the pages folder, then ``study.json``)."""
    design_path = Path(design_path)
    design = load_design(design_path)
    root = Path(root)
    folder = design_path.parent
    study_file = folder / "study.json"
    if study_file.exists() and not force:
        raise WmevalError(f"{study_file}: exists (the study was exported); pass --force to export it again. "
                          "Answers collected for the old pages only import against the old study.json")
    clips = load_clips(design, root)
    trials = draw_trials(design, clips.episodes, clips.plans, clips.check_pool)
    key = {"format": FORMAT, "design": _plain(asdict(design)), "questions": {q: QUESTIONS[q] for q in design.questions},
           "episodes": clips.episodes, "plans": clips.plans, "plan_conditions": clips.conditions,
           "attention_check_episodes": sorted({t["episode"] for ts in trials.values() for t in ts
                                               if t["attention_check"]}), "rollouts": clips.digests,
           "shown": shown_digests(clips.context, clips.futures, clips.actions, design.candidates,
                                  [(e, p) for e in clips.episodes for p in clips.plans],
                                  [(t["episode"], t["plan"]) for ts in trials.values() for t in ts
                                   if t["attention_check"]], clips.action_labels),
           "randomization": {"seed": design.seed, "generator": "numpy PCG64 via wmeval.core.make_rng(seed, 'study', "
                             "name, rater index)", "order": "trials drawn, sides, repeats, attention checks, "
                             "order shown"},
           "raters": trials}
    body = json.dumps(key, indent=1, sort_keys=True)
    digest = hashlib.sha256(body.encode()).hexdigest()
    pages = {r: _page(design, r, ts, clips, digest) for r, ts in trials.items()}
    # Everything is written in a staging folder first; then the pages folder and study.json are moved into
    # place (two renames at the very end), so a failure before them leaves the previous export untouched.
    staging = Path(tempfile.mkdtemp(prefix=".export-tmp-", dir=folder))
    try:
        (staging / "pages").mkdir()
        for r, text in pages.items():
            (staging / "pages" / f"{r}.html").write_text(text, encoding="utf-8")
        (staging / "study.json").write_text(body + "\n", encoding="utf-8")
        (folder / "answers").mkdir(exist_ok=True)
        if (folder / "pages").exists():
            os.replace(folder / "pages", staging / "previous-pages")
        os.replace(staging / "pages", folder / "pages")
        os.replace(staging / "study.json", study_file)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def study_digest(study_file: str | Path) -> str:
    """The digest the pages carry: sha256 of ``study.json`` as written, without its final newline."""
    text = Path(study_file).read_text()
    return hashlib.sha256(text.rstrip("\n").encode()).hexdigest()
