"""The base layer: what every other layer may use (version, errors, safe file writing, number formats, declared thresholds, GPU peaks, step timing, measured peaks, groupby aggregation)."""
