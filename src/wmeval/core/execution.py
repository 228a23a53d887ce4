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

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from wmeval.core.config import ExecutionConfig
from wmeval.core.errors import ConfigError, WmevalError

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
        self._run = ray.remote(_run_chunk).options(num_cpus=execution.resources("bootstrap")["CPU"],
                                                   max_retries=execution.max_retries, retry_exceptions=False)
        self.capacity("bootstrap")         # a bootstrap task must fit on some node, or it would wait forever
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

    def capacity(self, role: str) -> int:
        """How many actors (or tasks) of ``role`` (``rollout``, ``encoder``, ``bootstrap``: their resources,
        :meth:`ExecutionConfig.resources`) the cluster's live nodes can hold at once, node by node (an actor
        needs its whole bundle on one node). Raises :class:`ConfigError` when not even one fits."""
        bundle = self.cfg.resources(role)
        n = 0
        nodes = [nd for nd in self._ray.nodes() if nd.get("Alive")]
        for nd in nodes:
            res = nd.get("Resources", {})
            n += min(int(res.get(k, 0) // v) for k, v in bundle.items())
        if n == 0:
            have = [{k: nd.get("Resources", {}).get(k, 0) for k in ("CPU", "GPU")} for nd in nodes]
            keys = f"execution.{role}_num_cpus" + ("" if role == "bootstrap" else f" or {role}_num_gpus")
            raise ConfigError(f"execution: no node of the Ray cluster at {self.cfg.address} can hold one {role} "
                              f"actor or task of {bundle} (its nodes have {have}); lower {keys} (or num_cpus, "
                              "num_gpus)")
        return n

    @contextlib.contextmanager
    def actor_group(self, cls: type, args: list[tuple], role: str) -> Iterator[list]:
        """Actors ``cls(*a)`` for each ``a`` in ``args``, each with ``role``'s resources, placed all at once (a
        Ray placement group: all or none, so two stages or two queued experiments sharing the cluster never each
        hold half of what they need), each restarted up to ``max_retries`` times when its process dies, its
        pending calls retried. Killed, and their resources released, on the way out, whatever happens. Waits up
        to ``placement_timeout_s`` for room, then stops with an error naming what was asked."""
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        cfg, ray, bundle = self.cfg, self._ray, self.cfg.resources(role)
        pg = placement_group([bundle] * len(args), strategy="SPREAD")
        actors: list = []
        try:
            try:
                ray.get(pg.ready(), timeout=cfg.placement_timeout_s)
            except ray.exceptions.GetTimeoutError:
                raise WmevalError(f"execution: the Ray cluster at {cfg.address} could not place {len(args)} actor(s) "
                                  f"of {bundle} within {cfg.placement_timeout_s} s (free: "
                                  f"{ray.available_resources()}); lower execution.actors or "
                                  f"rollout_actors_per_model, {role}_num_cpus / {role}_num_gpus (or num_cpus, "
                                  "num_gpus), or wait for other work on the cluster") from None
            remote = ray.remote(cls)
            for i, a in enumerate(args):
                actors.append(remote.options(
                    num_cpus=bundle["CPU"], num_gpus=bundle.get("GPU", 0), max_restarts=cfg.max_retries,
                    max_task_retries=cfg.max_retries,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
                ).remote(*a))
            yield actors
        finally:
            for a in actors:
                ray.kill(a)
            remove_placement_group(pg)
