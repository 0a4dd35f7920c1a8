"""The run matrix (models x tasks x configs x seeds), its durable store and the embedded executor.

`d2k run` is `d2kbench.runs.command`; docs/runs.md describes the cell key, the store and resume.
"""
