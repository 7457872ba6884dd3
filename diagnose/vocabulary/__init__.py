"""The one vocabulary: what names in a trace mean, and how numbers are written.

Every other module asks here rather than keeping its own pattern or table
(tests/test_vocabulary.py holds them to it):

- `kernels`      a GPU kernel's kind (gemm, conv, attention, …), tensor-core use, family, layout
                 conversions and the weight formats its name says
- `collectives`  whether a kernel or CPU op is collective communication, and which collective
- `ops`          which CPU ops are matmuls, convolutions, attention (SDPA and its backends), …
- `dtypes`       a dtype in either spelling -> precision (the peak-table key) -> bytes per element;
                 the precision rungs' names and groups (fp32/TF32, 16-bit, below fp32)
- `markers`      the step ranges (`diagnose/step N`, `ProfilerStep#N`) and iteration marks
- `runtime`      which CUDA/HIP runtime calls on the host launch GPU work, wait for it or capture
                 graphs, and what a copy's name says (direction, pageable or pinned memory)
- `compiled`     torch.compile's marks: compiled regions, graph calls, dynamo's own ranges, compiling
- `units`        numbers, durations and percentages for people

Each answer depends on a name alone and is cached per distinct name; nothing here needs pandas,
and nothing here imports the rest of diagnose (it sits at the base of the layers).
"""
