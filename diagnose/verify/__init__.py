"""`--verify`: apply each finding's fix from outside the user's code, measure it, check its numerics.

plan.py says which fixes can be applied from outside (and how), run.py runs one child process per
fix (diagnose/child/verify.py) and reads back what it measured, model.py holds the result and
numerics.py turns the measurements into the verdict a report shows.
"""

from diagnose.verify.model import FixTrial, Verification
from diagnose.verify.plan import APPLICABLE, plan_trials

__all__ = ["APPLICABLE", "FixTrial", "Verification", "plan_trials"]
