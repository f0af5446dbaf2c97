"""The report of a run: one typed model, three renderings, the checklist.

- ``model``: ``build`` makes the ``Report`` (scores, pins, checklist rows, repeats,
  legs, bootstrap intervals, covariates, per-task outcomes and grading), once.
- ``jsonform``: ``report.json`` (DeltaScorecard shape) and its byte-stable writer;
  ``schema``: the models of that JSON, shipped as ``runner/schemas/report.schema.json``.
- ``markdown``: ``report.md``; ``html``: ``report.html`` from the JSON form.
- ``checklist`` and ``repeats``: rows and statistics the model holds.
- ``build``: reading a run directory into a report, writing it, replaying it.
"""
