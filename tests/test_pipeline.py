"""End to end: `dvc repro` and `dvc exp run` of a tiny config in a temporary git repository."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import RUN_RECORD, make_project, output_digests

from wmeval.core.config import compose_text
from wmeval.tables import read_metadata

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def run(cmd, cwd, check=True, **extra_env):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1",
           **extra_env}
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"{cmd} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    dest = tmp_path_factory.mktemp("e2e") / "proj"
    # The tiny protocol as the default, so that `dvc exp run` (which re-composes conf/) stays tiny too.
    make_project(dest, [])
    cfg = dest / "conf" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("protocol: default", "protocol: tiny").replace("dynamics: default", "dynamics: tiny")
                   .replace("bootstrap: percentile", "bootstrap: tiny"))
    (dest / "params.yaml").write_text(compose_text([], dest))
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qam", "tiny"], dest)
    run([str(BIN / "dvc"), "repro"], dest, WMEVAL_JOBS="1")   # every stage serial (test_parallel_stages_...)
    return dest


def test_repro_writes_every_declared_output(project):
    for out in ("data/rollouts/pendulum/dynamics/linear.parquet", "data/features", "data/stats", "data/bootstrap",
                "reports/metrics.json", "reports/scorecard.md"):
        assert (project / out).exists(), out
    md = (project / "reports" / "scorecard.md").read_text()
    assert "## pendulum" in md and "## blobs" in md and "### Cross-layer ranking" in md
    assert "`mean` has no dynamics layers: the model predicts frames only" in md
    metrics = json.loads((project / "reports" / "metrics.json").read_text())
    m = metrics["pendulum"]["sin-features"]["state_mse"]["open_loop/all"]
    assert m["low"] <= m["point"] <= m["high"]
    # Seed 002's one-step ranking: sin-features < linear < action-blind.
    tf = {k: metrics["pendulum"][k]["state_rmse"]["teacher_forced/all"]["point"] for k in ("sin-features", "linear", "action-blind")}
    assert tf["sin-features"] < tf["linear"] < tf["action-blind"]
    # Rollout files carry their protocol.
    meta = read_metadata(project / "data/rollouts/pendulum/linear.parquet")
    assert meta["protocol"]["name"] == "tiny" and meta["model_config"]["features"] == "linear"
    assert "world" in pq.read_schema(project / "data/rollouts/pendulum/linear.parquet").names
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    assert set(lock["stages"]) == {"rollouts", "features", "statistics", "bootstrap", "human", "report"}


def test_parallel_stages_give_the_serial_bytes(project):
    """The fixture's `dvc repro` ran every stage serial (WMEVAL_JOBS=1, as tests/conftest.py also sets it for the
    stages pytest-xdist workers run). The stages whose work is a forked map run again here with two workers each
    and must write the same bytes, every output file of theirs: the rollouts (the built-in worlds side by side,
    then each world's dynamics sources), the bootstrap (its replicates) and the report (its figures). (The
    statistics stage's forked parts: test_stats.py's test_statistics_read_in_episode_windows_change_no_value.)"""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: WMEVAL_JOBS=2 would run these stages serial too")
    dirs = ("data/rollouts", "data/bootstrap", "reports")
    before = output_digests(project, dirs)
    # The run record (its time, git state and the dvc.lock it saw) differs by design: compared up to it, and its
    # three files put back afterwards, so that DVC finds the workspace as the fixture left it.
    record = {name: (project / name).read_bytes() for name in RUN_RECORD}
    try:
        for stage in ("rollouts", "bootstrap", "report"):
            r = subprocess.run([sys.executable, f"stages/{stage}.py"], cwd=project,
                               env={**os.environ, "WMEVAL_JOBS": "2"}, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-3000:]
        after = output_digests(project, dirs)
        assert len(before) > 30 and after == before, sorted(k for k in set(before) | set(after)
                                                            if before.get(k) != after.get(k))
        for name in ("reports/scorecard.md", "reports/scorecard.html"):
            old, new = record[name].decode(), (project / name).read_text()
            cut = "Provenance</h2>" if name.endswith(".html") else "## Provenance"
            assert cut in new and new[:new.index(cut)] == old[:old.index(cut)], name
    finally:
        for name, data in record.items():
            (project / name).write_bytes(data)


def test_second_repro_has_nothing_to_do(project):
    r = run([str(BIN / "dvc"), "repro"], project)
    assert "Data and pipelines are up to date" in r.stdout
    assert "Running stage" not in r.stdout


def test_compose_check_in_project(project):
    assert run([str(BIN / "wmeval"), "compose", "--check"], project).returncode == 0


def test_a_study_answered_in_chromium_composes_into_the_scorecard(project, tmp_path):
    """Issue 17's acceptance: a study exported from the run's rollouts, every page answered in headless Chromium by
    simulated raters (networking off), the answers files the pages save put back, and `dvc repro` with
    human.study: the human stage and the report re-run (nothing else), and the scorecard gains the human section
    with the declared ranking recovered, the exclusions counted and the study's protocol card."""
    import shutil

    import browser

    from wmeval.human.simulate import RaterPopulation, SimulatedRater

    _require_browser(browser)
    # The study is of this run's frames: the workspace holds the committed config's run (this test comes before
    # the `dvc exp run`s that change it; the repro checks it and has nothing to do), so that the human stage
    # validates against the frames shown.
    params = project / "params.yaml"
    before = params.read_text()
    params.write_text(compose_text([], project))
    r = run([str(BIN / "dvc"), "repro"], project)
    assert "Running stage" not in r.stdout, r.stdout[-2000:]
    study = project / "studies" / "pilot"
    study.mkdir(parents=True)
    cands = ["stochastic", "mean", "realized"]
    (study / "design.yaml").write_text(yaml.safe_dump({
        "name": "pilot", "world": "blobs", "candidates": cands, "population": "simulated raters (tests)",
        "consent": "Consent: only your answers and response times are recorded.", "episodes": 4,
        "plans": ["left", "right"], "raters": 3, "trials_per_rater": 8, "repeats": 2, "attention_checks": 1,
        "exclusions": {"max_failed_checks": 0, "min_response_ms": None},
        "playback": {"fps": 60, "pause_ms": 0, "min_loops": 1}, "seed": 3}))
    run([str(BIN / "wmeval"), "study", "export", "studies/pilot/design.yaml"], project)
    key = json.loads((study / "study.json").read_text())
    declared = {"realized": 3.0, "stochastic": 0.0, "mean": -3.0}
    population = RaterPopulation({"realism": declared, "consistency": declared})
    downloads = tmp_path / "downloads"
    for rater, trials in key["raters"].items():
        sim, by_id = SimulatedRater(population, rater), {t["trial"]: t for t in trials}
        # r03 fails its attention check: excluded with all its answers, and counted.
        if rater == "r03":
            sim = SimulatedRater(RaterPopulation(population.strengths, attention=0.0), rater)

        def choose(trial_id, sim=sim, by_id=by_id):
            t = by_id[trial_id]
            chosen, _ = sim.choose(trajectory=t["episode"], question=t["question"], left=t["left"], right=t["right"],
                                   attention_check=t["attention_check"], expected=t["expected"])
            return "left" if chosen == t["left"] else "right"

        out = browser.answer_study(study / "pages" / f"{rater}.html", choose, downloads / rater)
        assert out["console_errors"] == [] and out["failed_loads"] == [], out
        assert all(u.startswith(("file:", "data:")) for u in out["requests"]), out["requests"]
        assert out["shown"] == [t["trial"] for t in trials]                   # every trial, in the keyed order
        assert out["answers"] == out["text_copy"] and len(out["answers"]["answers"]) == len(trials)
        assert all(a["response_ms"] >= 0 for a in out["answers"]["answers"])
        shutil.copy(out["file"], study / "answers" / out["file"].name)
    try:
        params.write_text(compose_text(["human.study=studies/pilot", "human.n_resamples=200"], project))
        r = run([str(BIN / "dvc"), "repro"], project)
        ran = set(re.findall(r"Running stage '([a-z]+)'", r.stdout))
        assert ran == {"human", "report"}, r.stdout[-2000:]
        summary = json.loads((project / "data/human/summary.json").read_text())
        ex = summary["exclusions"]
        assert ex["raters_excluded"] == ["r03"] and ex["attention_check_trials"] == 3
        assert ex["kept"] == 20 and ex["judgments_of_excluded_raters"] == 10 and ex["total"] == 33
        for q, entry in summary["per_question"].items():
            shown = [c["candidate"] for c in entry["candidates"] if c["comparisons"]]
            assert shown == [c for c in ("realized", "stochastic", "mean") if c in shown], (q, entry)
        md = (project / "reports/scorecard.md").read_text()
        assert "Study **pilot** on world `blobs`" in md and "### Study protocol card" in md
        assert "| `realized` |" in md and "from excluded raters ['r03']" in md
        assert summary["frames_changed"] == []              # the run's data/rollouts still hold the frames shown
        verdicts = {(e["metric"], e["question"]): e["verdict"] for e in summary["evaluators"]}
        assert set(verdicts.values()) <= {"validated on pilot", "not validated"} and len(verdicts) == 6
        card = json.loads((project / "reports/protocols.json").read_text())["human"]
        assert card["study"] == "pilot" and "seed 3" in card["randomization"]
        assert "simulated raters (tests)" in card["rater population"]
    finally:
        # params.yaml as it found it; the outputs stay the study run's (the next tests' `dvc exp run`s re-run the
        # human stage and the report).
        params.write_text(before)


