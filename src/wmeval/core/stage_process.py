"""Imported first by every script in ``stages/``: the stage process's memory settings
(:func:`wmeval.core.allocator.prepare_memory`), made on import so that they precede the imports that load numpy
and pyarrow, which read two of them when they are loaded. Nothing else imports it (and pytest leaves it out of the
doctest collection, whose import would set them in the test processes)."""

from wmeval.core.allocator import prepare_memory

prepare_memory()
