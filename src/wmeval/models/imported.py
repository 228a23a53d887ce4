"""Precomputed predictions, imported from a directory.

Layout (``wmeval episodes WORLD --out DIR`` writes the inputs a model needs)::

    PRED_DIR/
      manifest.json                 {"format": "wmeval-predictions/1", "world": "blobs",
                                     "horizon": 10, "stochastic": false}
      open_loop/<plan>.npz          one file per plan of the protocol
      teacher_forced/<plan>.npz     for the teacher-forced plan only

Each ``.npz`` holds

* ``episode`` ``(N,)`` integers: the evaluation episode ids, each exactly once;
* ``frames`` ``(N, S, H, H_img, W, C)`` uint8 or float in [0, 1], and/or
  ``states`` ``(N, S, H, D)``; ``S`` is 1 for a deterministic model and
  ``protocol.num_samples`` for a stochastic one.

**Video predictions.** Video world models write videos: instead of a ``frames`` array, a plan's
frames may be ``<regime>/<plan>/<episode>_<sample>.mp4`` (one video per episode id and sample,
``H`` frames of the world's frame size), beside the ``.npz`` that still holds ``episode`` (and
``states``, if any). ``manifest.json`` then declares ``"frame_rate"``. Each video is decoded
with PyAV and checked against the manifest and the protocol: its frame count (H), its frame
size and its frame rate; a mismatch is an error naming the file and both values.

Open-loop step ``t`` predicts ``o_t`` from ``o_0`` and actions ``a_0..a_{t-1}``;
teacher-forced step ``t`` predicts ``o_t`` from the realized ``o_0..o_{t-1}``.
Everything is validated: a missing file or episode, a wrong horizon, shape,
dtype or range, or a NaN/inf is an error naming the file, array and value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from wmeval.core.errors import ModelOutputError

from .base import Prediction, check_frames, check_states

FORMAT = "wmeval-predictions/1"


class ImportedModel:
    """Reads predictions from ``path`` (relative paths resolve against the working directory)."""

    precomputed = True

    def __init__(self, path: str, world: Any = None) -> None:
        self.path = Path(path)
        manifest_path = self.path / "manifest.json"
        if not manifest_path.is_file():
            raise ModelOutputError(f"{manifest_path}: missing (imported predictions need a manifest.json)")
        try:
            self.manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as e:
            raise ModelOutputError(f"{manifest_path}: not valid JSON: {e}") from None
        for key in ("format", "world", "horizon"):
            if key not in self.manifest:
                raise ModelOutputError(f"{manifest_path}: key {key!r} is missing")
        if self.manifest["format"] != FORMAT:
            raise ModelOutputError(
                f"{manifest_path}: format = {self.manifest['format']!r}, expected {FORMAT!r}")
        if world is not None and self.manifest["world"] != world.name:
            raise ModelOutputError(
                f"{manifest_path}: world = {self.manifest['world']!r}, but it is configured "
                f"under world {world.name!r}")
        h = self.manifest["horizon"]
        if isinstance(h, bool) or not isinstance(h, int) or h < 1:
            raise ModelOutputError(f"{manifest_path}: horizon = {h!r}; expected a positive integer")
        if not isinstance(self.manifest.get("stochastic", False), bool):
            raise ModelOutputError(f"{manifest_path}: stochastic = {self.manifest['stochastic']!r}; expected "
                                   "true or false")
        self.stochastic = bool(self.manifest.get("stochastic", False))
        self.read: set[Path] = {manifest_path}

    def unread_files(self) -> list[Path]:
        """Files under the predictions folder that no load has read (after a run: files the protocol ignores)."""
        return sorted(f for f in self.path.rglob("*") if f.is_file() and f not in self.read)

    def load(self, regime: str, plan: str, episodes: np.ndarray, horizon: int, num_samples: int,
             frame_shape: tuple[int, int, int] | None, state_dim: int | None,
             n_episodes: int | None = None) -> Prediction:
        """Load and validate the predictions for one ``(regime, plan)``, ordered as ``episodes`` (one block of the
        protocol's ``n_episodes``: the file must hold exactly episodes ``0..n_episodes - 1``; default: ``episodes``)."""
        manifest_path = self.path / "manifest.json"
        if int(self.manifest["horizon"]) != horizon:
            raise ModelOutputError(
                f"{manifest_path}: horizon = {self.manifest['horizon']}, but protocol.horizon = {horizon}")
        f = self.path / regime / f"{plan}.npz"
        if not f.is_file():
            have = sorted(p.name for p in (self.path / regime).glob("*.npz")) if (self.path / regime).is_dir() else []
            raise ModelOutputError(f"{f}: missing (plan {plan!r}, regime {regime}); found {have or 'none'}")
        try:
            data = np.load(f, allow_pickle=False)
        except Exception as e:
            raise ModelOutputError(f"{f}: cannot be read as .npz: {e}") from None
        self.read.add(f)
        with data:
            if "episode" not in data.files:
                raise ModelOutputError(f"{f}: array 'episode' is missing (arrays: {data.files})")
            ep = np.asarray(data["episode"])
            if ep.ndim != 1 or ep.dtype.kind not in "iu":
                raise ModelOutputError(f"{f}: array 'episode' must be 1-D integers, got {ep.dtype} {ep.shape}")
            uniq, counts = np.unique(ep, return_counts=True)
            if (counts > 1).any():
                raise ModelOutputError(f"{f}: array 'episode': id {int(uniq[counts > 1][0])} appears more than once")
            expected = episodes if n_episodes is None else np.arange(n_episodes)
            missing = np.setdiff1d(expected, ep)
            if missing.size:
                raise ModelOutputError(
                    f"{f}: array 'episode': {missing.size} evaluation episodes are missing, "
                    f"e.g. {missing[:5].tolist()}")
            extra = np.setdiff1d(ep, expected)
            if extra.size:
                raise ModelOutputError(
                    f"{f}: array 'episode': ids {extra[:5].tolist()} are not evaluation episodes "
                    f"(protocol.n_episodes = {len(expected)})")
            order = np.argsort(ep)[np.searchsorted(np.sort(ep), episodes)]
            s = num_samples if self.stochastic else 1
            out: dict[str, np.ndarray | None] = {"frames": None, "states": None}
            for key, check, event in (("frames", check_frames, frame_shape),
                                      ("states", check_states, None if state_dim is None else (state_dim,))):
                if key not in data.files:
                    continue
                arr = data[key]
                if arr.ndim >= 3 and arr.shape[2] != horizon:
                    raise ModelOutputError(
                        f"{f}: array {key!r} has horizon {arr.shape[2]} (axis 2), protocol.horizon = {horizon}")
                if event is None:
                    raise ModelOutputError(f"{f}: array {key!r} given, but the world has no {key}")
                if arr.ndim < 1 or arr.shape[0] != len(ep):
                    raise ModelOutputError(f"{f}: array {key!r} has shape {arr.shape}; expected one entry per id of "
                                           f"array 'episode' ({len(ep)}) on axis 0")
                # Only the requested episodes (one block) are checked and converted.
                out[key] = check(arr[order], (len(episodes), s, horizon, *event), f"{f}: array {key!r}")
            if out["frames"] is None and (self.path / regime / plan).is_dir():
                if frame_shape is None:
                    raise ModelOutputError(f"{self.path / regime / plan}: videos given, but the world has no frames")
                out["frames"] = check_frames(self._videos(regime, plan, episodes, s, horizon, frame_shape),
                                             (len(episodes), s, horizon, *frame_shape), f"{self.path / regime / plan}")
            frames, states = out["frames"], out["states"]
            if frames is None and states is None:
                raise ModelOutputError(f"{f}: neither 'frames' nor 'states' (arrays: {data.files})")
        return Prediction(frames=frames, states=states)


    def _videos(self, regime: str, plan: str, episodes: np.ndarray, samples: int, horizon: int,
                frame_shape: tuple[int, int, int]) -> np.ndarray:
        """``(N, S, H, H_img, W, C)`` uint8 frames from ``<regime>/<plan>/<episode>_<sample>.mp4``."""
        from wmeval.worlds.convert import read_video

        rate = self.manifest.get("frame_rate")
        manifest = self.path / "manifest.json"
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0:
            raise ModelOutputError(f"{manifest}: frame_rate = {rate!r}; video predictions need a positive "
                                   "frame_rate in the manifest")
        out = np.empty((len(episodes), samples, horizon, *frame_shape), np.uint8)
        for i, e in enumerate(episodes):
            for k in range(samples):
                f = self.path / regime / plan / f"{int(e)}_{k}.mp4"
                if not f.is_file():
                    raise ModelOutputError(f"{f}: missing (episode {int(e)}, sample {k} of plan {plan!r}, {regime})")
                self.read.add(f)
                frames, got_rate = read_video(f, gray=frame_shape[2] == 1)
                if len(frames) != horizon:
                    raise ModelOutputError(f"{f}: {len(frames)} frames, but protocol.horizon = {horizon}")
                if frames.shape[1:3] != tuple(frame_shape[:2]):
                    raise ModelOutputError(f"{f}: frames are {frames.shape[1]}x{frames.shape[2]}, but the world's "
                                           f"are {frame_shape[0]}x{frame_shape[1]}")
                if abs(got_rate - float(rate)) > 1e-3 * float(rate):
                    raise ModelOutputError(f"{f}: frame rate {got_rate:g}, but {manifest} declares {rate:g}")
                out[i, k] = frames
        return out


def write_predictions(path: str | Path, world: str, horizon: int, stochastic: bool,
                      arrays: dict[tuple[str, str], dict[str, np.ndarray]]) -> None:
    """Write predictions in the layout above; ``arrays[(regime, plan)] = {"episode": ..., ...}``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_text(json.dumps(
        {"format": FORMAT, "world": world, "horizon": horizon, "stochastic": stochastic}, indent=2))
    for (regime, plan), arrs in arrays.items():
        (path / regime).mkdir(exist_ok=True)
        np.savez_compressed(path / regime / f"{plan}.npz", **arrs)
