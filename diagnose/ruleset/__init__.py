"""The rule set as a whole, above the rules: assemble (run every rule on a trace and build the
Diagnosis), rules_table (`diagnose rules`: the cheat sheet and thresholds) and docs (docs/rules/ from
the rules' docstrings). The engine the rules are written against is diagnose/rulebook, below them."""