def test_exp_run_set_param_composes_like_wmeval(project):
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "add", "-A"], project)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", "lock"], project)
    # Up to the rollouts stage (the outputs checked); the next test runs a whole-pipeline `dvc exp run` here.
    r = run([str(BIN / "dvc"), "exp", "run", "rollouts", "-S", "protocol.horizon=2"], project)
    assert "Running stage 'rollouts'" in r.stdout and "Running stage 'features'" not in r.stdout
    params = (project / "params.yaml").read_text()
    assert params == compose_text(["protocol.horizon=2"], project)  # same bytes as DVC's composition
    t = pq.read_table(project / "data/rollouts/blobs/ground_truth.parquet", columns=["t"])
    assert max(t.column("t").to_pylist()) == 2


def test_adding_a_model_embeds_only_its_rows(project):
    """A second run after adding one model: the shared cache embeds that model's new rows and nothing else."""
    import re

    run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "add", "-A"], project)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", "exp", "--allow-empty"], project)
    # The whole pipeline: statistics, bootstrap and report with a model added by override (the next tests read
    # those reports).
    r = run([str(BIN / "dvc"), "exp", "run", "-S", "protocol.horizon=3",
             "-S", "+models.pendulum.entries.refit._target_=wmeval.models.LeastSquaresPendulumModel",
             "-S", "+models.pendulum.entries.refit.features=linear",
             "-S", "+models.pendulum.entries.refit.fit_seed=1"], project)
    log = r.stdout + r.stderr
    counts = {m[0]: (int(m[1]), int(m[2]), int(m[3]))
              for m in re.findall(r"(\w+/[\w.+-]+\.parquet): (\d+) rows, (\d+) from the cache, (\d+) embedded", log)}
    assert counts, log[-2000:]
    new = counts.pop("pendulum/refit.parquet")
    assert new[2] > 0 and new[0] == new[1] + new[2]
    assert all(e == 0 for _, _, e in counts.values()), counts
    assert "Running stage 'report'" in r.stdout
    assert "`refit`" in (project / "reports" / "scorecard.md").read_text()


