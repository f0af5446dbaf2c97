"""``deltarun import seed000`` and ``deltarun import seed004``: the design documents' own
formats read into deltarun suites.

Seed 000 is a protocol YAML (``protocol_id``, ``dataset``, ``metrics``, ``control``,
``runtime``, ``candidate``) over a JSON Lines file of answer tasks; seed 004 is a
four-file replay kit (``tasks.jsonl`` of repository tasks graded by a hidden test
command, ``metrics.py``, ``controls.yaml``, ``replay.sh``). Every field either maps
to a deltarun field or is named in one line saying why it cannot (a warning when
harmless, exit 2 when it would change what the numbers mean);
``docs/seed-formats.md`` is the table.

``fields.py`` reads the seeds' files and fields (one-line errors), ``protocol.py``
and ``kit.py`` map each format (pure but for reading the inputs), ``hidden.py``
turns a hidden test command into declared tests and splits a fixture,
``arms.py`` the arms given on the command line, ``python_pin.py`` asks an image
its Python, ``writer.py`` writes the suite and ``workflow.py`` imports and seals.
"""
