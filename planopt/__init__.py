"""planopt: plan keep/swap/recompute of saved activations for GPU training.

The planner needs no torch; `planopt.runtime` (the executor and profiler)
does, and is imported only on demand.
"""

from planopt.api import lower_bound, solve
from planopt.blocks import BlockStructure, Repeat, find_blocks
from planopt.budget import (
    budget_from_fraction,
    keep_all_peak,
    min_budget,
    min_budget_info,
    min_memory_plan,
    parse_budget,
)
from planopt.bundled import bundled_profile, bundled_profile_names
from planopt.errors import (
    BudgetError,
    FormatError,
    InvalidPlanError,
    InvalidProfileError,
    OutputPathError,
    PlanoptError,
    ProfileMismatchError,
    SolverCrashError,
    SolverOptionError,
    SolverUnavailableError,
    UnknownMethodError,
)
from planopt.io import load_plan, load_profile, save_plan, save_profile
from planopt.plan import Action, Plan
from planopt.profile import Device, Layer, LayerOption, Profile
from planopt.random_chain import random_chain, repeated_chain
from planopt.result import Solution, Status
from planopt.schedule import Operation, Schedule
from planopt.simulate import Scorer, simulate

__version__ = "0.1.0"

__all__ = [
    "Action",
    "BlockStructure",
    "BudgetError",
    "Device",
    "FormatError",
    "InvalidPlanError",
    "InvalidProfileError",
    "Layer",
    "LayerOption",
    "Operation",
    "OutputPathError",
    "Plan",
    "PlanoptError",
    "Profile",
    "ProfileMismatchError",
    "Repeat",
    "Schedule",
    "Scorer",
    "Solution",
    "SolverCrashError",
    "SolverOptionError",
    "SolverUnavailableError",
    "Status",
    "UnknownMethodError",
    "budget_from_fraction",
    "bundled_profile",
    "bundled_profile_names",
    "find_blocks",
    "keep_all_peak",
    "load_plan",
    "load_profile",
    "lower_bound",
    "min_budget",
    "min_budget_info",
    "min_memory_plan",
    "parse_budget",
    "random_chain",
    "repeated_chain",
    "save_plan",
    "save_profile",
    "simulate",
    "solve",
]
