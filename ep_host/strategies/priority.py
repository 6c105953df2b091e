"""Strategy ``priority``: each node on the first provider in the user's order that claims it,
as onnxruntime places; costs are ignored."""

from __future__ import annotations

from ep_host.strategies import PlacementRequest, register


@register("priority", "the first provider in --providers order that claims the node "
          "(onnxruntime's rule)")
def place(request: PlacementRequest) -> list[str]:
    return [next(iter(claim)) for claim in request.claims]
