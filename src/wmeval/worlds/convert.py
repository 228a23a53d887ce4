"""Converters to the ``wmeval-dataset/1`` format (:mod:`wmeval.worlds.dataset`).

* :func:`from_minari`: a Minari dataset (the Farama standard for offline RL data), local or
  built with ``minari.DataCollector``. Frames come from image observations, or from the
  ``pixels`` entry of a dict observation (``gymnasium.wrappers.AddRenderObservation(env,
  render_only=False)`` records both); a ``state`` entry (or a vector observation beside
  the pixels) becomes the ``state`` column.
* :func:`from_videos`: a folder of video files (``NAME.mp4``, ``.webm``, ``.avi``, ``.mkv``),
  each with its actions in ``NAME.npy`` (``(T, A)`` or ``(T,)``: the action after each frame
  but the last, so T = frames - 1) and optional rewards in ``NAME.rewards.npy`` ``(T,)``;
  decoded with PyAV.

Frames may be resized on the way with the declared filter (:func:`wmeval.worlds.gymnasium.resize_frame`).
Every recording is checked (frame dtype and shape, action count) and named in the error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from wmeval.core.errors import WmevalError

from .dataset import write_dataset
from .gymnasium import resize_frame

VIDEO_SUFFIXES = (".mp4", ".webm", ".avi", ".mkv", ".mov")


def _frames(raw: np.ndarray, where: str, size: tuple[int | None, int | None], resize_filter: str) -> np.ndarray:
    raw = np.asarray(raw)
    if raw.ndim == 3:                                   # (T, H, W): one channel
        raw = raw[..., None]
    if raw.ndim != 4 or raw.dtype != np.uint8 or raw.shape[-1] not in (1, 3, 4):
        raise WmevalError(f"{where}: frames must be (T, H, W, C) uint8 images with 1, 3 or 4 channels, got "
                          f"{raw.dtype} {raw.shape}")
    raw = raw[..., :3] if raw.shape[-1] == 4 else raw
    if size == (None, None):
        return raw
    return np.stack([resize_frame(f, size[0], size[1], resize_filter, True, raw.shape[-1] == 1) for f in raw])


def _split_observations(obs: Any, where: str, frame_key: str, state_key: str) -> tuple[np.ndarray, np.ndarray | None]:
    if isinstance(obs, dict):
        if frame_key not in obs:
            raise WmevalError(f"{where}: observations have no {frame_key!r} entry (keys: {sorted(obs)}); record "
                              "frames with gymnasium.wrappers.AddRenderObservation(env, render_only=False)")
        state = obs.get(state_key)
        return obs[frame_key], None if state is None else np.asarray(state, np.float64).reshape(len(state), -1)
    obs = np.asarray(obs)
    if obs.ndim >= 3:
        return obs, None
    raise WmevalError(f"{where}: observations are vectors {obs.shape}, not images; record frames with "
                      "gymnasium.wrappers.AddRenderObservation(env, render_only=False)")


def from_minari(dataset_id: str, out: str | Path, *, frame_key: str = "pixels", state_key: str = "state",
                frame_height: int | None = None, frame_width: int | None = None,
                resize_filter: str = "area") -> int:
    """Convert a local Minari dataset; returns the number of recordings written."""
    try:
        import minari
    except ImportError:
        raise WmevalError("converting a Minari dataset needs minari: pip install minari") from None
    try:
        ds = minari.load_dataset(dataset_id)
    except Exception as e:
        raise WmevalError(f"Minari dataset {dataset_id!r} cannot be loaded: {type(e).__name__}: {e}") from None
    episodes = []
    for ep in ds.iterate_episodes():
        where = f"Minari dataset {dataset_id!r}, episode {ep.id}"
        frames, states = _split_observations(ep.observations, where, frame_key, state_key)
        frames = _frames(frames, where, (frame_height, frame_width), resize_filter)
        actions = np.asarray(ep.actions, np.float64).reshape(len(ep.actions), -1)
        if len(frames) != len(actions) + 1:
            raise WmevalError(f"{where}: {len(frames)} observations for {len(actions)} actions (expected one more)")
        episodes.append({"frames": frames, "actions": actions, "states": states,
                         "rewards": np.asarray(ep.rewards, np.float64)})
    if not episodes:
        raise WmevalError(f"Minari dataset {dataset_id!r} has no episodes")
    write_dataset(out, episodes, f"Minari dataset {dataset_id} (minari {minari.__version__})")
    return len(episodes)


def read_video(path: Path, gray: bool = False) -> tuple[np.ndarray, float]:
    """Every frame of a video file as ``(T, H, W, 3)`` uint8 RGB (``gray``: ``(T, H, W, 1)`` luma), and its
    frame rate."""
    try:
        import av
    except ImportError:
        raise WmevalError("reading video needs PyAV: pip install av") from None
    try:
        with av.open(str(path)) as c:
            stream = c.streams.video[0]
            rate = float(stream.average_rate or 0)
            frames = [f.to_ndarray(format="gray" if gray else "rgb24") for f in c.decode(stream)]
    except (av.error.FFmpegError, IndexError) as e:
        raise WmevalError(f"{path}: cannot be decoded as video: {e}") from None
    if not frames:
        raise WmevalError(f"{path}: no video frames")
    out = np.stack(frames)
    return (out[..., None] if gray else out), rate


def _load_array(path: Path) -> np.ndarray:
    try:
        return np.asarray(np.load(path, allow_pickle=False), dtype=np.float64)
    except (ValueError, OSError, TypeError) as e:
        raise WmevalError(f"{path}: cannot be read as a numeric .npy array: {e}") from None


def from_videos(folder: str | Path, out: str | Path, *, frame_height: int | None = None,
                frame_width: int | None = None, resize_filter: str = "area", grayscale: bool = False) -> int:
    """Convert a folder of videos with their action arrays; returns the number of recordings written."""
    folder = Path(folder)
    videos = sorted(p for p in folder.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES) if folder.is_dir() else []
    if not videos:
        raise WmevalError(f"{folder}: no video files ({', '.join(VIDEO_SUFFIXES)})")
    episodes = []
    for v in videos:
        act_file = v.with_suffix(".npy")
        if not act_file.is_file():
            raise WmevalError(f"{v}: its actions {act_file.name} are missing (one (T, A) array, T = frames - 1)")
        frames, _ = read_video(v)
        if grayscale or (frame_height, frame_width) != (None, None):
            frames = np.stack([resize_frame(f, frame_height, frame_width, resize_filter, True, grayscale)
                               for f in frames])
        actions = _load_array(act_file)
        actions = actions.reshape(len(actions), -1)
        if len(actions) != len(frames) - 1:
            raise WmevalError(f"{act_file}: {len(actions)} actions for {len(frames)} frames of {v.name} "
                              "(expected frames - 1)")
        rew_file = v.with_name(v.stem + ".rewards.npy")
        rewards = _load_array(rew_file) if rew_file.is_file() else None
        if rewards is not None and len(rewards) != len(actions):
            raise WmevalError(f"{rew_file}: {len(rewards)} rewards for {len(actions)} actions")
        episodes.append({"frames": frames, "actions": actions, "rewards": rewards})
    write_dataset(out, episodes, f"videos in {folder}")
    return len(episodes)
