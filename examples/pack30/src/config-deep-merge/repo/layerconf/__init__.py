"""layerconf: layered JSON configuration."""

from layerconf.load import load_layers
from layerconf.merge import merge, merge_all

__all__ = ["load_layers", "merge", "merge_all"]
