"""The kernel judge: runs candidate code in worker processes and decides verdicts in the parent.

The worker (`d2kbench.evaluate.worker`) imports only `channel`, `integrity` and `timing`, so this
package's `__init__` stays free of imports.
"""
