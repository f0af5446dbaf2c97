"""``deltarun view``: a run's trials, task by task and arm by arm, in a browser.

``source`` reads a run directory (defensively: a record the schema does not know is
shown with a note); ``records`` and ``text`` turn one record into what a page shows;
``matrix`` builds the task × arm index; ``assets`` and ``app_js`` are the page, its
style and its script; ``bundle`` writes them as static files, ``serve`` serves them.
Everything that came from a sandbox reaches the page as data and is set as text.
"""
