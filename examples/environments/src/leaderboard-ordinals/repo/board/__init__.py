"""Leaderboards for a game server."""
