"""A run: preparation, the run service, the run directory, status, validation runs, the
replay kit.
"""
