"""Strategy ``greedy``: each node on its cheapest claimant by ``total_us``, ignoring the copies
that choice implies; ties go to the first in the user's order."""

from __future__ import annotations

from ep_host.strategies import PlacementRequest, register


@register("greedy", "each node's cheapest provider")
def place(request: PlacementRequest) -> list[str]:
    chosen = []
    for claim in request.claims:  # providers in the user's order: the first of equal costs wins
        best, best_us = None, 0.0
        for provider, total_us in claim.items():
            if best is None or total_us < best_us:
                best, best_us = provider, total_us
        chosen.append(best)
    return chosen
