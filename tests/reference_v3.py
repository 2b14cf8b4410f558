"""An independent reading of cost model version 3 (tests only): docs/cost-model.md, 3-5 and 12.

Written from the text, on the plain JSON dicts of a `planopt.profile/3`
(or /2, /1) profile and a `planopt.plan/2` (or /1) plan; it imports nothing
from planopt and does not follow `planopt/simulate.py`'s structure: times
come from a memoised recursion over each operation's predecessors (its
queue's previous operation, and what it waits for), not from one pass, and
memory from a per-instant sweep ("every decrease before every increase").

Readings where the text could be read two ways (each is what this module does):

- A partial layer's step `i` is `R_i` then `B_i`; as a reader of `x_i` it reads
  until the end of `B_i` (the text: "`x_i`'s last backward reader is `B_i`
  unless `B_{i-1}` reads it").
- `R_i` of duration 0 still allocates the regenerated internals at its start
  (the start of `B_i`); they live to the end of `B_i`.
- The last backward reader of a product is the reader that ends last in time.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import cache

KEEP, SWAP, RECOMPUTE = "keep", "swap", "recompute"


@dataclass(frozen=True)
class RefV3Result:
    makespan: float
    peak_bytes: int


def _layer(raw: dict, v1: bool) -> dict:
    if v1:
        return {
            "fwd": raw["fwd"], "bwd": raw["bwd"], "o": raw["saved_bytes"], "s": 0,
            "si": False, "so": True, "g": 0, "pg": 0,
            "fw": raw.get("fwd_work_bytes", 0), "bw": raw.get("bwd_work_bytes", 0), "menu": {},
        }  # fmt: skip
    return {
        "fwd": raw["fwd"], "bwd": raw["bwd"], "o": raw["out_bytes"], "s": raw.get("saved_bytes", 0),
        "si": raw.get("saves_input", False), "so": raw.get("saves_output", False),
        "g": raw.get("input_grad_bytes", 0), "pg": raw.get("param_grad_bytes", 0),
        "fw": raw.get("fwd_work_bytes", 0), "bw": raw.get("bwd_work_bytes", 0),
        "menu": {
            o["name"]: (o["saved_bytes"], o["recompute"], o.get("regen_work_bytes", 0))
            for o in raw.get("options", [])
        },
    }  # fmt: skip


def reference_v3(profile: dict, plan: dict) -> RefV3Result:
    """Makespan and peak of `plan` on `profile`, read from the text."""
    v1 = profile["format"] == "planopt.profile/1"
    L = [_layer(raw, v1) for raw in profile["layers"]]
    n = len(L)
    dev = profile["device"]
    lat = dev.get("transfer_latency", 0.0)
    entries = plan["layers"]
    act = [e["action"] for e in entries]
    opt = [L[i]["menu"][e["option"]] if e.get("option") else None for i, e in enumerate(entries)]
    pre = [e.get("prefetch_at") for e in entries]
    wait = [e.get("swap_wait") for e in entries]

    # -- who reads what (sections 2, 3, 12.2) --------------------------------------
    def reads_in(i: int) -> bool:  # step i reads x_i: saves_input, or partial
        return i < n and (L[i]["si"] or opt[i] is not None)

    runs = []  # (first, top, step u)
    i = 0
    while i < n:
        if act[i] == RECOMPUTE:
            j = i
            while j + 1 < n and act[j + 1] == RECOMPUTE:
                j += 1
            u = j + 1 if j + 1 < n and reads_in(j + 1) else j
            runs.append((i, j, u))
            i = j + 1
        else:
            i += 1
    block_at = {u: (f, t) for f, t, u in runs}
    base_of = {f - 1: u for f, t, u in runs if f > 0}  # layer k -> step of the block it feeds

    def out_read(i: int) -> bool:
        return L[i]["so"] or reads_in(i + 1) or i in base_of

    def kept(i: int) -> int:  # internals that stay from F_i to B_i
        return L[i]["s"] if opt[i] is None else opt[i][0]

    def copy_size(i: int) -> int:
        return kept(i) + (L[i]["o"] if out_read(i) else 0)

    # -- operations and what each waits for (sections 4, 12.3) -----------------
    # Compute stream order.
    stream: list[tuple] = [("F", i) for i in range(n)]
    for j in range(n - 1, -1, -1):
        if j in block_at:
            f, t = block_at[j]
            stream += [("RF", k) for k in range(f, t + 1)]
        if opt[j] is not None:
            stream.append(("R", j))
        stream.append(("B", j))
    prev_compute = {op: stream[k - 1] if k else None for k, op in enumerate(stream)}
    swapped = [i for i in range(n) if act[i] == SWAP]
    prev_out = {i: (swapped[k - 1] if k else None) for k, i in enumerate(swapped)}
    # H2D order: by issue step from L-1 down, highest layer first within a step.
    back_order = sorted(swapped, key=lambda i: (-pre[i], -i))
    prev_back = {i: (back_order[k - 1] if k else None) for k, i in enumerate(back_order)}

    def duration(op: tuple) -> float:
        kind, i = op
        if kind == "F" or kind == "RF":
            return L[i]["fwd"]
        if kind == "B":
            return L[i]["bwd"]
        if kind == "R":
            return opt[i][1]
        bw = dev["d2h_bandwidth"] if kind == "OUT" else dev["h2d_bandwidth"]
        return lat + copy_size(i) / bw

    def step_waits(j: int) -> list[int]:
        """Swapped layers whose copy back step j's first operation (R_j or B_j) waits for."""
        own = (kept(j) > 0 if opt[j] is not None else L[j]["s"] > 0) or L[j]["so"]
        out = [j] if act[j] == SWAP and own else []
        if j > 0 and reads_in(j) and act[j - 1] == SWAP:
            out.append(j - 1)
        return out

    def issue(j: int) -> float:
        return end(("F", n - 1)) if j == n - 1 else end(("B", j + 1))

    @cache
    def start(op: tuple) -> float:
        kind, i = op
        ready = [0.0]
        if kind in ("F", "RF", "R", "B"):
            before = prev_compute[op]
            if before is not None:
                ready.append(end(before))
        if kind == "F":
            ready += [end(("OUT", w)) for w in swapped if wait[w] == i]
        elif kind == "RF":
            f = next(f for f, t, _ in runs if f <= i <= t)
            if i == f and f > 0 and act[f - 1] == SWAP:
                ready.append(end(("BACK", f - 1)))
        elif kind == "R" or (kind == "B" and opt[i] is None):
            # Step i's first operation waits for its copies back (B_i follows R_i at once).
            ready += [end(("BACK", w)) for w in step_waits(i)]
        elif kind == "OUT":
            ready.append(end(("F", i)))
            if prev_out[i] is not None:
                ready.append(end(("OUT", prev_out[i])))
        elif kind == "BACK":
            ready += [issue(pre[i]), end(("OUT", i))]
            if prev_back[i] is not None:
                ready.append(end(("BACK", prev_back[i])))
        return max(ready)

    @cache
    def end(op: tuple) -> float:
        return start(op) + duration(op)

    ops = stream + [("OUT", i) for i in swapped] + [("BACK", i) for i in swapped]
    makespan = max(end(op) for op in ops)

    # -- memory (sections 5, 12.4, 12.6) ---------------------------------------------
    held: list[tuple[float, float, int]] = []  # (alloc, free, bytes)

    def block_first_end(i: int) -> float:  # the block fed by base i ends its first forward
        return end(("RF", i + 1))

    def out_last_read(i: int) -> float:
        ends = []
        if L[i]["so"]:
            ends.append(end(("B", i)))
        if reads_in(i + 1):
            ends.append(end(("B", i + 1)))
        if i in base_of:
            ends.append(block_first_end(i))
        return max(ends)

    def fwd_use(i: int) -> float:
        return end(("F", i + 1)) if i + 1 < n else end(("F", i))

    for i in range(n):
        x = L[i]
        f0, f1 = start(("F", i)), end(("F", i))
        held.append((f0, f1, x["fw"]))
        # internals: the kept part (a partial layer's h_k), and the dropped part
        k = kept(i)
        if opt[i] is not None:
            held.append((f0, f1, x["s"] - k))
        if k > 0:
            if act[i] == KEEP:
                held.append((f0, end(("B", i)), k))
            elif act[i] == SWAP:
                held.append((f0, max(end(("OUT", i)), f1), k))
            else:
                held.append((f0, f1, k))
        # output
        if out_read(i) and act[i] == KEEP:
            held.append((f0, out_last_read(i), x["o"]))
        elif out_read(i) and act[i] == SWAP:
            held.append((f0, max(end(("OUT", i)), fwd_use(i)), x["o"]))
        else:
            held.append((f0, fwd_use(i), x["o"]))
        # copied back
        if act[i] == SWAP:
            b0 = start(("BACK", i))
            held.append((b0, end(("B", i)), k))
            if out_read(i):
                held.append((b0, out_last_read(i), x["o"]))
        # regenerated in a block
        if act[i] == RECOMPUTE:
            r0, r1 = start(("RF", i)), end(("RF", i))
            held.append((r0, r1, x["fw"]))
            held.append((r0, end(("B", i)), x["s"]))
            top = i + 1 >= n or act[i + 1] != RECOMPUTE
            use = r1 if top else end(("RF", i + 1))
            if L[i]["so"] or reads_in(i + 1):
                held.append((r0, out_last_read(i), x["o"]))
            else:
                held.append((r0, use, x["o"]))
        # a partial layer's regeneration
        if opt[i] is not None:
            g0, g1 = start(("R", i)), end(("R", i))
            held.append((g0, end(("B", i)), x["s"] - k))
            held.append((g0, g1, opt[i][2]))
        # backward: gradients, parameter gradients, scratch (signed)
        b0, b1 = start(("B", i)), end(("B", i))
        held.append((b0, end(("B", i - 1)) if i > 0 else b1, x["g"]))
        held.append((b0, math.inf, x["pg"]))
        held.append((b0, b1, x["bw"]))

    # Sweep: at each instant every decrease, then every increase; measure after.
    changes: dict[float, list[int]] = {}
    for a, f, nbytes in held:
        if nbytes == 0 or not f > a:
            continue
        changes.setdefault(a, []).append(nbytes)
        if f != math.inf:
            changes.setdefault(f, []).append(-nbytes)
    level = peak = profile["static_bytes"]
    for instant in sorted(changes):
        deltas = changes[instant]
        level += sum(d for d in deltas if d < 0)
        level += sum(d for d in deltas if d > 0)
        peak = max(peak, level)
    return RefV3Result(makespan, peak)


