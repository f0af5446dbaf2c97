"""Sandboxes: the interface trial code programs against, and its Docker implementation."""
