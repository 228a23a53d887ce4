"""The human study kit: export (design, randomization, blinded offline pages with the keyed frames), the
answers' import and its refusals, and the analysis's counts. The browser run (a page answered in headless
Chromium, then the human stage and the scorecard) is in tests/test_pipeline.py."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from wmeval.core.errors import ConfigError, WmevalError
from wmeval.human.analysis import analyse_study
from wmeval.human.answers import read_answers
from wmeval.human.study import ANSWERS_FORMAT, export_study, load_design, study_digest
from wmeval.tables.io import rollout_table, with_metadata, write_table

EPISODES, PLANS, T, HW = 6, ("left", "right"), 4, 8
MODELS = ("alpha-model", "beta-model")


def _frames(code: int, e: int, p: int) -> np.ndarray:
    """(T+1, HW, HW, 1) frames whose pixels encode the source, episode, plan and step (distinct everywhere)."""
    out = np.zeros((T + 1, HW, HW, 1))
    for t in range(T + 1):
        out[t, :, :, 0] = ((code * 37 + e * 11 + p * 5 + t * 3) % 250 + 3) / 255.0
        out[t, 0, 0, 0] = code / 255.0
    return out


def make_rollouts(root: Path) -> Path:
    folder = root / "data" / "rollouts" / "w"
    folder.mkdir(parents=True)
    meta = {"world": {"actions": {"left": -1.0, "right": 1.0}}}
    eps = np.arange(EPISODES)
    for code, source in enumerate(("ground_truth", *MODELS)):
        tables = []
        for p, plan in enumerate(PLANS):
            frames = np.stack([_frames(code, e, p) for e in eps])[:, None]           # (N, 1, T+1, H, W, C)
            acts = np.full((EPISODES, T + 1, 1), -1.0 if plan == "left" else 1.0)
            if source == "ground_truth":
                tables.append(rollout_table(world="w", source=source, regime="realized", plan=plan, condition=plan,
                                            episodes=eps, t=np.arange(T + 1), frames=frames, states=None,
                                            actions=acts, frame_dtype="uint8"))
            else:
                tables.append(rollout_table(world="w", source=source, regime="open_loop", plan=plan, condition=plan,
                                            episodes=eps, t=np.arange(1, T + 1), frames=frames[:, :, 1:],
                                            states=None, actions=acts[:, 1:], frame_dtype="uint8"))
        import pyarrow as pa

        write_table(with_metadata(pa.concat_tables(tables), meta), folder / f"{source}.parquet")
    return folder


DESIGN = {"name": "pilot", "world": "w", "candidates": [*MODELS, "realized"], "population": "test raters",
          "consent": "Consent text: answers and response times only.", "episodes": 4, "raters": 3,
          "trials_per_rater": 8, "repeats": 2, "attention_checks": 2, "playback": {"fps": 40, "pause_ms": 0}}


def write_design(root: Path, **over) -> Path:
    path = root / "studies" / "pilot" / "design.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({**DESIGN, **over}))
    return path


@pytest.fixture()
def study(tmp_path) -> Path:
    make_rollouts(tmp_path)
    return export_study(write_design(tmp_path), root=tmp_path)


def page_data(page: Path) -> dict:
    text = page.read_text()
    blob = re.search(r'<script type="application/json" id="study-data">(.*?)</script>', text, re.S).group(1)
    return json.loads(blob.replace("<\\/", "</"))


def decode(uri: str) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))


def test_export_reproduces_from_its_seed_and_a_new_seed_draws_anew(tmp_path, study):
    first = {p.name: p.read_bytes() for p in [study / "study.json", *sorted((study / "pages").glob("*.html"))]}
    export_study(study / "design.yaml", root=tmp_path, force=True)
    again = {p.name: p.read_bytes() for p in [study / "study.json", *sorted((study / "pages").glob("*.html"))]}
    assert first == again
    export_study(write_design(tmp_path, seed=1), root=tmp_path, force=True)
    other = json.loads((study / "study.json").read_text())
    assert other["raters"] != json.loads(first["study.json"])["raters"]
    with pytest.raises(WmevalError, match="exists"):
        export_study(study / "design.yaml", root=tmp_path)


def test_each_rater_gets_the_declared_trials_repeats_and_checks(study):
    key = json.loads((study / "study.json").read_text())
    assert sorted(key["raters"]) == ["r01", "r02", "r03"] and len(key["episodes"]) == 4
    for rater, trials in key["raters"].items():
        assert len(trials) == 8 + 2 + 2 and len({t["trial"] for t in trials}) == 12
        compared = [t for t in trials if not t["attention_check"] and t["repeat_of"] is None]
        assert len(compared) == 8
        assert len({(t["episode"], t["plan"], t["question"], frozenset((t["left"], t["right"]))) for t in compared}) == 8
        by_id = {t["trial"]: t for t in trials}
        repeats = [t for t in trials if t["repeat_of"] is not None]
        assert len(repeats) == 2
        for r in repeats:
            o = by_id[r["repeat_of"]]
            assert (r["episode"], r["plan"], r["question"]) == (o["episode"], o["plan"], o["question"])
            assert (r["left"], r["right"]) == (o["right"], o["left"])              # the sides swapped
        checks = [t for t in trials if t["attention_check"]]
        assert len(checks) == 2 and all({c["left"], c["right"]} == {"realized", "corrupted"}
                                        and c["expected"] == "realized" for c in checks)
        # Checks show episodes outside the study's: their realized clip is never one a compared trial shows.
        assert all(t["episode"] in key["episodes"] for t in trials if not t["attention_check"])
        assert all(c["episode"] not in key["episodes"] and 0 <= c["episode"] < EPISODES for c in checks)
    # Sides are drawn: over all raters both orders of some pair occur.
    sides = [(t["left"], t["right"]) for ts in key["raters"].values() for t in ts if not t["attention_check"]]
    assert any((b, a) in sides for a, b in sides)


def test_pages_are_blind_offline_and_show_the_keyed_frames(tmp_path, study):
    key = json.loads((study / "study.json").read_text())
    codes = {"realized": 0, MODELS[0]: 1, MODELS[1]: 2}
    for rater, trials in key["raters"].items():
        page = study / "pages" / f"{rater}.html"
        text = page.read_text()
        for name in MODELS:                                 # method identity is hidden
            assert name not in text
        assert "http://" not in text and "https://" not in text and "default-src 'none'" in text
        data = page_data(page)
        # Image ids mean nothing: no id is used by two trials (content-derived ids would mark the same clip).
        per_trial = [{i for side in ("left", "right") for i in t[side]} | {t["context"]} for t in data["trials"]]
        assert sum(map(len, per_trial)) == len(set().union(*per_trial)) == len(data["images"])
        assert data["rater"] == rater and data["study_digest"] == study_digest(study / "study.json")
        assert "Consent text" in data["consent"]
        assert [t["id"] for t in data["trials"]] == [t["trial"] for t in trials]
        for shown, t in zip(data["trials"], trials):
            p = PLANS.index(t["plan"])
            assert len(shown["left"]) == len(shown["right"]) == T           # matched playback: equal lengths
            ctx = decode(data["images"][shown["context"]])
            assert np.array_equal(ctx, np.rint(_frames(0, t["episode"], p)[0, ..., 0] * 255).astype(np.uint8))
            for side in ("left", "right"):
                cand = t[side]
                got = np.stack([decode(data["images"][i]) for i in shown[side]])
                real = np.rint(_frames(codes.get(cand, 0), t["episode"], p)[1:, ..., 0] * 255).astype(np.uint8)
                if cand == "corrupted":
                    assert np.array_equal(got, 255 - real)                  # invert: the realized future's negative
                else:
                    assert np.array_equal(got, real), (rater, t["trial"], side, cand)
            assert ("actions" in shown) == (t["question"] == "consistency")
            if t["question"] == "consistency":
                assert shown["actions"] == [t["plan"]] * T                  # the action labels, step by step


def test_a_bad_design_is_refused_naming_the_key(tmp_path):
    make_rollouts(tmp_path)
    with pytest.raises(ConfigError, match="unknown key.*'episode_count'"):
        load_design(write_design(tmp_path, episode_count=3))
    with pytest.raises(ConfigError, match="questions"):
        load_design(write_design(tmp_path, questions=["beauty"]))
    with pytest.raises(ConfigError, match="repeats"):
        load_design(write_design(tmp_path, repeats=9))
    with pytest.raises(ConfigError, match="raters = .*they name files"):
        load_design(write_design(tmp_path, raters=["../../escaped"]))
    with pytest.raises(ConfigError, match="episodes = '3': expected a count or a list"):
        load_design(write_design(tmp_path, episodes="3"))
    with pytest.raises(ConfigError, match="seed = 1.5: expected an integer"):
        load_design(write_design(tmp_path, seed=1.5))
    with pytest.raises(ConfigError, match="min_loops >= 1"):
        load_design(write_design(tmp_path, playback={"min_loops": 0}))
    with pytest.raises(WmevalError, match="gamma-model.parquet: no rollouts of candidate 'gamma-model'.*alpha-model"):
        export_study(write_design(tmp_path, candidates=["gamma-model", "realized"]), root=tmp_path)
    with pytest.raises(ConfigError, match="episodes = 9: the rollouts have 6"):
        export_study(write_design(tmp_path, episodes=9), root=tmp_path)
    with pytest.raises(ConfigError, match="plans: 'up'"):
        export_study(write_design(tmp_path, plans=["up"]), root=tmp_path)
    assert not (tmp_path / "studies" / "pilot" / "study.json").exists()      # nothing half-written


def answer(study: Path, rater: str, choose, **over) -> Path:
    key = json.loads((study / "study.json").read_text())
    answers = [{"trial": t["trial"], "choice": choose(t), "response_ms": 1500, "answered_at": "now"}
               for t in key["raters"][rater]]
    doc = {"format": ANSWERS_FORMAT, "study": "pilot", "study_digest": study_digest(study / "study.json"),
           "rater": rater, "answers": answers, **over}
    path = study / "answers" / f"answers-{rater}.json"
    path.write_text(json.dumps(doc))
    return path


def prefer(order):
    def choose(t):
        if t["attention_check"]:
            return "left" if t["left"] == t["expected"] else "right"
        return "left" if order.index(t["left"]) < order.index(t["right"]) else "right"
    return choose


def test_answers_are_checked_against_the_key(study):
    order = ["realized", MODELS[0], MODELS[1]]
    answer(study, "r01", prefer(order))
    judgments, report = read_answers(study)
    assert len(judgments) == 12 and report["raters_without_answers"] == ["r02", "r03"]
    assert report["unanswered_trials"] == 0
    row = judgments[~judgments.attention_check].iloc[0]
    assert row["choice"] == min(row["left"], row["right"], key=order.index)
    path = answer(study, "r02", prefer(order), study_digest="0" * 64)
    with pytest.raises(WmevalError, match="answers-r02.json: answers to another export"):
        read_answers(study)
    doc = json.loads(path.read_text())
    doc["study_digest"] = study_digest(study / "study.json")
    doc["answers"][3]["trial"] = "r01-t001"
    path.write_text(json.dumps(doc))
    with pytest.raises(WmevalError, match=r"answers\[3\]: trial 'r01-t001' is not one of rater 'r02'"):
        read_answers(study)
    doc["answers"][3] = dict(doc["answers"][2])
    path.write_text(json.dumps(doc))
    with pytest.raises(WmevalError, match="answered twice"):
        read_answers(study)
    doc["answers"] = doc["answers"][:3] + [dict(doc["answers"][4], choice="middle")]
    path.write_text(json.dumps(doc))
    with pytest.raises(WmevalError, match=r"answers\[3\]: choice 'middle'"):
        read_answers(study)
    for bad, message in ((dict(doc, answers={}), "'answers' is dict; expected the list"),
                         (dict(doc, answers=["r02-t001"]), r"answers\[0\] is a str"),
                         (dict(doc, answers=[dict(doc["answers"][0], response_ms=True)]), "response_ms True"),
                         (dict(doc, answers=[dict(doc["answers"][0], response_ms=float("nan"))]), "response_ms nan"),
                         (dict(doc, rater=["r02"]), r"rater \['r02'\] is not one of")):
        path.write_text(json.dumps(bad))
        with pytest.raises(WmevalError, match=message):
            read_answers(study)
    doc["answers"] = doc["answers"][:3]                        # a rater who stopped early: counted, not dropped
    path.write_text(json.dumps(doc))
    _, report = read_answers(study)
    assert report["unanswered_trials"] == 9 and report["per_rater"]["r02"] == {
        "trials": 12, "answered": 3, "answers_file": "answers-r02.json"}


def test_analysis_excludes_by_the_declared_rules_and_recovers_the_order(study):
    order = ["realized", MODELS[0], MODELS[1]]
    answer(study, "r01", prefer(order))
    answer(study, "r02", prefer(order))
    def careless(t):                                            # fails the attention checks
        return ("right" if t["left"] == t["expected"] else "left") if t["attention_check"] else "left"

    answer(study, "r03", careless)
    summary, judgments = analyse_study(study, n_resamples=200)
    ex = summary["exclusions"]
    assert ex["raters_excluded"] == ["r03"] and ex["attention_check_trials"] == 6
    assert ex["judgments_of_excluded_raters"] == 10 and ex["kept"] == 20 and ex["total"] == 36
    assert int(judgments["analysed"].sum()) == 20
    for q, entry in summary["per_question"].items():
        ranked = [c["candidate"] for c in entry["candidates"]]
        seen = [c for c in ranked if next(r for r in entry["candidates"] if r["candidate"] == c)["comparisons"]]
        assert seen == [c for c in order if c in seen], (q, entry["candidates"])
        for c in entry["candidates"]:
            if c["comparisons"]:
                assert c["win_rate_low"] <= c["win_rate"] <= c["win_rate_high"]
        assert entry["intra_rater"]["agreement"] in (1.0, None)              # both kept raters are consistent


def _scores(better: str, worse: str) -> "pd.DataFrame":
    """A statistics-stage episodes table where ``better`` has the lower pixel MSE on every episode and plan."""
    import pandas as pd

    rows = [{"world": "w", "metric": "pixel_mse", "regime": "open_loop", "condition": plan, "episode": e,
             "source": src, "value": value}
            for e in range(EPISODES) for plan in PLANS for src, value in ((better, 0.01), (worse, 0.05))]
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_evaluators_are_validated_only_on_the_frames_the_study_showed(tmp_path, study):
    """A metric that orders the models as the raters do is "validated on <study>" (realism) while this run's rollouts hold
    the frames the pages showed, even when the files are rewritten with the same frames; once a candidate's shown
    frames change, the judgments are of other frames than the scores: every evaluator is "not validated", and the
    changed part is named."""
    import pyarrow.parquet as pq

    order = ["realized", MODELS[0], MODELS[1]]
    for r in ("r01", "r02", "r03"):
        answer(study, r, prefer(order))
    rollouts = tmp_path / "data" / "rollouts"
    kw = dict(episodes=_scores(MODELS[0], MODELS[1]), evaluators=["pixel_mse"], n_resamples=100, rollouts=rollouts)
    summary, _ = analyse_study(study, **kw)
    realism = next(e for e in summary["evaluators"] if e["question"] == "realism")   # 6 judgments of the two
    assert summary["frames_changed"] == [] and realism["verdict"] == "validated on pilot"
    # The metric ordering the models against the raters is not validated (the rule is not "always yes").
    flipped, _ = analyse_study(study, **dict(kw, episodes=_scores(MODELS[1], MODELS[0])))
    assert next(e for e in flipped["evaluators"] if e["question"] == "realism")["verdict"] == "not validated"

    path = rollouts / "w" / f"{MODELS[1]}.parquet"
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"note": b"rewritten"}), path)
    summary, _ = analyse_study(study, **kw)                      # new bytes, same frames: still validated
    assert summary["frames_changed"] == [] and summary["evaluators"] == [realism, *summary["evaluators"][1:]]

    import pyarrow as pa

    from wmeval.tables.io import tensor_numpy

    frames = tensor_numpy(table, "frame").copy()
    frames[0, 0, 0, 0] = 255 - frames[0, 0, 0, 0]               # one pixel of one shown frame
    changed = pa.FixedShapeTensorArray.from_numpy_ndarray(frames)
    pq.write_table(table.set_column(table.schema.get_field_index("frame"), "frame", changed), path)
    summary, _ = analyse_study(study, **kw)
    assert summary["frames_changed"] == [f"candidate {MODELS[1]}: frames differ in {rollouts / 'w'}"]
    assert {e["verdict"] for e in summary["evaluators"]} == {"not validated"}
    assert "other frames than this run's rollouts" in summary["evaluators"][0]["note"]
    assert summary["per_question"]                                # the judgments themselves are still reported
    pq.write_table(table, path)                                   # the shown frames back: validated again
    assert analyse_study(study, **kw)[0]["frames_changed"] == []
    # The consistency trials print the actions by name: renamed actions are a change of what was shown.
    from wmeval.tables.io import read_metadata

    gt = rollouts / "w" / "ground_truth.parquet"
    truth = pq.read_table(gt)
    meta = read_metadata(gt)
    meta["world"]["actions"] = {"west": -1.0, "east": 1.0}
    write_table(with_metadata(truth.replace_schema_metadata({}), meta), gt)
    summary, _ = analyse_study(study, **kw)
    assert summary["frames_changed"] == [f"actions: frames differ in {rollouts / 'w'}"]
    path.unlink()
    summary, _ = analyse_study(study, **kw)
    assert "no rollouts of candidate 'beta-model'" in summary["frames_changed"][0]
    assert {e["verdict"] for e in summary["evaluators"]} == {"not validated"}
