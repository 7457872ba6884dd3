"""Capture: run a workload under torch.profiler in a child process and write a capture folder.

Only the child process (`diagnose.capture.child`) imports torch; the parent side
(`diagnose.capture.runner`) does not, so a crash, an OOM or a hang in the workload cannot
take the reporter down.
"""
