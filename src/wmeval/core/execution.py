"""Where the heavy stages' shards run: in the stage's process (``execution.kind: local``, the default) or on
a Ray cluster (``ray``).

Two kinds of shard, each with an order-independent merge, so that the outputs do not depend on the number of
workers or on the order in which shards finish:

- :meth:`RayExecutor.map` runs a pure function over items in chunks (the bootstrap's replicates: each
  depends only on its row of resampling counts, drawn once by the driver); results come back in item order.
- :meth:`RayExecutor.actors` starts actors that each load something once (the features stage's encoder:
  :class:`wmeval.features.pool.EncoderPool` splits rows into whole encoder batches and reassembles them in
  row order).

A worker process that dies is replaced and its shard run again (Ray's task retries and actor restarts);
shards already finished are kept. Nothing here imports Ray unless ``kind`` is ``ray``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from wmeval.core.config import ExecutionConfig
from wmeval.core.errors import ConfigError

log = logging.getLogger(__name__)


def executor_for(execution: ExecutionConfig) -> RayExecutor | None:
    """``None`` for local execution (the stage's own code paths), else a connected :class:`RayExecutor`."""
    if execution.kind == "local":
        return None
    return RayExecutor(execution)


def _run_chunk(fn: Callable, items: Sequence) -> list:
    from threadpoolctl import threadpool_limits

    # One BLAS thread per task, as the local threads run: the same arithmetic, the same bits.
    with threadpool_limits(limits=1):
        return [fn(x) for x in items]


class RayExecutor:
    """A connection to a Ray cluster, with the execution config's resources and retries."""

    def __init__(self, execution: ExecutionConfig) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("execution.kind = 'ray' needs Ray: pip install -e \".[ray]\" (or choose "
                              "execution=local)") from None
        self.cfg, self._ray = execution, ray
        if not ray.is_initialized():
            address = None if execution.address == "local" else execution.address
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                     configure_logging=True)
        self._run = ray.remote(_run_chunk).options(num_cpus=execution.num_cpus, max_retries=execution.max_retries,
                                                   retry_exceptions=False)
        log.info("execution: Ray cluster at %s with %s CPUs, %s GPUs", execution.address,
                 ray.cluster_resources().get("CPU", 0), ray.cluster_resources().get("GPU", 0))

    def map(self, fn: Callable, items: Sequence, chunk: int | None = None,
            progress: Callable[[int], Any] | None = None) -> list:
        """``[fn(x) for x in items]``, in chunks of ``chunk`` (default ``replicates_per_shard``) as Ray tasks;
        ``fn`` is sent to the object store once."""
        chunk = chunk or self.cfg.replicates_per_shard
        if not len(items):
            return []
        ref = self._ray.put(fn)
        parts = [items[i:i + chunk] for i in range(0, len(items), chunk)]
        futures = [self._run.remote(ref, p) for p in parts]
        out: list = [None] * len(futures)
        index = {f: i for i, f in enumerate(futures)}
        pending = list(futures)
        while pending:
            done, pending = self._ray.wait(pending, num_returns=1)
            for f in done:
                out[index[f]] = self._ray.get(f)
                if progress is not None:
                    progress(len(out[index[f]]))
        return [x for part in out for x in part]

    @property
    def ray(self):
        """The ``ray`` module, connected."""
        return self._ray

    def capacity(self) -> int:
        """How many actors of this config the cluster can hold at once (its CPUs, and GPUs when asked for)."""
        res, cfg = self._ray.cluster_resources(), self.cfg
        n = int(res.get("CPU", 1) // cfg.num_cpus)
        if cfg.num_gpus:
            n = min(n, int(res.get("GPU", 0) // cfg.num_gpus))
        return max(1, n)

    def actors(self, cls: type, *args: Any, n: int = 0, num_gpus: float | None = None) -> list:
        """``n`` actors of ``cls(*args)`` (0: one per ``num_cpus`` the cluster has), each restarted when its
        process dies, its pending calls retried up to ``max_retries`` times."""
        cfg = self.cfg
        room = self.capacity()
        n = n or cfg.actors or room
        if n > room:   # an actor holds its resources for life: one that cannot be placed would wait forever
            log.warning("execution: %d actors asked for, the cluster holds %d at once; starting %d", n, room, room)
            n = room
        actor = self._ray.remote(cls).options(num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus if num_gpus is None
                                             else num_gpus, max_restarts=-1, max_task_retries=cfg.max_retries)
        return [actor.remote(*args) for _ in range(n)]
