"""The rulebook: the rules engine (Rule, Context, the needs registry, running rules, the verdict) that
the rules in diagnose/rules are written against. What reads the whole rule set is diagnose/ruleset."""
