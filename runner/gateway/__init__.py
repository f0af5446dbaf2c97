"""The model gateway's proxy: the code that runs in the ``deltarun/model-proxy`` image.

``proxy.py`` forwards a sandbox's model requests to the one upstream (its ``main`` is the
image's command: ``python3 -m gateway.proxy``), ``wire.py`` reads what each answer says
about itself (model, tokens, tool calls), ``budget.py`` holds the trial's budget and says
no in each API's shape. The harness's side (creating the gateway, reading its accounting)
is ``runner.sandbox.gateway_container``.

Standard library only, and no import from the rest of ``runner``: the image holds this
package alone, copied as ``/opt/proxy/gateway/`` (scripts/build-images.sh), so its modules
import one another relatively. It sits on the lowest floor of the layering for that reason.
"""

from __future__ import annotations

from importlib import resources

# The image's copy of this package (``/opt/proxy/gateway``) and the module it runs.
IMAGE_PACKAGE = "gateway"


def sources() -> dict[str, bytes]:
    """Every module of the package by file name, as shipped: what the image must hold."""
    package = resources.files(__name__)
    return {
        entry.name: entry.read_bytes()
        for entry in package.iterdir()
        if entry.name.endswith(".py") and entry.is_file()
    }
