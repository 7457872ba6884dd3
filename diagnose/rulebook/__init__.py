"""The rulebook: the rules engine, the Diagnosis it assembles, the cheat sheet and rule docs read from the rules."""
