"""bench/pick_knobs.py: the perf notes' rule for flipping a knob, applied to sweep files (made up here, in the
sweep's own record format) against the attention expert's real source."""

import json
import sys
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import pick_knobs  # noqa: E402

EXPERT = ROOT / "src/d2kbench/tasks/attention/attn_decode_paged_gqa/expert.py"
# the expert's source with the merge knob at False, as these made-up sweeps' "as shipped"
SOURCE = EXPERT.read_text().replace("MERGE_SPLIT_HEAD_DIM = True", "MERGE_SPLIT_HEAD_DIM = False")
SHIPPED = {"SPLIT_RULE": "waves", "MERGE_SPLIT_HEAD_DIM": False}
LONG, BATCH = "qwen3_235b_a22b_b1_l128k", "llama3_70b_b16_l8k"


def decide(spec, source):
    """pick_knobs.pick on the sweep file `spec` names (its path, then the knobs it decides)."""
    return pick_knobs.pick(spec, json.loads(open(spec.partition(":")[0]).read()), source)


def record(workload, knobs, us, spread=0.01):
    label = "as shipped" if knobs == SHIPPED else ", ".join(f"{k}={v}" for k, v in knobs.items())
    return {"workload": workload, "seed": 7, "variant": label, "knobs": knobs, "us": us,
            "rounds_us": [us * (1 - spread / 2), us, us * (1 + spread / 2)], "floor_us": 1.0}


def sweep_file(tmp_path, name, times):
    """`times`: {(SPLIT_RULE, MERGE_SPLIT_HEAD_DIM): {workload: us}}; a None time is a wrong variant."""
    records = [{"workload": w, "seed": 7, "variant": "reference", "knobs": {}, "us": 900.0,
                "rounds_us": [900.0, 901.0], "floor_us": 1.0} for w in (LONG, BATCH)]
    for (rule, split_d), per_workload in times.items():
        knobs = {"SPLIT_RULE": rule, "MERGE_SPLIT_HEAD_DIM": split_d}
        for workload, us in per_workload.items():
            if us is None:
                records.append({"workload": workload, "seed": 7, "variant": record(workload, knobs, 1)["variant"],
                                "us": None, "wrong": "max abs error 3.2", "floor_us": 1.0})
            else:
                records.append(record(workload, knobs, us))
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"task": "attn_decode_paged_gqa", "records": records}))
    return str(path)


def test_a_candidate_that_gains_beyond_the_spread_and_loses_nowhere_is_taken(tmp_path):
    spec = sweep_file(tmp_path, "rule", {("waves", False): {LONG: 97.6, BATCH: 520.0},
                                         ("whole_waves", False): {LONG: 86.0, BATCH: 522.0}})
    source, changed, lines = decide(spec + ":SPLIT_RULE", SOURCE)
    assert changed == {"SPLIT_RULE": "whole_waves"}
    assert "SPLIT_RULE = 'whole_waves'" in source and "SPLIT_RULE = \"waves\"" not in source
    assert source.replace("SPLIT_RULE = 'whole_waves'", 'SPLIT_RULE = "waves"') == SOURCE
    assert any(f"gains on {LONG} (beyond the spread)" in line for line in lines)


@pytest.mark.parametrize("batch_us, why", [(540.0, f"loses on {BATCH} (beyond the spread)"),
                                           (None, "wrong or untimed: max abs error 3.2")])
def test_a_candidate_that_loses_elsewhere_or_is_wrong_is_not_taken(tmp_path, batch_us, why):
    spec = sweep_file(tmp_path, "rule", {("waves", False): {LONG: 97.6, BATCH: 520.0},
                                         ("whole_waves", False): {LONG: 80.0, BATCH: batch_us}})
    source, changed, lines = decide(spec + ":SPLIT_RULE", SOURCE)
    assert changed == {} and source == SOURCE
    assert any(why in line for line in lines) and any("the knobs stay" in line for line in lines)


