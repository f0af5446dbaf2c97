"""A suite: task lines, sealing, per-task checks, environments, the plan of jobs, the
starter scaffold.
"""
