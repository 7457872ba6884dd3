"""Several ranks of one distributed job, analysed together.

- discover.py   which traces a folder holds and which rank each one is (trace layer)
- profile.py    one rank's compact cross-rank profile: compute, collectives in order, ops (analysis layer)
- model.py      the cross-rank model: collectives matched across ranks, sync wait vs transfer (analysis layer)
- analyse.py    per-rank analysis in worker processes, at most W traces in flight, and the
                combined Diagnosis (above assemble)
- cluster.py    the same per-rank analysis as Dask tasks (`--cluster`), the driver holding only results
"""
