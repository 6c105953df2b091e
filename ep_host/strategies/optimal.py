"""Strategy ``optimal`` (the default): node costs plus the device copies and partition launches
they imply, minimised by :mod:`ep_host.min_cut` from the better of ``greedy`` and ``priority``;
exact for two devices (a compiling provider counts as a device of its own), alpha-expansion for
more. Choosing it fills ``Placement.comparison``."""

from __future__ import annotations

from ep_host.strategies import PlacementRequest, register


@register("optimal", "least node cost plus device copies", compares=True)
def place(request: PlacementRequest) -> list[str]:
    from ep_host.min_cut import optimal_assignment

    if all(len(claim) == 1 for claim in request.claims):  # nothing to choose
        return [next(iter(claim)) for claim in request.claims]
    problem = request.objective
    index = {p: i for i, p in enumerate(problem.providers)}
    greedy = [index[p] for p in request.placed_by("greedy")]
    priority = [index[p] for p in request.placed_by("priority")]
    greedy_us, priority_us = request.estimated_us("greedy"), request.estimated_us("priority")
    best, best_us = (greedy, greedy_us) if greedy_us <= priority_us else (priority, priority_us)
    if len({problem.prov_group[p] for opts in problem.options for p in opts}) >= 2:
        best, _ = optimal_assignment(problem, best, best_us, greedy, priority)
    return [problem.providers[p] for p in best]
