"""Capture, the parent side: run a workload in a child process and get a capture folder back.

The child program (`python -m diagnose.child.capture`, diagnose/child) is the only code that imports
torch; this side (runner.py, distributed.py for torchrun, sweep.py, the one launcher launch.py and
the guard that ends a run's whole process tree) does not, so a crash, an OOM or a hang in the
workload cannot take the reporter down. spec.py is what the parent hands the child.
"""
