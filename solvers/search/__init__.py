"""The search tier: improve whole-chain plans, every candidate scored by the simulator.

* `engine`: the incumbent plan; the only code that probes, commits,
  snapshots and restores. Neighbourhoods propose changes, the engine
  decides.
* `moves`: layer and group moves, pair moves, kicks (iterated local search).
* `windows`: exact windows, a window of layers re-optimised by CP-SAT on the
  whole-chain model with every other layer pinned.
* `driver`: phases run in order until a round improves nothing or the
  limits stop it.
* `starts`: the starting plans every search and exact method shares (the
  warm-start portfolio).

Methods (`solvers.lns`, `solvers.blocks`, `solvers.exact`'s polish) are
compositions of these. Every loop is stopped by `Problem.expired()`, which
counts work (simulations, CP-SAT's deterministic time) as well as seconds,
so a work-limited search ends at the same candidate on any machine.
"""
