"""The model layer: the typed findings model, its invariants, the fixes' text and code, configuration and the user's framework."""
