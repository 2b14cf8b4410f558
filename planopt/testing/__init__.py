"""The known-answer bank: instances with proven optima, and the rules every method must keep.

Like cvxpy's `StandardTestLPs` or PuLP's solver test matrix, this is
shipped so a user can run it against their own registered method:

    from planopt.testing import load_bank, check_method
    for instance in load_bank():
        assert not check_method("my-method", instance), instance.name

Each `Instance` is a profile, a budget and the optimum of every plan space
(None where no plan of that space fits), with where the figures come from:
worked by hand (the reasoning is in `why`) or enumerated by brute force
over every plan (`source` names the generator and seed). `check_method`
states what a method of each role owes (see `planopt.registry.Role`).
"""

from planopt.testing.bank import Instance, check_method, load_bank

__all__ = ["Instance", "check_method", "load_bank"]
