"""humanizer: a tool built on a third-party pure-Python package (humanize)."""

import humanize
from stockade import tool


@tool("humanizer.size")
def size(input):
    return {"text": humanize.naturalsize(input["bytes"])}
