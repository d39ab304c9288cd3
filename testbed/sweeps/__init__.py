"""Sweeps: experiments as sweeps of runs (resume, progress), the main job. Imports every layer below it."""
