"""The ``openai`` agent kind: the tool loop, the tool policy, the toolbox, the HTTP client."""
