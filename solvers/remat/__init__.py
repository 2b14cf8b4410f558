"""The recompute-only space solved exactly by dynamic programming over kept layers.

* `chain`: the theorem. A keep/recompute plan's peak, cut into segments
  (a kept layer and the run above it) whose memory is `H + c(k, t)`; exact
  for every v2 profile, zero durations included.
* `bounds`: the Lagrangian bound on what the layers above can still save.
* `labels`: the exact Pareto-label search over kept layers, pruned by it.
* `optimum`: targets, searches and the proof at one budget.
* `minpeak`: the space's minimum budget (the smallest peak of any plan).
* `short`: the same searches in plain Python for chains up to 64 layers,
  where numpy's call overheads would be most of the time; `pychain`: the
  segment costs they read, as Python lists, each row only as long as a
  budget needs.
* `reach`: whether any plan fits, and the space's minimum budget, by
  passes that keep one `H` per layer (no labels), on `pychain`'s rows;
  exact at any length, so long chains below the minimum are answered
  before the numpy model is built (a greedy walk asks first).
* `floor`: a lower bound on the space's minimum budget from the layers
  alone, which answers "infeasible" before any model is built.
* `certify`: what a solve proves, in a form the tests check independently.
* Menus (cost model v3: keep whole, keep an option, or recompute): `menus`
  (the theorem extended), `menu_edges` (the segments a layer at a time),
  `menu_graph` (edges, lookahead, the bound each cap may use),
  `menu_bound` (the Lagrangian bound), `menu_search` (the labels under a
  cap), `menu_optimum` (caps from the bound, then the whole-layer start).

The registered method is `solvers.remat_dp` ("remat-dp").
"""
