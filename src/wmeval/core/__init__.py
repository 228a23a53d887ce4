"""The core every layer and stage uses: errors, the params schema, seeded RNG, digests, the stage runner.

- :mod:`.errors`: :class:`WmevalError` and its kinds (one-line message, exit 2);
- :mod:`.config`: the ``params.yaml`` schema, its validation and the Hydra composition;
- :mod:`.rng`: :func:`make_rng`, one seed and keys to a ``numpy.random.Generator``;
- :mod:`.digest`: file digests and each stage's code digest;
- :mod:`.runner`: :func:`main`, the entry point of every script in ``stages/``.
"""