def test_report_outputs_protocol_cards_and_dvc_plots(project):
    """Every interval has a protocol card; numbers-only metrics; `dvc plots show` and `dvc metrics show` work."""
    import csv

    rows = list(csv.DictReader((project / "reports" / "intervals.csv").open()))
    cards = json.loads((project / "reports" / "protocols.json").read_text())["cards"]
    assert rows and all(r["metric"] in cards[r["world"]] and r["regime"] in cards[r["world"]][r["metric"]]
                        for r in rows)
    fd = cards["blobs"]["fd"]["open_loop"]
    assert "NOT comparable" in fd["comparability"] and "B = " in fd["interval"] and "strata" in fd["views and strata"]
    assert {r["method"] for r in rows} >= {"percentile", "basic"}
    # Every bias-corrected FD row carries its two-scale check; a row that fails it has no interval.
    corrected = [r for r in rows if r["metric"].endswith("_bias_corrected")]
    assert corrected and all(r["bias_check"] in {"passed", "failed", "unchecked"} for r in corrected)
    assert all(r["bias_check"] == "" for r in rows if not r["metric"].endswith("_bias_corrected"))
    assert all(r["low"] == r["high"] == "" for r in corrected if r["bias_check"] == "failed")
    assert "halves of the episodes" in cards["blobs"]["fd_bias_corrected"]["open_loop"]["bias check"]
    # ... and its permutation test of 0, which puts 0 in its interval or takes it out; the shuffled control is built
    # from another episode's state (no trajectory to exchange), so it has no test.
    assert "sign-flip" in cards["blobs"]["fd_bias_corrected"]["open_loop"]["test of 0"]
    tested = [r for r in corrected if r["p_value"] != ""]
    assert {r["source"] for r in corrected if r["p_value"] == ""} == {"shuffled"}
    assert all(0 < float(r["p_value"]) <= 1 for r in tested)
    for r in tested:
        if r["low"] != "":
            low, high, rejected = float(r["low"]), float(r["high"]), float(r["p_value"]) <= 0.05
            assert (low > 0) == rejected or (rejected and high <= 0), r       # kept where no interval agrees
            assert rejected or low <= 0 <= high, r
    assert {float(r["p_value"]) <= 0.05 for r in tested} == {True, False}    # both outcomes occur in the worlds
    assert all(r["p_value"] == "" for r in rows if not r["metric"].endswith("_bias_corrected"))
    assert "bias check" not in cards["blobs"]["fd"]["open_loop"]
    prov = json.loads((project / "reports" / "provenance.json").read_text())
    assert prov["git"]["commit"] and set(prov["dvc_lock"]) >= {"rollouts", "features", "statistics", "bootstrap"}

    def numbers_only(x):
        if isinstance(x, dict):
            return all(numbers_only(v) for v in x.values())
        return x is None or isinstance(x, (int, float))

    assert numbers_only(json.loads((project / "reports" / "metrics.json").read_text()))
    shown = json.loads(run([str(BIN / "dvc"), "plots", "show", "--json"], project).stdout)
    data = shown["data"]
    names = " ".join(data)
    assert "reports/plots/curves" in names and "reports/plots/kcurves" in names, names[:500]
    # The confidence-band template (.dvc/plots/confidence.json): an area from low to high under the line.
    spec = json.dumps(next(v for k, v in data.items() if "kcurves" in k)[0]["content"])
    assert '"y2": {"field": "high"}' in spec and '"type": "area"' in spec
    assert run([str(BIN / "dvc"), "metrics", "show", "--json"], project).returncode == 0


