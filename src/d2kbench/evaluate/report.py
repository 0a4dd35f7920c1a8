"""Human-readable rendering of an `EvalResult`."""

from __future__ import annotations

from d2kbench.evaluate.result import EvalResult


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f} us" if value < 1 else f"{value:.3f} ms"


def format_result(r: EvalResult) -> str:
    lines = [f"{r.task}: {r.verdict.upper()}" + (f" ({r.reason})" if r.reason else "")]
    if r.detail:
        lines.append(f"  {r.detail}")
    where = "GPU " + r.environment.get("gpu", r.device) if r.mode == "gpu" else "CPU, Triton interpreter (no timings)"
    phases = ", ".join(f"{k} {v:.1f}" for k, v in r.phases_s.items())
    spent = f"{r.elapsed_s:.1f} s" + (f" ({phases})" if phases else "")
    lines.append(f"  on {where}; {len(r.workloads)} workload(s); {spent}")
    for w in r.workloads:
        status = {True: "ok", False: "FAIL", None: "not run"}[w.correct]
        line = f"  [{w.split}] {w.name}: {status}"
        if w.timings:
            t = {k: v.graph_median_ms or v.median_ms for k, v in w.timings.items()}
            line += (f"  candidate {_ms(t.get('candidate'))}, reference {_ms(t.get('reference'))}, "
                     f"expert {_ms(t.get('expert'))}; speedup {w.speedup:.2f}x, "
                     f"fraction of expert {w.fraction_of_expert:.2f}, SOL {w.sol_fraction:.0%}")
        if w.error:
            line += "; error vs oracle " + ", ".join(
                f"{k} {v:.2e}" + (f" (reference {w.reference_error[k]:.2e})" if k in w.reference_error else "")
                for k, v in w.error.items())
        lines.append(line)
        lines += [f"      {e}" for e in w.errors[:3]]
    if r.findings:
        lines.append(f"  static scan: {len(r.findings)} finding(s)")
        lines += [f"    line {f.line}: {f.code}{' (forbidden)' if f.forbidden else ''}: {f.message}"
                  for f in r.findings[:10]]
    if r.verdict not in ("pass",) and r.log_tail.strip():
        lines.append("  worker log (tail):")
        lines += ["    " + ln for ln in r.log_tail.strip().splitlines()[-15:]]
    return "\n".join(lines)
