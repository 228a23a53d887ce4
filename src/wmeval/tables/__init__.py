"""The data model: rollout and feature tables (Arrow, Parquet), their blocks, and the long statistics schema.

- :mod:`.io`: the rollout table builder, fixed-shape tensor columns, frame encoding, file
  metadata, and atomic writes;
- :mod:`.blocks`: one (regime, plan) block of a table scattered into dense arrays;
- :mod:`.long`: the long per-episode statistics schema.
"""

from .blocks import Block, blocks, column_numpy, dense, select
from .io import (
                 KEY_COLUMNS,
                 METADATA_KEY,
                 REGIMES,
                 WINDOW_BYTES,
                 atomic_dir,
                 atomic_write_bytes,
                 atomic_write_text,
                 decode_frames,
                 encode_frames,
                 episode_windows,
                 read_episodes,
                 read_metadata,
                 read_table,
                 rollout_table,
                 shift_episodes,
                 tensor_array,
                 tensor_numpy,
                 with_metadata,
                 write_blocks,
                 write_table,
)
from .long import LONG_COLUMNS, long_rows

__all__ = ["Block", "blocks", "column_numpy", "dense", "select", "KEY_COLUMNS", "METADATA_KEY", "REGIMES",
           "WINDOW_BYTES", "atomic_dir", "atomic_write_bytes", "atomic_write_text", "decode_frames", "encode_frames",
           "episode_windows", "read_episodes", "read_metadata", "read_table", "rollout_table", "shift_episodes",
           "tensor_array", "tensor_numpy", "with_metadata", "write_blocks", "write_table", "LONG_COLUMNS", "long_rows"]