def _require_browser(browser):
    why = browser.available()
    if why and os.environ.get("CI"):
        pytest.fail(f"CI must run the browser test: {why}")
    if why:
        pytest.skip(why)


def test_scorecard_html_renders_offline_in_chromium(project, tmp_path):
    """The page opens from a file URL with networking off: no console error, no request, every figure and table."""
    import re

    import browser

    _require_browser(browser)
    html = project / "reports" / "scorecard.html"
    artifacts = Path(os.environ.get("WMEVAL_TEST_ARTIFACTS", Path(__file__).resolve().parents[1] / "build" / "test-artifacts"))
    out = browser.inspect(html, artifacts)
    assert out["console_errors"] == [] and out["non_local_requests"] == [] and out["failed_loads"] == [], out
    assert out["svgs"] >= 10 and out["empty_svgs"] == 0, out
    assert out["tables"] >= 20 and out["empty_tables"] == 0 and out["broken_imgs"] == 0, out
    # The first screen answers "which model is best at what, and how sure".
    first = out["first_screen_text"]
    assert "At a glance" in first and "which model is best at what" in first and "separated" in first
    # ... and how far its intervals can be trusted: the coverage benchmark's table and the cells beyond chance.
    assert "Interval validation" in first and "power" in first and "by more than chance" in first
    # Every metric cell carries its interval (or says why there is no number).
    page = html.read_text()
    cells = re.findall(r'<td class="num[^"]*">(.*?)</td>', page)
    bare = [c for c in cells if 'class="iv"' not in c and c not in ("n/a", "undefined") and not c.startswith("∞")
            and not c.endswith("(no interval: the bias correction fails its check ‡)")]
    assert cells and not bare, bare[:5]
    # Every rank shown lies in its own rank interval (a model left out of a column is left out of its ranks).
    ranks = [tuple(map(int, m)) for m in re.findall(r'>(\d+) <span class="iv">\[(\d+)–(\d+)\]</span>', page)]
    assert ranks and all(lo <= rk <= hi for rk, lo, hi in ranks), [r for r in ranks if not r[1] <= r[0] <= r[2]]
    assert ("not ranked: its bias correction fails" in page) == ("is not ranked in that column" in page)
    assert (artifacts / "scorecard_first_screen.png").exists()


