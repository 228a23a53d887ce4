"""Configuration: compose conf/ into params.yaml exactly as DVC does, and validate it.

``conf/`` (Hydra) is the source of truth. ``dvc exp run`` composes it into
``params.yaml`` through ``dvc.utils.hydra.compose_and_dump``; plain ``dvc repro``
reads the committed ``params.yaml``. :func:`compose_text` calls that very DVC
function, so ``wmeval compose`` writes the same bytes DVC would.

Stages never see a config object: :func:`load_params` validates each section of
``params.yaml`` against a frozen dataclass schema, rejecting unknown keys, missing
keys and wrong types with the key path and value in the message.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from wmeval.core.errors import ConfigError

PARAMS_FILE = "params.yaml"


# ----------------------------------------------------------------------------- schemas

@dataclass(frozen=True)
class WorldConfig:
    """``worlds.<name>``: a built-in ground-truth world."""

    name: str
    kind: str
    params: dict = field(default_factory=dict)
    dynamics: dict = field(default_factory=dict)  # per-world overrides of the ``dynamics`` section


@dataclass(frozen=True)
class ModelsConfig:
    """``models.<world>``: the models evaluated on one world."""

    name: str
    world: str
    entries: dict
    baseline: str | None = None


@dataclass(frozen=True)
class ProtocolConfig:
    """``protocol``: what is rolled out, and how often.

    Attributes:
        n_episodes: evaluation episodes (independent units; bootstrap clusters).
        horizon: open-loop horizon H (steps 1..H).
        num_samples: K, samples drawn from each stochastic model per condition.
        num_futures: M, realized futures drawn from a stochastic world per condition.
        n_random_plans: random action plans per episode (besides the world's declared ones).
        teacher_forced_plan: the plan whose realization 0 is the teacher-forced trajectory.
        frame_dtype: how frames are stored (``uint8``: round(x * 255); ``float32``: exact).
        seed: seed of everything the rollouts draw.
        episode_block: the most episodes rolled out and predicted at once. Memory holds one block's frames
            (bounded whatever ``n_episodes`` is); every random draw is keyed by its block, so the numbers depend on
            it when ``n_episodes`` exceeds it (never on memory). Lower it for large frames or many samples.
    """

    name: str
    n_episodes: int
    horizon: int
    num_samples: int
    num_futures: int
    n_random_plans: int
    teacher_forced_plan: str
    frame_dtype: Literal["uint8", "float32"]
    seed: int
    episode_block: int = 32


@dataclass(frozen=True)
class EncoderConfig:
    """``encoder``: how frames (or clips) are embedded for the distributional metrics.

    Attributes:
        kind: ``pixel``, ``random_conv``, ``inception_fid`` or ``i3d`` (see :mod:`wmeval.encoders`).
        comparable_to_published: whether numbers on these features compare with published FID/FVD.
        params: the kind's parameters (sizes, seed, clip length, weights pin).
        device: ``auto`` (CUDA when present), ``cpu`` or ``cuda``.
        batch_size: images (or clips) per forward pass.
        weights_dir: where weights files live (default ``$WMEVAL_WEIGHTS_DIR`` or the user cache).
        cache_dir: the shared embedding cache (default ``$WMEVAL_CACHE_DIR`` or the user cache).
        precision: the network's arithmetic: ``fp32`` (the default, exact reference), ``bf16`` (autocast to
            bfloat16, on a CPU with AVX512-BF16/AMX or a GPU) or ``tf32`` (TensorFloat-32 matmuls and convolutions,
            CUDA only). Opt-in: it changes the embeddings (``benchmarks/encoder_precision.py`` measures by how
            much), is part of the cache key, and the protocol card records it.
    """

    name: str
    kind: str
    comparable_to_published: bool
    params: dict = field(default_factory=dict)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    batch_size: int = 64
    weights_dir: str | None = None
    cache_dir: str | None = None
    precision: Literal["fp32", "bf16", "tf32"] = "fp32"


@dataclass(frozen=True)
class BootstrapConfig:
    """``bootstrap``: the trajectory-clustered bootstrap.

    Attributes:
        n_resamples: B for every metric that is a ratio of per-episode sums.
        n_resamples_distributional: B for FD and KID, whose replicates recompute moments and a
            matrix square root (the cost floor, see benchmarks/fd_replicates.py).
        n_resamples_fd_infinity: B for FD-infinity, whose replicates each refit the extrapolation over
            episode subsets: the first of the distributional replicates' resamplings, so at most
            ``n_resamples_distributional`` are used (the smaller of the two; the cards give B).
        n_jobs: workers for the distributional replicates (forked processes on Linux, else threads; 0: every
            core this process may run on, at most ``$WMEVAL_JOBS``); results do not depend on it.
    """

    name: str
    n_resamples: int
    confidence_level: float
    method: Literal["percentile"]
    seed: int
    n_resamples_distributional: int = 500
    n_resamples_fd_infinity: int = 200
    n_jobs: int = 0


@dataclass(frozen=True)
class ScoringConfig:
    """``scoring``: how the statistics stage scores observations (seed 000's declared choices).

    Attributes:
        lpips: LPIPS backbone (``alex`` or ``vgg``; its torchvision file must be in the weights
            directory) or ``null`` for none.
        views: distributional views, ``frame`` (predicted frames against real frames, the
            published FID construction) and/or ``transition`` (each frame joined with the previous one).
        strata: ``action`` (bins of the action that led to the frame) or ``plan`` (plan condition).
        action_bins: increasing bin edges over the action's first component (covering its range).
        strata_weights: ``uniform`` or ``empirical`` weights of the stratified FD.
        min_stratum_count: strata with fewer rows on either side are flagged (never dropped).
        kid_subsets, kid_subset_size: KID's seeded subsets (all rows when fewer).
        fd_inf_points, fd_inf_min_fraction, fd_inf_draws: FD-infinity's grid of N (evenly spaced from
            the fraction of the generated rows to all of them) and draws per grid point.
        prdc_k: k of the k-NN balls of precision/recall/density/coverage.
        seed: seed of subsets and draws.
    """

    name: str
    lpips: str | None = None
    views: list = dataclasses.field(default_factory=lambda: ["frame", "transition"])
    strata: Literal["action", "plan"] = "action"
    action_bins: list = dataclasses.field(default_factory=lambda: [-1.0, -0.34, 0.34, 1.0])
    strata_weights: Literal["uniform", "empirical"] = "uniform"
    min_stratum_count: int = 32
    kid_subsets: int = 100
    kid_subset_size: int = 10000
    fd_inf_points: int = 5
    fd_inf_min_fraction: float = 0.2
    fd_inf_draws: int = 2
    prdc_k: int = 5
    seed: int = 0


@dataclass(frozen=True)
class DynamicsConfig:
    """``dynamics``: seed 002's state-level layers (rollout curves, sensitivity, counterfactuals,
    control, probes), run on their own episode set, state predictions only.

    Attributes:
        n_episodes: dynamics episodes (seed 002: 200 starts uniform in the world's box).
        horizon: open-loop rollout curves, steps 1..horizon (seed: 50).
        n_random_plans: random plans per episode (besides the world's declared plans).
        counterfactual_horizon: the step at which counterfactual cosine and gap are summarised (seed: 20).
        n_plans, plan_horizon: random-shooting planner budget (seed: 256 plans of 15 steps).
        control_episodes, control_steps: MPC episodes in the real world (seed: 20 of 60 steps).
        probe_horizon, probe_windows, probe_tolerance: energy-type probes (seed: 200 steps, w = 1 and 20, 1e-6).
        probe_max_true_rate: a probe that flags more than this share of the true world's steps is
            miscalibrated and is not used to judge models.
        seed: seed of the dynamics draws.
    """

    name: str
    n_episodes: int
    horizon: int
    n_random_plans: int
    counterfactual_horizon: int
    n_plans: int
    plan_horizon: int
    control_episodes: int
    control_steps: int
    probe_horizon: int
    probe_windows: list
    probe_tolerance: float
    probe_max_true_rate: float
    seed: int


@dataclass(frozen=True)
class HumanConfig:
    """``human``: the human-judgment study composed into the scorecard (README, "Human judgments").

    Attributes:
        name: the option's name.
        study: the folder of an exported study under ``studies/`` (its ``study.json`` and ``answers/``), or
            ``None``: no study, and every evaluator is reported "not validated".
        evaluators: metrics (per-episode values from the statistics stage) to validate against the judgments.
        n_resamples: B of the crossed (trajectory x rater) bootstrap.
        confidence_level: of every human interval.
        seed: of the bootstrap.
    """

    name: str = "default"
    study: str | None = None
    evaluators: list = field(default_factory=lambda: ["pixel_mse", "ssim", "feature_mse"])
    n_resamples: int = 1000
    confidence_level: float = 0.95
    seed: int = 0


def _check_human(human: HumanConfig, source: str) -> None:
    if human.study is not None:
        parts = Path(human.study).parts
        if Path(human.study).is_absolute() or len(parts) < 2 or parts[0] != "studies" or ".." in parts:
            raise ConfigError(f"{source}: human.study = {human.study!r}: a study must be a folder under studies/ "
                              "(the human stage's declared dependency), e.g. studies/my-study")
    if human.n_resamples < 100:
        raise ConfigError(f"{source}: human.n_resamples = {human.n_resamples}; use at least 100")
    if not 0.5 < human.confidence_level < 1.0:
        raise ConfigError(f"{source}: human.confidence_level = {human.confidence_level}; must be in (0.5, 1)")


@dataclass(frozen=True)
class ExecutionConfig:
    """``execution``: where the heavy stages' shards run (README, "Scale-out on Ray"). It never changes an
    output (tests/test_ray.py compares every byte), so no stage declares it as a DVC param.

    Attributes:
        name: the option's name.
        kind: ``local`` (this process; Ray is not imported) or ``ray``.
        address: ``ray`` only: ``auto`` (a running cluster), ``local`` (start one here), ``ray://host:port``
            (Ray Client) or ``host:port`` (the head's GCS).
        num_cpus: CPUs per model actor, encoder actor and bootstrap task, unless a role's own key says otherwise.
        num_gpus: GPUs per model actor and encoder actor (the bootstrap's tasks use none), likewise.
        rollout_num_cpus, rollout_num_gpus: the rollouts stage's model actors' own (``None``: ``num_cpus``,
            ``num_gpus``).
        encoder_num_cpus, encoder_num_gpus: the features stage's encoder actors' own.
        bootstrap_num_cpus: each bootstrap task's own.
        rollout_actors_per_model: actors per model in the rollouts stage, its blocks of episodes spread over them
            (0: as many as the cluster holds beside the wave's other models).
        actors: encoder actors (each loads the encoder once); 0: as many as the cluster has CPUs for.
        rows_per_shard: frames or clips per encoder call, rounded up to whole encoder batches.
        replicates_per_shard: bootstrap replicates per task.
        max_retries: how often a shard whose worker died is retried (finished shards are kept), and how often
            an actor is restarted.
        placement_timeout_s: how long to wait for the cluster to have room for a group of actors.
    """

    name: str = "local"
    kind: Literal["local", "ray"] = "local"
    address: str = "auto"
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    rollout_num_cpus: float | None = None
    rollout_num_gpus: float | None = None
    encoder_num_cpus: float | None = None
    encoder_num_gpus: float | None = None
    bootstrap_num_cpus: float | None = None
    rollout_actors_per_model: int = 1
    actors: int = 0
    rows_per_shard: int = 512
    replicates_per_shard: int = 25
    max_retries: int = 3
    placement_timeout_s: float = 600.0

    def resources(self, role: Literal["rollout", "encoder", "bootstrap"]) -> dict[str, float]:
        """The Ray resources of one actor or task of ``role``: ``{"CPU": n}`` plus ``"GPU"`` when it has any."""
        cpus = getattr(self, f"{role}_num_cpus")
        gpus = 0.0 if role == "bootstrap" else getattr(self, f"{role}_num_gpus")
        cpus = self.num_cpus if cpus is None else cpus
        gpus = self.num_gpus if gpus is None and role != "bootstrap" else (gpus or 0.0)
        return {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}


def _check_execution(ex: ExecutionConfig, source: str) -> None:
    for role in ("rollout", "encoder", "bootstrap"):
        for kind in ("cpus", "gpus") if role != "bootstrap" else ("cpus",):
            v = getattr(ex, f"{role}_num_{kind}")
            if v is not None and (v < 0 or (kind == "cpus" and v == 0)):
                raise ConfigError(f"{source}: execution.{role}_num_{kind} = {v}; must be "
                                  f"{'> 0' if kind == 'cpus' else '>= 0'} (or null: execution.num_{kind})")
    if ex.rollout_actors_per_model < 0:
        raise ConfigError(f"{source}: execution.rollout_actors_per_model = {ex.rollout_actors_per_model}; must be >= 0 "
                          "(0: as many as the cluster holds)")
    if ex.num_cpus <= 0 or ex.num_gpus < 0 or ex.actors < 0 or ex.max_retries < 0:
        raise ConfigError(f"{source}: execution: num_cpus = {ex.num_cpus} must be > 0, num_gpus = {ex.num_gpus}, "
                          f"actors = {ex.actors} and max_retries = {ex.max_retries} >= 0")
    if ex.placement_timeout_s <= 0:
        raise ConfigError(f"{source}: execution.placement_timeout_s = {ex.placement_timeout_s}; must be > 0")
    if ex.rows_per_shard < 1 or ex.replicates_per_shard < 1:
        raise ConfigError(f"{source}: execution: rows_per_shard = {ex.rows_per_shard} and replicates_per_shard = "
                          f"{ex.replicates_per_shard} must be >= 1")


@dataclass(frozen=True)
class Params:
    worlds: dict[str, WorldConfig]
    models: dict[str, ModelsConfig]
    protocol: ProtocolConfig
    encoder: EncoderConfig
    bootstrap: BootstrapConfig
    dynamics: DynamicsConfig
    scoring: ScoringConfig
    human: HumanConfig = field(default_factory=HumanConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)


def _check_type(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{where} = {value!r}; expected one of {list(typing.get_args(tp))}")
        return value
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        return _check_type(value, next(a for a in args if a is not type(None)), where)
    base = origin or tp
    if base is bool:
        ok = isinstance(value, bool)
    elif base is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif base is str:
        ok = isinstance(value, str)
    elif base is dict:
        ok = isinstance(value, dict)
    elif base is list:
        ok = isinstance(value, list)
    else:
        ok = True
    if not ok:
        name = getattr(base, "__name__", str(base))
        raise ConfigError(f"{where} = {value!r} ({type(value).__name__}); expected {name}")
    return value


def parse_section(cls: type, data: Any, where: str) -> Any:
    """Validate ``data`` against dataclass ``cls``; ``where`` is the key path for messages."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(fields)}")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{where}: required key {name!r} is missing")
            continue
        kwargs[name] = _check_type(data[name], hints[name], f"{where}.{name}")
    return cls(**kwargs)


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def _check_name(name: Any, where: str) -> None:
    # Names become file names (data/rollouts/<world>/<model>.parquet).
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}: name {name!r} must match {_NAME.pattern} (it is used as a file name)")


def _check_models(models: dict[str, ModelsConfig], worlds: dict[str, WorldConfig], source: str) -> None:
    for k, m in models.items():
        if m.world not in worlds:
            raise ConfigError(
                f"{source}: models.{k}.world = {m.world!r} is not a selected world "
                f"(worlds: {sorted(worlds)}); select it or drop this models option")
        if not m.entries:
            raise ConfigError(f"{source}: models.{k}.entries is empty")
        for name, entry in m.entries.items():
            _check_name(name, f"{source}: models.{k}.entries.{name}")
            if name == "ground_truth":
                raise ConfigError(f"{source}: models.{k}.entries: 'ground_truth' is reserved for the true world")
            if not isinstance(entry, dict):
                raise ConfigError(f"{source}: models.{k}.entries.{name} = {entry!r}; expected a mapping with _target_")
        if m.baseline is not None and m.baseline not in m.entries:
            raise ConfigError(f"{source}: models.{k}.baseline = {m.baseline!r} is not one of {sorted(m.entries)}")
    for k, w in worlds.items():
        _check_name(k, f"{source}: worlds.{k}")
        if w.name != k:
            raise ConfigError(f"{source}: worlds.{k}.name = {w.name!r} must equal its key {k!r}")
    by_world: dict[str, list[str]] = {}
    for k, m in models.items():
        by_world.setdefault(m.world, []).append(k)
    for w, ks in by_world.items():
        if len(ks) > 1:
            raise ConfigError(f"{source}: models options {ks} all target world {w!r}; select one per world")


def _check_protocol(protocol: ProtocolConfig, source: str) -> None:
    for key in ("n_episodes", "horizon", "num_samples", "num_futures"):
        if getattr(protocol, key) < 1:
            raise ConfigError(f"{source}: protocol.{key} = {getattr(protocol, key)}; must be >= 1")
    if protocol.n_episodes < 2:
        raise ConfigError(f"{source}: protocol.n_episodes = {protocol.n_episodes}; episodes are the bootstrap's "
                          "clusters and an interval needs at least 2 (one gives a zero-width interval)")
    if protocol.episode_block < 3:
        raise ConfigError(f"{source}: protocol.episode_block = {protocol.episode_block}; must be >= 3, so that "
                          "every block of episodes holds at least 2 (the shuffled control borrows within a block)")
    if protocol.n_random_plans < 0 or protocol.seed < 0:
        raise ConfigError(f"{source}: protocol.n_random_plans and protocol.seed must be >= 0")


def _check_encoder(encoder: EncoderConfig, protocol: ProtocolConfig, source: str) -> None:
    if encoder.kind != "i3d":
        return
    length, stride = encoder.params.get("clip_length", 16), encoder.params.get("frame_stride", 1)
    if not (isinstance(length, int) and isinstance(stride, int) and length >= 1 and stride >= 1):
        raise ConfigError(f"{source}: encoder.params clip_length = {length!r} and frame_stride = {stride!r} "
                          "must be integers >= 1")
    if 1 + stride * (length - 1) > protocol.horizon:
        raise ConfigError(f"{source}: encoder {encoder.name!r} embeds clips of {length} frames with stride "
                          f"{stride} (steps 1..{1 + stride * (length - 1)}), longer than protocol.horizon = "
                          f"{protocol.horizon}; raise the horizon or lower encoder.params.clip_length")


def _check_bootstrap(boot: BootstrapConfig, source: str) -> None:
    if boot.n_resamples < 100:
        raise ConfigError(f"{source}: bootstrap.n_resamples = {boot.n_resamples}; use at least 100")
    if not 0.5 < boot.confidence_level < 1.0:
        raise ConfigError(f"{source}: bootstrap.confidence_level = {boot.confidence_level}; must be in (0.5, 1)")
    if boot.n_resamples_distributional < 100 or boot.n_jobs < 0:
        raise ConfigError(f"{source}: bootstrap.n_resamples_distributional = {boot.n_resamples_distributional} "
                          f"(use at least 100) and bootstrap.n_jobs = {boot.n_jobs} (>= 0)")
    if boot.n_resamples_fd_infinity < 100:
        raise ConfigError(f"{source}: bootstrap.n_resamples_fd_infinity = {boot.n_resamples_fd_infinity}; "
                          "use at least 100")


#: The sections of params.yaml.
SECTIONS = ("worlds", "models", "protocol", "encoder", "bootstrap", "dynamics", "scoring")
#: Sections that may be left out (their defaults apply).
OPTIONAL_SECTIONS = ("human", "execution")


#: Params keys DVC 3's run cache leaves out of a stage's hash at any depth (``dvc/stage/cache.py``:
#: ``dict_sha256(..., exclude=[PARAM_SIZE, PARAM_NFILES])``): a changed value would restore cached outputs.
DVC_UNHASHED_KEYS = ("size", "nfiles")


def unhashed_keys(raw: Any, path: str = "") -> list[str]:
    """Dotted paths of every mapping key named in :data:`DVC_UNHASHED_KEYS`, at any depth (lists included)."""
    out = []
    if isinstance(raw, dict):
        for k, v in raw.items():
            here = f"{path}.{k}" if path else str(k)
            if k in DVC_UNHASHED_KEYS:
                out.append(here)
            out += unhashed_keys(v, here)
    elif isinstance(raw, list):
        for i, v in enumerate(raw):
            out += unhashed_keys(v, f"{path}[{i}]")
    return out


def bad_seeds(raw: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(dotted path, value)`` of every key named ``seed`` or ``*_seed`` whose value is not an integer >= 0
    (numpy's generators refuse negative seeds, and would say so only after earlier stages had run)."""
    out = []
    if isinstance(raw, dict):
        for k, v in raw.items():
            here = f"{path}.{k}" if path else str(k)
            if str(k) == "seed" or str(k).endswith("_seed"):
                if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                    out.append((here, v))
            else:
                out += bad_seeds(v, here)
    return out


def validate_params(raw: Any, source: str = PARAMS_FILE) -> Params:
    """Validate a whole params mapping; raises :class:`ConfigError` naming the key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    seeds = bad_seeds(raw)
    if seeds:
        raise ConfigError(f"{source}: {seeds[0][0]} = {seeds[0][1]!r}; a seed must be an integer >= 0")
    bad = unhashed_keys(raw)
    if bad:
        raise ConfigError(f"{source}: {bad[0]}: a params key named {bad[0].rsplit('.', 1)[-1]!r} is left out of DVC's "
                          "run-cache hash, so changing its value would return the previous run's outputs; rename "
                          "it (wmeval uses e.g. frame_size, resolution)")
    allowed = set(SECTIONS)
    unknown = sorted(set(raw) - allowed - set(OPTIONAL_SECTIONS))
    if unknown:
        raise ConfigError(f"{source}: unknown top-level key(s) {unknown}; allowed: "
                          f"{sorted(allowed | set(OPTIONAL_SECTIONS))}")
    for key in sorted(allowed):
        if key not in raw:
            raise ConfigError(f"{source}: section {key!r} is missing or empty (an empty selection such as "
                              f"{key}=[] leaves it out); select at least one")
    worlds = {k: parse_section(WorldConfig, v, f"{source}: worlds.{k}") for k, v in (raw["worlds"] or {}).items()}
    if not worlds:
        raise ConfigError(f"{source}: worlds is empty; select at least one world")
    models = {k: parse_section(ModelsConfig, v, f"{source}: models.{k}") for k, v in (raw["models"] or {}).items()}
    _check_models(models, worlds, source)
    protocol = parse_section(ProtocolConfig, raw["protocol"], f"{source}: protocol")
    _check_protocol(protocol, source)
    encoder = parse_section(EncoderConfig, raw["encoder"], f"{source}: encoder")
    _check_encoder(encoder, protocol, source)
    boot = parse_section(BootstrapConfig, raw["bootstrap"], f"{source}: bootstrap")
    _check_bootstrap(boot, source)
    dyn = parse_section(DynamicsConfig, raw["dynamics"], f"{source}: dynamics")
    _check_dynamics(dyn, f"{source}: dynamics")
    scoring = parse_section(ScoringConfig, raw["scoring"], f"{source}: scoring")
    _check_scoring(scoring, f"{source}: scoring")
    human = parse_section(HumanConfig, raw.get("human") or {}, f"{source}: human")
    _check_human(human, source)
    execution = parse_section(ExecutionConfig, raw.get("execution") or {}, f"{source}: execution")
    _check_execution(execution, source)
    params = Params(worlds=worlds, models=models, protocol=protocol, encoder=encoder, bootstrap=boot,
                    dynamics=dyn, scoring=scoring, human=human, execution=execution)
    for k in worlds:
        _check_dynamics(world_dynamics(params, k, source), f"{source}: dynamics (with worlds.{k}.dynamics)")
    return params


def _check_scoring(sc: "ScoringConfig", where: str) -> None:
    if sc.lpips not in (None, "alex", "vgg"):
        raise ConfigError(f"{where}.lpips = {sc.lpips!r}; expected null, 'alex' or 'vgg'")
    bad = [v for v in sc.views if v not in ("frame", "transition")]
    if not sc.views or bad or len(set(sc.views)) != len(sc.views):
        raise ConfigError(f"{where}.views = {sc.views!r}; expected distinct entries of ['frame', 'transition']")
    edges = sc.action_bins
    if (len(edges) < 2 or any(isinstance(e, bool) or not isinstance(e, (int, float)) for e in edges)
            or any(b <= a for a, b in zip(edges, edges[1:]))):
        raise ConfigError(f"{where}.action_bins = {edges!r}; expected at least two increasing numbers")
    for key in ("min_stratum_count", "kid_subsets", "kid_subset_size", "prdc_k", "fd_inf_draws"):
        if getattr(sc, key) < 1:
            raise ConfigError(f"{where}.{key} = {getattr(sc, key)}; must be >= 1")
    if sc.kid_subset_size < 2 or sc.fd_inf_points < 2 or not 0 < sc.fd_inf_min_fraction < 1:
        raise ConfigError(f"{where}: kid_subset_size = {sc.kid_subset_size} (>= 2), fd_inf_points = "
                          f"{sc.fd_inf_points} (>= 2) and fd_inf_min_fraction = {sc.fd_inf_min_fraction} (in (0, 1))")


def _check_dynamics(dyn: "DynamicsConfig", where: str) -> None:
    for key in ("n_episodes", "horizon", "counterfactual_horizon", "n_plans", "plan_horizon",
                "control_episodes", "control_steps", "probe_horizon"):
        if getattr(dyn, key) < 1:
            raise ConfigError(f"{where}: {key} = {getattr(dyn, key)}; must be >= 1")
    for key in ("n_episodes", "control_episodes"):
        if getattr(dyn, key) < 2:
            raise ConfigError(f"{where}: {key} = {getattr(dyn, key)}; episodes are the bootstrap's clusters and "
                              "an interval needs at least 2 (one gives a zero-width interval)")
    if dyn.counterfactual_horizon > dyn.horizon:
        raise ConfigError(f"{where}: counterfactual_horizon = {dyn.counterfactual_horizon} exceeds "
                          f"dynamics.horizon = {dyn.horizon}")
    if dyn.n_random_plans < 1:
        raise ConfigError(f"{where}: n_random_plans = {dyn.n_random_plans}; the random-action rollout curve "
                          "needs at least 1")
    windows = dyn.probe_windows
    if (not windows or len(set(windows)) != len(windows)
            or any(isinstance(w, bool) or not isinstance(w, int) or not 1 <= w < dyn.probe_horizon for w in windows)):
        raise ConfigError(f"{where}: probe_windows = {windows}; expected distinct integers in "
                          f"[1, probe_horizon = {dyn.probe_horizon})")
    if dyn.probe_tolerance < 0 or not 0 <= dyn.probe_max_true_rate <= 1:
        raise ConfigError(f"{where}: probe_tolerance = {dyn.probe_tolerance} must be >= 0 and "
                          f"probe_max_true_rate = {dyn.probe_max_true_rate} in [0, 1]")


def world_dynamics(params: Params, world: str, source: str = PARAMS_FILE) -> DynamicsConfig:
    """The ``dynamics`` section with ``worlds.<world>.dynamics`` overrides applied."""
    over = params.worlds[world].dynamics
    if not over:
        return params.dynamics
    merged = {**dataclasses.asdict(params.dynamics), **over}
    return parse_section(DynamicsConfig, merged, f"{source}: worlds.{world}.dynamics")


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Read and validate ``params.yaml``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: missing; run `wmeval compose` to write it from conf/")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    return validate_params(raw, str(path))


# ----------------------------------------------------------------------------- compose

def find_root(start: str | Path = ".") -> Path:
    """The project root: the nearest directory above ``start`` holding ``.dvc/`` and ``conf/``."""
    p = Path(start).resolve()
    for d in (p, *p.parents):
        if (d / ".dvc").is_dir() and (d / "conf").is_dir():
            return d
    raise ConfigError(f"no wmeval project (a directory with .dvc/ and conf/) at or above {p}")


def hydra_settings(root: Path) -> dict[str, str]:
    """The ``[hydra]`` section of ``.dvc/config`` (the keys DVC itself reads)."""
    from configobj import ConfigObj

    cfg_path = root / ".dvc" / "config"
    section = dict(ConfigObj(str(cfg_path)).get("hydra", {})) if cfg_path.is_file() else {}
    if str(section.get("enabled", "false")).lower() != "true":
        raise ConfigError(f"{cfg_path}: hydra.enabled is not true; `dvc config hydra.enabled true`")
    return {
        "config_dir": section.get("config_dir", "conf"),
        "config_name": section.get("config_name", "config"),
        "plugins_path": section.get("plugins_path", ""),
    }


def _one_line(message: str, conf: Path) -> str:
    """Hydra's multi-line composition error as one line: what failed, and the options there are."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    head = lines[0] if lines else message
    group = re.search(r"'([\w/]+)/[^/']+'", head)
    if group and (conf / group.group(1)).is_dir():
        options = sorted(f.stem for f in (conf / group.group(1)).glob("*.yaml"))
        head += f" (options in {group.group(1)}/: {', '.join(options)})"
    return head


def compose_text(overrides: list[str] | None = None, root: str | Path | None = None) -> str:
    """Compose ``conf/`` with Hydra ``overrides`` the way ``dvc exp run`` does; return the YAML."""
    from dvc.utils.hydra import compose_and_dump
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    root = find_root() if root is None else Path(root).resolve()
    hs = hydra_settings(root)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / PARAMS_FILE
        try:
            compose_and_dump(out, str(root / hs["config_dir"]), None, hs["config_name"],
                             str(root / hs["plugins_path"]), list(overrides or []))
        except (HydraException, OmegaConfBaseException) as e:
            raise ConfigError(f"cannot compose {root / hs['config_dir']} with overrides {overrides or []}: "
                              f"{_one_line(str(e), root / hs['config_dir'])}") from None
        return out.read_text(encoding="utf-8")
