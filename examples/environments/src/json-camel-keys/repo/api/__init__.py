"""Serialisation helpers of a small JSON API."""
