"""Installed agents: released agent CLIs (Claude Code, Codex, aider, mini-swe-agent) fetched on
the coordinator with the user's own package clients, layered onto the task's image, and run
headless under the harness's rules. One module per catalogue entry (``catalogue.py`` lists
them); ``kind.py`` is what an entry provides."""
