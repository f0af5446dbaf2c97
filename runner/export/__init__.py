"""``deltarun export``: a run directory as a replay kit another team can check (``kit``), its
own README and replay script (``kit_files``), and the command's steps (``kit_steps``).
"""
