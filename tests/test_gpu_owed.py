"""bench/gpu_owed.sh's step bookkeeping, run with a stand-in python3 that records its arguments (no GPU)."""

import os
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# A sweep owed, in place of bench/sweeps.sh's (none, once their decisions are committed): the bookkeeping's subject.
SWEEPS = """SWEEPS=(attn_waves)
run_sweeps() {
  once attn_waves 150 python3 bench/sweep.py attn_decode_paged_gqa --set WAVES=6,8,12 --rounds 6 \\
    --json "$R/attn_waves.json"
}
"""


def script_tree(tmp_path: Path) -> Path:
    """The script and its step helpers in a tree of their own, with one stand-in expert and one sweep: the script
    restores the experts it picks knobs for, so it never runs in this checkout (a test beside it would read a
    half-copied file)."""
    tree = tmp_path / "tree"
    if not tree.exists():
        (tree / "bench").mkdir(parents=True)
        for name in ("gpu_owed.sh", "steps.sh"):
            (tree / "bench" / name).write_text((REPO / "bench" / name).read_text())
        (tree / "bench" / "sweeps.sh").write_text(SWEEPS)
        expert = tree / "src" / "d2kbench" / "tasks" / "t" / "expert.py"
        expert.parent.mkdir(parents=True)
        expert.write_text("KNOB = 1\n")
    return tree


def owed(tmp_path: Path, only: str, call: int) -> dict[str, str]:
    """Run gpu_owed.sh once with ONLY; return its packed r/ folder's text files by name."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "python3"
    # echoes its command; a sweep's --json file is written, as the real sweep writes it
    fake.write_text('#!/bin/sh\necho "python3 $*"\n'
                    'prev=\nfor a; do [ "$prev" = --json ] && echo {} > "$a"; prev=$a; done\n')
    fake.chmod(0o755)
    out = tmp_path / f"out{call}"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", OUT=str(out), STATE=str(tmp_path / "state"),
               ONLY=only)
    subprocess.run(["bash", "bench/gpu_owed.sh", "60"], cwd=script_tree(tmp_path), env=env, check=True,
                   capture_output=True)
    with tarfile.open(out / "results.tgz") as tar:
        return {Path(m.name).name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


def test_only_runs_the_named_steps_and_a_finished_step_is_not_run_again(tmp_path):
    first = owed(tmp_path, "planted attn_waves", 1)
    steps = first["steps.txt"].splitlines()
    assert [line.split()[0] for line in steps] == ["attn_waves", "planted"]  # the file's order
    assert all(" rc=0 " in line for line in steps)
    assert "--set WAVES=6,8,12" in first["attn_waves.log"]
    assert "bench.log" not in first

    second = owed(tmp_path, "attn_waves worker_start", 2)
    assert second["steps.txt"].splitlines()[0] == "attn_waves done in an earlier call"
    assert second["steps.txt"].splitlines()[1].startswith("worker_start rc=0 ")
    assert "attn_waves.log" not in second


def test_quants_m8_is_timed_in_one_process_per_step(tmp_path):
    logs = owed(tmp_path, "quant_m8_process1 quant_m8_process2", 1)
    assert [line.split()[0] for line in logs["steps.txt"].splitlines()] == ["quant_m8_process1", "quant_m8_process2"]
    for i in (1, 2):
        command = logs[f"quant_m8_process{i}.log"]
        assert "--workloads dsv3_m8_k7168_row" in command and f"quant_m8_process{i}.json" in command


def test_a_finished_sweep_decides_its_knobs_in_this_call_and_the_next(tmp_path):
    """The sweeps' files are kept in the state folder; pick_knobs applies them before the bench, in the call that
    ran the sweeps and again in every later call (each gets a fresh copy of the committed tree)."""
    first = owed(tmp_path, "attn_waves", 1)
    state = tmp_path / "state"
    assert (state / "attn_waves.json").exists()
    assert first["knobs.log"].split() == [
        "python3", "bench/pick_knobs.py", f"{state}/attn_waves.json", "--apply", "--markdown",
        *first["knobs.log"].split()[-3:]]
    assert first["knobs.log"].split()[-2:-1] == ["--diff"]

    second = owed(tmp_path, "planted", 2)  # no sweep runs: the decisions still apply
    assert f"{state}/attn_waves.json" in second["knobs.log"]


def test_without_finished_sweeps_nothing_is_picked(tmp_path):
    logs = owed(tmp_path, "planted", 1)
    assert "knobs.log" not in logs


def test_each_pick_starts_from_the_committed_experts(tmp_path):
    """A call picks twice (before its sweeps, from earlier calls' files, and after them): the second pick must start
    from the committed experts again, or its knobs.md and knobs.diff would show only what the first left to do (the
    twenty-second session's call 2 reported "unchanged" over two knobs the first pick had set)."""
    tree = script_tree(tmp_path)
    expert = tree / "src" / "d2kbench" / "tasks" / "t" / "expert.py"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"  # a pick appends its decision to the expert, as --apply rewrites it
    fake.write_text(f'#!/bin/sh\n[ "$1" = bench/pick_knobs.py ] && echo "KNOB = 2  # picked" >> {expert}\nexit 0\n')
    fake.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    (state / "attn_waves.json").write_text("{}")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", OUT=str(tmp_path / "out"), STATE=str(state),
               ONLY="planted")
    subprocess.run(["bash", "bench/gpu_owed.sh", "60"], cwd=tree, env=env, check=True, capture_output=True)
    assert expert.read_text() == "KNOB = 1\nKNOB = 2  # picked\n"


def test_the_committed_sweeps_file_declares_its_sweeps_and_their_steps():
    """bench/sweeps.sh as committed (none owed, or some): it defines the SWEEPS list and run_sweeps, and every sweep
    it lists writes the file that pick_knobs reads."""
    done = subprocess.run(["bash", "-c", 'set -u; source bench/sweeps.sh; echo "${SWEEPS[@]+${SWEEPS[@]}}"; '
                           "declare -f run_sweeps"], cwd=REPO, check=True, capture_output=True, text=True)
    assert not done.stderr
    names, body = done.stdout.split("\n", 1)
    assert body.startswith("run_sweeps")
    for spec in names.split():
        assert f'"$R/{spec.split(":")[0]}.json"' in body


def test_env_names_the_sources_hash_that_steps_sh_prints_for_the_same_tree(tmp_path):
    """The device's .git may lag the tree it copies, so env.txt carries a hash of the sources themselves; the same
    command in a checkout says whether that checkout is what ran. A changed source changes it."""
    env_txt = owed(tmp_path, "planted", 1)["env.txt"]
    tree = script_tree(tmp_path)

    def sources() -> str:
        return subprocess.run(["bash", "bench/steps.sh", "--sources"], cwd=tree, capture_output=True, text=True,
                              check=True).stdout.strip()

    before = sources()
    assert len(before) == 16 and f"sources {before}" in env_txt
    (tree / "src" / "d2kbench" / "tasks" / "t" / "expert.py").write_text("KNOB = 2\n")
    assert sources() != before