# -- random /3 chains and plans (plain dicts) ----------------------------------------


def random_v3_chain(rng: random.Random, n: int) -> dict:
    """A random `/3` profile: real layers' flag mix, menus, signed scratch within the floor."""
    layers = []
    for i in range(n):
        si, so = rng.choice([(True, False), (False, True), (False, False), (True, True)])
        s = rng.choice([0, 0, rng.randint(1, 400)])
        menu = []
        if rng.random() < 0.5:
            s = s or rng.randint(1, 400)
            for k in range(rng.randint(1, 3)):
                menu.append({
                    "name": f"o{k}", "saved_bytes": rng.randint(0, s),
                    "recompute": rng.choice([0.0, rng.randint(1, 16) / 8]),
                    "policy": [k], "regen_work_bytes": rng.choice([0, rng.randint(0, 50)]),
                })  # fmt: skip
        layer = {
            "name": f"l{i}", "fwd": rng.randint(0, 16) / 8, "bwd": rng.randint(0, 16) / 8,
            "out_bytes": rng.randint(0, 300), "saved_bytes": s, "saves_input": si,
            "saves_output": so, "input_grad_bytes": rng.randint(0, 200) if i else 0,
            "param_grad_bytes": rng.choice([0, rng.randint(0, 100)]),
            "fwd_work_bytes": rng.choice([0, rng.randint(0, 100)]), "bwd_work_bytes": 0,
        }  # fmt: skip
        if menu:
            layer["options"] = menu
        layers.append(layer)
    for i, layer in enumerate(layers):
        if rng.random() < 0.4:
            frees = layer["saved_bytes"] + (layer["out_bytes"] if layer["saves_output"] else 0)
            frees += layers[i + 1]["input_grad_bytes"] if i + 1 < n else 0
            if i > 0 and layer["saves_input"] and not layers[i - 1]["saves_output"]:
                frees += layers[i - 1]["out_bytes"]
            layer["bwd_work_bytes"] = -rng.randint(0, frees)
        elif rng.random() < 0.5:
            layer["bwd_work_bytes"] = rng.randint(0, 100)
    bw = rng.choice([1.0, 16.0, 64.0, 256.0])
    return {
        "format": "planopt.profile/3", "name": "rand-v3",
        "device": {"name": "d", "h2d_bandwidth": bw, "d2h_bandwidth": rng.choice([bw, 2 * bw]),
                   "transfer_latency": rng.choice([0.0, 0.125])},
        "static_bytes": rng.randint(0, 500), "layers": layers,
    }  # fmt: skip