def test_a_sweep_cut_off_before_its_last_workload_decides_nothing(tmp_path):
    """bench/sweep.py rewrites its file after each workload, `complete` false until the last: a winner on the
    workloads it finished may lose on the one it never timed."""
    times = {("waves", False): {LONG: 97.6}, ("whole_waves", False): {LONG: 86.0}}
    spec = sweep_file(tmp_path, "rule", times)
    assert decide(spec + ":SPLIT_RULE", SOURCE)[1] == {"SPLIT_RULE": "whole_waves"}  # the file as if whole
    sweep = json.loads(open(spec).read())
    open(spec, "w").write(json.dumps({**sweep, "complete": False}))
    source, changed, lines = decide(spec + ":SPLIT_RULE", SOURCE)
    assert changed == {} and source == SOURCE
    assert any("cut off after 2 run(s) of its workloads: nothing decided" in line for line in lines)


def test_a_gain_inside_the_rounds_spread_is_noise(tmp_path):
    spec = sweep_file(tmp_path, "rule", {("waves", False): {LONG: 97.6, BATCH: 520.0},
                                         ("whole_waves", False): {LONG: 97.4, BATCH: 519.0}})
    assert decide(spec + ":SPLIT_RULE", SOURCE)[1] == {}


def test_later_files_are_judged_against_the_earlier_decisions(tmp_path):
    """The second sweep decides only the merge knob: its baseline is the split rule the first file took, and a
    variant that gains only through the other rule is not a candidate."""
    first = sweep_file(tmp_path, "rule", {("waves", False): {LONG: 97.6, BATCH: 520.0},
                                          ("whole_waves", False): {LONG: 86.0, BATCH: 521.0}})
    second = sweep_file(tmp_path, "merge", {("waves", False): {LONG: 97.0}, ("waves", True): {LONG: 70.0},
                                            ("whole_waves", False): {LONG: 86.0},
                                            ("whole_waves", True): {LONG: 83.0}})
    source = SOURCE
    source, changed, _ = decide(first + ":SPLIT_RULE", source)
    source, changed, lines = decide(second + ":MERGE_SPLIT_HEAD_DIM", source)
    assert changed == {"MERGE_SPLIT_HEAD_DIM": True}
    assert "taken: SPLIT_RULE=whole_waves, MERGE_SPLIT_HEAD_DIM=True" in "\n".join(lines)
    assert "SPLIT_RULE=waves, MERGE_SPLIT_HEAD_DIM=True" not in "\n".join(lines)  # not a candidate there


def test_nothing_is_decided_without_a_baseline_at_the_experts_values(tmp_path):
    spec = sweep_file(tmp_path, "rule", {("whole_waves", False): {LONG: 97.6, BATCH: 520.0},
                                         ("whole_waves", True): {LONG: 80.0, BATCH: 520.0}})
    source, changed, lines = decide(spec, SOURCE)
    assert changed == {} and any("no timed variant holds" in line for line in lines)


def test_a_knob_the_file_did_not_sweep_is_refused(tmp_path):
    spec = sweep_file(tmp_path, "rule", {("waves", False): {LONG: 97.6, BATCH: 520.0}})
    with pytest.raises(ValueError, match="did not sweep MERGE_PDL"):
        decide(spec + ":MERGE_PDL", SOURCE)


def test_a_sweep_without_rounds_is_refused(tmp_path):
    """Sweeps before the balanced rounds (one batch a variant) have no spread to tell a gain from noise."""
    spec = sweep_file(tmp_path, "rule", {("waves", False): {LONG: 97.6, BATCH: 520.0}})
    sweep = json.loads(open(spec).read())
    for r in sweep["records"]:
        r.pop("rounds_us", None)
    open(spec, "w").write(json.dumps(sweep))
    with pytest.raises(ValueError, match="no spread to judge by"):
        decide(spec, SOURCE)


