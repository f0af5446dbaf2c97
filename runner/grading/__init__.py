"""What decides a verdict: the grading policy, the verify phase, the declared tests'
verdict, outcomes, metrics, validation.
"""
