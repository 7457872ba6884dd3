"""Several ranks of one distributed job, analysed together (above the rules).

- analyse.py    per-rank analysis in worker processes, at most W traces in flight, and the
                combined Diagnosis (above ruleset/assemble)
- cluster.py    the same per-rank analysis as Dask tasks (`--cluster`), the driver holding only results

Which traces a folder holds is diagnose/trace/rank_files.py; the cross-rank model the straggler
rule reads (profiles, matched collectives, timed arrivals) is diagnose/rankset.
"""