def _commit(project, message):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    run([*git, "add", "-A"], project)
    run([*git, "commit", "-qm", message, "--allow-empty"], project)


def _blob_frames_and_dim(project):
    t = pq.read_table(project / "data/rollouts/blobs/ground_truth.parquet", columns=["frame"])
    f = pq.read_table(project / "data/features/pixel/blobs/ground_truth.parquet", columns=["embedding"])
    return list(t.schema.field("frame").type.shape), f.schema.field("embedding").type.shape[0]


def test_a_changed_resolution_param_changes_the_outputs(project):
    """DVC's run cache leaves keys named size/nfiles out of its hash; ours are named frame_size and resolution, so a
    changed value reruns the stages (dvc repro and dvc exp run -S), and a value seen before is restored correctly."""
    wmeval = str(BIN / "wmeval")
    _commit(project, "before sizes")
    run([wmeval, "compose", "worlds.blobs.params.frame_size=32", "encoder.params.resolution=4"], project)
    r = run([str(BIN / "dvc"), "repro"], project)
    assert "Running stage 'features'" in r.stdout, r.stdout[-2000:]
    assert _blob_frames_and_dim(project) == ([32, 32, 1], 16)
    _commit(project, "sizes 32/4")
    # dvc exp run composes conf/ with its -S overrides only (the compose overrides above are not in conf/). Each
    # runs the pipeline up to the features stage (the outputs checked).
    run([str(BIN / "dvc"), "exp", "run", "features", "-S", "worlds.blobs.params.frame_size=24"], project)
    assert _blob_frames_and_dim(project) == ([24, 24, 1], 64)
    run([str(BIN / "dvc"), "exp", "run", "features", "-S", "encoder.params.resolution=2"], project)
    assert _blob_frames_and_dim(project) == ([48, 48, 1], 4)
    r = run([str(BIN / "dvc"), "exp", "run", "features", "-S", "worlds.blobs.params.frame_size=32",  # seen before:
             "-S", "encoder.params.resolution=4"], project)                              # the run cache restores it
    assert "Stage 'features' is cached - skipping run" in r.stdout, r.stdout[-2000:]
    assert _blob_frames_and_dim(project) == ([32, 32, 1], 16)
    # The later stages' outputs are the first repro's, at 32 / 4 too: the lineage is whole again.
    assert run([wmeval, "audit", "blobs/stochastic/kid"], project).returncode == 0


@pytest.mark.parametrize(("stage", "key", "value"), [
    ("features", "worlds.blobs.params.frame_size", 40),
    ("statistics", "encoder.params.resolution", 2),
    ("statistics", "protocol.horizon", 4),
    ("bootstrap", "scoring.prdc_k", 3),
])
def test_a_stage_refuses_inputs_made_with_other_params(project, stage, key, value):
    """The second line of defence: inputs a cache restored for another configuration stop the stage (exit 2, the
    key and both values named, nothing written), whichever cache lied."""
    import hashlib

    params = project / "params.yaml"
    before = params.read_text()
    raw = yaml.safe_load(before)
    node = raw
    for k in key.split(".")[:-1]:
        node = node[k]
    old, node[key.split(".")[-1]] = node[key.split(".")[-1]], value
    outs = {"features": "data/features", "statistics": "data/stats", "bootstrap": "data/bootstrap"}[stage]
    digest = {p: hashlib.md5(p.read_bytes()).hexdigest() for p in sorted((project / outs).rglob("*")) if p.is_file()}
    try:
        params.write_text(yaml.safe_dump(raw, sort_keys=False))
        r = run([sys.executable, f"stages/{stage}.py"], project, check=False)
    finally:
        params.write_text(before)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{key} = {old!r}" in r.stderr and f"{key} = {value!r}" in r.stderr, r.stderr[-2000:]
    assert "stale" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    after = {p: hashlib.md5(p.read_bytes()).hexdigest() for p in sorted((project / outs).rglob("*")) if p.is_file()}
    assert after == digest
