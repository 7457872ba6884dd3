"""Trace: read a kineto trace (ours or anyone's) once into typed pandas frames."""

from diagnose.trace.model import Trace
from diagnose.trace.load import load_target

__all__ = ["Trace", "load_target"]
