"""The static scan of candidate sources: named findings, forbidden ones fail the candidate."""

import json

import pytest

from d2kbench.evaluate.evaluator import EvalOptions, evaluate
from d2kbench.evaluate.report import format_result
from d2kbench.evaluate.static_scan import forbidden_summary, scan_source
from d2kbench.suite import load_suite
from tests.conftest import PLANTED


def codes(source: str) -> set[tuple[str, int, bool]]:
    return {(f.code, f.line, f.forbidden) for f in scan_source(source)}


@pytest.mark.parametrize("source,expected", [
    ("import ctypes", ("native_code", 1, True)),
    ("import subprocess as sp\nsp.run(['ls'])", ("subprocess", 2, True)),
    ("from os import system", ("subprocess", 1, True)),
    ("import os\nos.execv('/bin/sh', [])", ("subprocess", 2, True)),
    ("import os\nos.fork()", ("subprocess", 2, True)),
    ("import socket", ("network", 1, True)),
    ("from urllib.request import urlopen", ("network", 1, True)),
    ("import os\nos.kill(os.getppid(), 9)", ("process_control", 2, True)),
    ("import threading", ("concurrency", 1, True)),
    ("from concurrent.futures import ThreadPoolExecutor", ("concurrency", 1, True)),
    ("import torch\ns = torch.cuda.Stream()", ("side_stream", 2, True)),
    ("import torch\nwith torch.cuda.stream(None):\n    pass", ("side_stream", 2, True)),
    ("from torch import cuda\ncuda.set_stream(None)", ("side_stream", 2, True)),
    ("import importlib\nimportlib.import_module('x')", ("dynamic_code", 1, True)),
    ("eval('1')", ("dynamic_code", 1, True)),
    ("exec('x = 1')", ("dynamic_code", 1, True)),
    ("__import__('os')", ("dynamic_code", 1, True)),
    ("import sys\nf = sys._getframe()", ("introspection", 2, True)),
    ("def g(f):\n    return f.f_back", ("introspection", 2, True)),
    ("import gc\ngc.get_objects()", ("introspection", 1, True)),
    ("import torch\ntorch.cuda.Event.elapsed_time = lambda *a: 0.0", ("monkeypatch", 2, True)),
    ("import torch as T\nT.backends.cuda.matmul.allow_tf32 = True", ("monkeypatch", 2, True)),
    ("import triton.testing as tt\ntt.do_bench = None", ("monkeypatch", 2, True)),
    ("import torch\nsetattr(torch, 'mm', None)", ("monkeypatch", 2, True)),
    ("import torch\ndel torch.mm", ("monkeypatch", 2, True)),
    ("import sys\nsys.modules['triton'] = None", ("monkeypatch", 2, True)),
    ("import builtins\nbuiltins.open = None", ("introspection", 1, True)),
    ("import torch\nwith torch.profiler.record_function('d2k::triton_launch'):\n    pass", ("introspection", 2, True)),
    ("from torch.autograd import profiler", ("introspection", 1, True)),
    ("import os\nseed = os.environ.get('SEED')", ("env_read", 2, False)),
    ("import os\nseed = os.getenv('SEED')", ("env_read", 2, False)),
    ("data = open('/proc/1/environ').read()", ("file_access", 1, False)),
    ("from pathlib import Path\nPath('x').read_text()", ("file_access", 2, False)),
    ("import json", ("import_outside_allowlist", 1, False)),
    ("import os\nf = getattr(os, 'sys' + 'tem')", ("dynamic_attribute", 2, False)),
])
def test_rule_fires(source, expected):
    assert expected in codes(source)


def test_honest_kernel_idioms_are_not_flagged():
    source = (
        "import math\nimport os\nimport torch\nimport triton\nimport triton.language as tl\n"
        "INTERPRET = os.environ.get('TRITON_INTERPRET') == '1'\n"
        "@triton.autotune(configs=[triton.Config({'B': 64})], key=['n'])\n@triton.jit\n"
        "def k(x, n, B: tl.constexpr):\n    pass\n"
        "def run(x):\n    z = torch.empty_like(x)\n    z.cache = None\n    stream = torch.cuda.current_stream()\n"
        "    k[(math.ceil(x.numel() / 64),)](x, x.numel())\n    return z\n"
    )
    assert [f for f in scan_source(source) if f.forbidden] == []
    assert {f.code for f in scan_source(source)} == {"env_read"}


def test_dodges_the_scan_cannot_see_are_left_to_the_dynamic_checks():
    """String tricks get past any static rule: the sandbox is what stops them (see test_sandbox)."""
    source = "import os\nkill = getattr(os, 'ki' + 'll')\n"
    assert [f for f in scan_source(source) if f.forbidden] == []


def test_unparsable_source_has_no_findings():
    assert scan_source("def run(:\n") == []


def test_findings_carry_their_lines_and_the_summary_names_them():
    findings = scan_source("import torch\n\nimport ctypes\nimport json\n")
    assert [(f.code, f.line) for f in findings] == [("native_code", 3), ("import_outside_allowlist", 4)]
    summary = forbidden_summary(findings)
    assert "line 3" in summary and "native_code" in summary and "json" not in summary
    assert forbidden_summary([f for f in findings if not f.forbidden]) is None


@pytest.mark.parametrize("task", load_suite(), ids=lambda t: t.id)
def test_no_expert_has_a_forbidden_finding(task):
    assert [f for f in scan_source(task.expert_path.read_text()) if f.forbidden] == []


def test_forbidden_code_fails_an_otherwise_correct_candidate_and_is_reported(toy_task):
    result = evaluate(toy_task, PLANTED / "static_patches_torch.py",
                      EvalOptions(device="cpu", workloads=("n77_f16",)))
    assert (result.verdict, result.reason) == ("integrity", "forbidden_code"), result.detail
    assert all(w.correct for w in result.workloads)  # the dynamic checks found nothing: the scan decided
    assert "torch.backends.cuda.matmul.allow_tf32" in result.detail
    as_json = json.loads(json.dumps(result.to_json()))
    assert as_json["findings"] == [{"code": "monkeypatch", "line": 6, "forbidden": True,
                                    "message": "assigns `torch.backends.cuda.matmul.allow_tf32`"}]
    assert "line 6: monkeypatch (forbidden)" in format_result(result)


def test_suspicious_findings_do_not_change_the_verdict(toy_task, tmp_path):
    candidate = tmp_path / "solution.py"
    candidate.write_text("import json\nimport os\nDEBUG = os.environ.get('DEBUG')\n" + toy_task.expert_path.read_text())
    result = evaluate(toy_task, candidate, EvalOptions(device="cpu", workloads=("n77_f16",)))
    assert result.verdict == "pass", result.detail
    assert [(f.code, f.forbidden) for f in result.findings] == [("import_outside_allowlist", False),
                                                                 ("env_read", False)]
