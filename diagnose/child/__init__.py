"""The torch child programs: the code that runs inside the workload's process, the only code of
diagnose that imports torch. The parent side that starts them (diagnose/capture) never does.

- capture.py     `python -m diagnose.child.capture SPEC`: runs the workload under torch.profiler and
                 writes the capture folder (steps.py finds a script's steps; sampler.py samples its
                 Python stacks; memory.py and memory_summary.py record the allocator; compile_log.py
                 reads torch.compile's account; arrivals.py times the ranks' collectives;
                 model_census.py names the models and libraries it holds)
- verify.py      `python -m diagnose.child.verify SPEC`: one --verify fix applied to the step, timed and
                 compared (rewrite.py and quantize.py apply fixes, compare.py checks outputs)
- gpu_probe.py   `python -m diagnose.child.gpu_probe`: this GPU's bandwidth and matmul rates
                 (triton_kernels.py where Triton is installed)
"""
