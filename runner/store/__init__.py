"""The run directory: the one contract between the half of deltarun that writes records
(the run service, the Celery coordinator) and the half that reads them (report, viewer,
status, replay). ``rundir`` is the directory and its ledger; ``setup_warnings`` what the
records say about a suite's setup; ``changes`` what a re-verification changed.
"""
