"""Statistics and the scoring of records: pure, checked against SciPy and statsmodels."""
