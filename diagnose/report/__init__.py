"""Renderers: each turns one Diagnosis into text, JSON or HTML, and nothing else."""