def test_apply_writes_the_decisions_into_the_experts_file(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "expert.py"
    copy.write_text(SOURCE)
    monkeypatch.setattr(pick_knobs, "find_task", lambda _id: SimpleNamespace(expert_path=copy))
    spec = sweep_file(tmp_path, "rule", {("waves", False): {LONG: 97.6, BATCH: 520.0},
                                         ("whole_waves", True): {LONG: 80.0, BATCH: 519.0}})
    monkeypatch.setattr(sys, "argv", ["pick_knobs.py", spec, "--apply", "--markdown", str(tmp_path / "k.md"),
                                      "--diff", str(tmp_path / "k.diff")])
    assert pick_knobs.main() == 0
    text = copy.read_text()
    assert "SPLIT_RULE = 'whole_waves'" in text and "MERGE_SPLIT_HEAD_DIM = True" in text
    out = capsys.readouterr().out
    assert "**attn_decode_paged_gqa**: SPLIT_RULE = 'whole_waves', MERGE_SPLIT_HEAD_DIM = True" in out
    assert (tmp_path / "k.md").read_text().startswith("# Knobs decided")
    diff = (tmp_path / "k.diff").read_text()
    assert "-SPLIT_RULE = \"waves\"\n+SPLIT_RULE = 'whole_waves'\n" in diff
    assert len([line for line in diff.splitlines() if line[:1] == "+" and line[:3] != "+++"]) == 2


QUANT = ROOT / "src/d2kbench/tasks/quantization/quant_per_token_group_fp8/expert.py"
QUANT_OFF = QUANT.read_text().replace("FLAT_TILES = True", "FLAT_TILES = False")
M8 = "dsv3_m8_k7168_row"


def paired_file(tmp_path, base_rounds, cand_rounds, seeds=(7, 8, 9)):
    """A sweep of FLAT_TILES on M=8: per seed the baseline's and the candidate's rounds, round i with round i."""
    records = []
    for seed in seeds:
        for knobs, rounds in (({"FLAT_TILES": False}, base_rounds), ({"FLAT_TILES": True}, cand_rounds)):
            label = "as shipped" if not knobs["FLAT_TILES"] else "FLAT_TILES=True"
            records.append({"workload": M8, "seed": seed, "variant": label, "knobs": knobs,
                            "us": sorted(rounds)[len(rounds) // 2], "rounds_us": rounds, "floor_us": 1.0})
    path = tmp_path / "paired.json"
    path.write_text(json.dumps({"task": "quant_per_token_group_fp8", "records": records}))
    return str(path)


def test_the_h100_sweep_of_the_flat_tiles_wins_round_by_round_though_inside_the_spread():
    """The sweep that decided FLAT_TILES (bench/results/2026-12-06-owed-27 call1): the spread rule alone kept the
    knobs; 26 of 30 rounds faster, median 3.5%, takes it."""
    spec = str(ROOT / "bench/results/2026-12-06-owed-27/call1/quant_flat_tiles.json")
    source, changed, lines = decide(spec, QUANT_OFF)
    assert changed == {"FLAT_TILES": True}, lines
    assert any(f"gains on {M8} (round by round: faster in 26 of 30)" in line for line in lines)


def test_round_by_round_noise_fewer_rounds_and_paired_losses_are_not_taken(tmp_path):
    import random

    rng = random.Random(5)
    base = [4.5 + rng.uniform(-0.3, 0.3) for _ in range(10)]
    noise = [b * rng.uniform(0.97, 1.03) for b in base]  # no real difference
    assert decide(paired_file(tmp_path, base, noise), QUANT_OFF)[1] == {}
    faster = [b * 0.96 for b in base]
    assert decide(paired_file(tmp_path, base, faster), QUANT_OFF)[1] == {"FLAT_TILES": True}
    assert decide(paired_file(tmp_path, base, faster, seeds=(7,)), QUANT_OFF)[1] == {}  # 10 rounds: too few
    assert decide(paired_file(tmp_path, base[:6], faster[:6], seeds=(7, 8, 9)), QUANT_OFF)[1] == {}  # 18 < 20
    slower = [b * 1.04 for b in base]
    lines = decide(paired_file(tmp_path, faster, slower), QUANT_OFF)[2]  # the baseline is the faster one
    assert any(f"loses on {M8} (round by round: slower in 30 of 30)" in line for line in lines)
