"""The cross-rank model of a distributed job, below the rules (the straggler rule reads it).

- profile.py    one rank's compact cross-rank profile: compute, collectives in order, ops
- host_lead.py  a CPU rank's host time before each of its collectives (profile.py's lead-ins)
- model.py      the RankSet: collectives matched across ranks, sync wait vs transfer
- timed.py      who waits for whom in the unprofiled timed steps (the ranks' arrivals.json)
- late_cause.py the straggler of the timed steps and its cause in the profiled ones

Finding a folder's rank traces is diagnose/trace/rank_files.py; analysing the ranks in worker
processes (or Dask tasks) and combining their Diagnoses is diagnose/ranks, above the rules.
"""
