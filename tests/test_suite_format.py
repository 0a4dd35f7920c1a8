"""The task loader: real tasks load; malformed task folders get an error naming file and field."""

import pytest

from d2kbench.suite import TaskFormatError, expr, load_suite, load_task, roofline
from tests.conftest import FIXTURES


def edit(path, old, new):
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_suite_loads_with_the_four_foundation_tasks():
    ids = {t.id for t in load_suite()}
    assert {"attn_decode_paged_gqa", "moe_align_block_size", "quant_per_token_group_fp8",
            "muon_newton_schulz"} <= ids
    for task in load_suite():
        assert task.split("scored") and task.split("hidden") and task.split("cpu")
        assert all(w.dtype in ("float16", "float32") for w in task.split("cpu"))


@pytest.mark.parametrize(
    "file,old,new,field,expected",
    [
        ("task.toml", 'bound = "memory"', 'bound = "fast"', "bound", "one of memory"),
        ("task.toml", 'split = "cpu"', 'split = "cpuu"', "workloads[0].split", "one of scored"),
        ("task.toml", 'dtype = "float32"\nparams = { N = 200 }', 'dtype = "bfloat16"\nparams = { N = 200 }',
         "workloads[0].dtype", "float16 or float32"),
        ("task.toml", 'compare = "allclose"', 'compare = "roughly"', "outputs[0].compare", "one of allclose"),
        ("task.toml", 'bytes = "3 * N * 4"', 'bytes = "__import__(1)"', "roofline.bytes", "arithmetic"),
        ("task.toml", 'id = "toy_axpy"', 'id = "other"', "id", "the folder name"),
        ("task.toml", 'name = "n77_f16"', 'name = "n200"', "workloads[1].name", "unique"),
        ("task.toml", 'title = "Toy axpy (evaluator tests only)"\n', "", "title", "missing"),
        ("task.toml", 'name = "x"\ndtype = "workload"', 'name = "x"\ndtype = "float7"', "inputs[0].dtype", "one of"),
        ("task.toml", "[tolerance]", "[tolerance\n", "<syntax>", "valid TOML"),
        ("rubric.toml", 'layer = "L3"\nweight = 1\ntitle = "No host sync"', 'layer = "L2"\nweight = 1\ntitle = "x"',
         "property", "at least 3 properties with layer = 'L3'"),
        ("rubric.toml", 'weight = 1\ntitle = "One pass"', 'weight = "heavy"\ntitle = "One pass"',
         "property[0].weight", "a number"),
        ("guidance.md", "## L2", "## L9", "## L9", "## L1, ## L2, ## L3"),
        # a cpu workload: the profile tool compiles on a scored one
        ("task.toml", 'signature = "run(x, y, alpha) -> z"',
         'signature = "run(x, y, alpha) -> z"\nprofile_workload = "n77_f16"', "profile_workload", "one of n1m"),
    ],
)
def test_malformed_task_names_file_and_field(toy_copy, file, old, new, field, expected):
    edit(toy_copy / file, old, new)
    with pytest.raises(TaskFormatError) as info:
        load_task(toy_copy)
    err = info.value
    assert err.file.endswith(file)
    assert err.field == field
    assert expected in str(err)


def test_profile_workload_defaults_to_the_first_scored_one(toy_copy):
    """Without `profile_workload` the first scored workload in file order is the one; with it, the named one."""
    # a second scored workload listed before n1m (and after the cpu ones, so "first" is not "first of all")
    edit(toy_copy / "task.toml", '[[workloads]]\nname = "n1m"',
         '[[workloads]]\nname = "n4k"\nsplit = "scored"\ndtype = "bfloat16"\nparams = { N = 4096 }\n\n'
         '[[workloads]]\nname = "n1m"')
    assert "profile_workload" not in (toy_copy / "task.toml").read_text()
    task = load_task(toy_copy)
    assert [w.name for w in task.split("scored")] == ["n4k", "n1m"]
    assert task.profile_workload == "n4k"
    # an explicit choice of the second scored workload is honoured (an unscored one is refused:
    # test_malformed_task_names_file_and_field's profile_workload case)
    edit(toy_copy / "task.toml", 'signature = "run(x, y, alpha) -> z"',
         'signature = "run(x, y, alpha) -> z"\nprofile_workload = "n1m"')
    assert load_task(toy_copy).profile_workload == "n1m"


def test_missing_file_is_named(toy_copy):
    (toy_copy / "expert.py").unlink()
    with pytest.raises(TaskFormatError, match="expert.py"):
        load_task(toy_copy)


def test_written_input_needs_an_output_entry(toy_copy):
    edit(toy_copy / "task.toml", 'name = "y"\ndtype = "workload"', 'name = "y"\nwritten = true\ndtype = "workload"')
    with pytest.raises(TaskFormatError, match="inputs\\[1\\].written"):
        load_task(toy_copy)


def test_roofline_and_guidance_configs():
    task = load_task(FIXTURES / "toy_axpy")
    assert roofline(task, task.workload("n200")) == (2400.0, 400.0)
    assert task.guidance_for("none") == ""
    assert task.guidance_for("L1+L2").startswith("## L1") and "## L3" not in task.guidance_for("L1+L2")
    with pytest.raises(ValueError):
        task.guidance_for("L2")


def test_expressions_are_arithmetic_only():
    assert expr.evaluate("ceil(N / 64) * 2 + max(a, 3)", {"N": 100, "a": 1}) == 7
    for bad in ("open('x')", "x.y", "[1]", "lambda: 1", "'s'"):
        with pytest.raises(expr.ExprError):
            expr.parse(bad)


def test_workloads_inherit_or_override_latency_bound(toy_copy):
    """A workload is latency-bound when the task is, unless it says otherwise itself."""
    assert [w.name for w in load_task(toy_copy).workloads if w.latency_bound] == ["n1m"]  # its own flag
    edit(toy_copy / "task.toml", 'name = "n200"', 'name = "n200"\nlatency_bound = true')
    flags = {w.name: w.latency_bound for w in load_task(toy_copy).workloads}
    assert flags["n200"] and not flags["n77_f16"] and not flags["n1001"]
    edit(toy_copy / "task.toml", 'name = "n200"\nlatency_bound = true', 'name = "n200"\nlatency_bound = false')
    text = (toy_copy / "task.toml").read_text()
    (toy_copy / "task.toml").write_text("latency_bound = true\n" + text)
    flags = {w.name: w.latency_bound for w in load_task(toy_copy).workloads}
    assert not flags["n200"] and flags["n77_f16"] and flags["n1m"]


def test_workload_latency_bound_must_be_a_boolean(toy_copy):
    edit(toy_copy / "task.toml", 'name = "n200"', 'name = "n200"\nlatency_bound = "yes"')
    with pytest.raises(TaskFormatError) as err:
        load_task(toy_copy)
    assert "latency_bound" in str(err.value) and "task.toml" in str(err.value)
