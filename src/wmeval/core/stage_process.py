"""Imported first by every script in ``stages/``: the stage process's memory settings
(:func:`wmeval.core.allocator.prepare_memory`) and its numerical kernels (:func:`wmeval.core.kernels.pin_kernels`),
made on import so that they precede the imports that load numpy, scipy and pyarrow, which read them when they are
loaded. Nothing else imports it (and pytest leaves it out of the doctest collection, whose import would set them
in the test processes)."""

from wmeval.core.allocator import prepare_memory
from wmeval.core.kernels import pin_kernels

prepare_memory()
pin_kernels()