def plan_v3(actions, prefetch, wait, options) -> dict:
    """A `/2` plan file from per-layer lists (an enumerated plan: actions as their names)."""
    entries = []
    for i, action in enumerate(actions):
        entry: dict = {"action": str(action)}
        if options[i] is not None:
            entry["option"] = options[i]
        if str(action) == SWAP:
            entry["prefetch_at"] = prefetch[i]
            entry["swap_wait"] = wait[i]
        entries.append(entry)
    return {"format": "planopt.plan/2", "layers": entries}


def random_v3_plan(rng: random.Random, profile: dict) -> dict:
    """A random valid `/2` plan: any actions, options on kept/swapped layers, valid ranges."""
    layers = profile["layers"]
    n = len(layers)
    act = [rng.choice([KEEP, SWAP, RECOMPUTE]) for _ in range(n)]
    opt = [
        rng.choice([None, *(o["name"] for o in x.get("options", []))]) if a != RECOMPUTE else None
        for a, x in zip(act, layers, strict=True)
    ]

    def reads_in(i: int) -> bool:
        return i < n and (layers[i]["saves_input"] or opt[i] is not None)

    need = list(range(n))  # need(i): highest step reading layer i's products
    for i in range(n):
        if i + 1 < n and reads_in(i + 1):
            need[i] = max(need[i], i + 1)
        if i + 1 < n and act[i + 1] == RECOMPUTE and act[i] != RECOMPUTE:
            t = i + 1
            while t + 1 < n and act[t + 1] == RECOMPUTE:
                t += 1
            need[i] = max(need[i], t + 1 if t + 1 < n and reads_in(t + 1) else t)
    entries = []
    for i in range(n):
        e: dict = {"action": act[i]}
        if opt[i] is not None:
            e["option"] = opt[i]
        if act[i] == SWAP:
            e["prefetch_at"] = rng.randint(need[i], n - 1)
            e["swap_wait"] = rng.randint(i + 1, n - 1) if i < n - 1 and rng.random() < 0.3 else None
        entries.append(e)
    return {"format": "planopt.plan/2", "layers": entries}
