"""Stage features: embed every rollout frame -> data/features/<world>/<source>.parquet."""

from pathlib import Path

from wmeval.config import load_params
from wmeval.encoders import build_encoder
from wmeval.features import embed_file
from wmeval.stage import main
from wmeval.tables import atomic_dir, write_table

IN, OUT = Path("data/rollouts"), Path("data/features")


def run() -> None:
    params = load_params()
    encoder = build_encoder(params.encoder)
    with atomic_dir(OUT) as tmp:
        for name in params.worlds:
            (tmp / name).mkdir()
            for f in sorted((IN / name).glob("*.parquet")):
                write_table(embed_file(f, encoder), tmp / name / f.name)


if __name__ == "__main__":
    main(run)
