"""Test workload in script mode: a script that never touches torch."""

total = sum(i * i for i in range(100_000))
print("no torch here", total)
