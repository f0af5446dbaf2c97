"""romanum: conversion between integers and Roman numerals."""

from romanum.convert import MAX_VALUE, from_roman, is_roman, to_roman

__all__ = ["MAX_VALUE", "from_roman", "is_roman", "to_roman"]
